package enforce

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// stageWith parses doc and builds its stage with o in front of upstream.
func stageWith(t *testing.T, doc string, o PolicyOptions, upstream http.Handler) http.Handler {
	t.Helper()
	p, err := trafficpolicy.Parse(doc)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	st, err := NewTrafficPolicyWith(p, o)
	if err != nil {
		t.Fatalf("stage: %v", err)
	}
	return st.Wrap(upstream)
}

// echoUpstream answers with the request's body and its X-Seen header.
var echoUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "seen="+r.Header.Get("X-Seen")+" body="+string(b))
})

// TestPolicyBasicAuth: basic-auth admits a listed pair, challenges anything else with the realm
// (ngrok by default), lets everything on with enforce: false, renders interpolated credentials
// per request, and records its results for later rules.
func TestPolicyBasicAuth(t *testing.T) {
	h := stageWith(t, `{"on_http_request":[
	  {"actions":[{"type":"basic-auth","config":{"credentials":["alice:password1","${req.headers['x-user'][0]}:password2"],"realm":"Admin \"Area\""}}]},
	  {"actions":[{"type":"add-headers","config":{"headers":{"x-seen":"${actions.ngrok.basic_auth.credentials.username} ${string(actions.ngrok.basic_auth.credentials.authorized)}"}}}]}]}`, PolicyOptions{}, echoUpstream)
	do := func(user, pass string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "https://a.test/", nil)
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("alice", "password1", nil); w.Code != 200 || !strings.HasPrefix(w.Body.String(), "seen=alice true") {
		t.Errorf("a listed pair: %d %q", w.Code, w.Body)
	}
	w := do("alice", "wrong-password", map[string]string{"X-User": "bob"})
	if w.Code != 401 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3401" || w.Header().Get("WWW-Authenticate") != `Basic realm="Admin \"Area\"", charset="UTF-8"` {
		t.Errorf("a wrong password: %d %v", w.Code, w.Header())
	}
	if w := do("", "", map[string]string{"X-User": "bob"}); w.Code != 401 {
		t.Errorf("no credentials: %d", w.Code)
	}
	if w := do("bob", "password2", map[string]string{"X-User": "bob"}); w.Code != 200 {
		t.Errorf("an interpolated credential: %d %q", w.Code, w.Body)
	}
	if w := do("bob", "password2", map[string]string{"X-User": "carol"}); w.Code != 401 {
		t.Errorf("an interpolated credential for someone else: %d", w.Code)
	}
	// The interpolated credential's header is missing: it cannot render, and a request no
	// literal pair admits fails rather than being judged on a broken credential.
	if w := do("carol", "password2", nil); w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3900" {
		t.Errorf("an interpolated credential that cannot render: %d %v", w.Code, w.Header())
	}
	open := stageWith(t, `{"on_http_request":[{"actions":[{"type":"basic-auth","config":{"credentials":["alice:password1"],"enforce":false}}]}]}`, PolicyOptions{}, echoUpstream)
	if w := serve(open, "GET", "https://a.test/", nil); w.Code != 200 {
		t.Errorf("enforce false: %d", w.Code)
	}
	def := stageWith(t, `{"on_http_request":[{"actions":[{"type":"basic-auth","config":{"credentials":["${req.headers['x-cred'][0]}"]}}]}]}`, PolicyOptions{}, echoUpstream)
	if w := serve(def, "GET", "https://a.test/", map[string]string{"X-Cred": "short"}); w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3900" {
		t.Errorf("a credential rendering to no user:password: %d %v", w.Code, w.Header())
	}
	if w := serve(def, "GET", "https://a.test/", map[string]string{"X-Cred": "u:12345678"}); w.Code != 401 || w.Header().Get("WWW-Authenticate") != `Basic realm="ngrok", charset="UTF-8"` {
		t.Errorf("the default realm: %d %v", w.Code, w.Header())
	}
}

// TestPolicyCircuitBreaker: with ngrok's example (threshold 0, volume 1) the second request is
// refused 503 ERR_NGROK_3202; failures trip a breaker with the default threshold; enforce: false
// never refuses; a breaker kept by the caller (PolicyOptions.Breaker) is shared by stages.
func TestPolicyCircuitBreaker(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	h := stageWith(t, `{"on_http_request":[{"actions":[{"type":"circuit-breaker","config":{"error_threshold":0,"volume_threshold":1,"window_duration":"60s","tripped_duration":"2m"}}]}]}`, PolicyOptions{}, ok)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 200 {
		t.Errorf("the first request: %d", w.Code)
	}
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3202" {
		t.Errorf("the second request: %d %v", w.Code, w.Header())
	}
	failing := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(502) })
	kept := map[string]*Breaker{}
	o := PolicyOptions{Breaker: func(key string, make func() *Breaker) *Breaker {
		if kept[key] == nil {
			kept[key] = make()
		}
		return kept[key]
	}}
	doc := `{"on_http_request":[{"actions":[{"type":"circuit-breaker","config":{"volume_threshold":4}}]}]}`
	first, second := stageWith(t, doc, o, failing), stageWith(t, doc, o, failing)
	for range 2 {
		serve(first, "GET", "https://a.test/", nil)
		serve(second, "GET", "https://a.test/", nil)
	}
	if w := serve(second, "GET", "https://a.test/", nil); w.Code != 503 || len(kept) != 1 {
		t.Errorf("after four failures through two stages sharing the breaker: %d, %d breakers", w.Code, len(kept))
	}
	off := stageWith(t, `{"on_http_request":[{"actions":[{"type":"circuit-breaker","config":{"error_threshold":0,"volume_threshold":1,"enforce":false}}]}]}`, PolicyOptions{}, failing)
	for range 3 {
		if w := serve(off, "GET", "https://a.test/", nil); w.Code != 502 {
			t.Errorf("enforce false: %d", w.Code)
		}
	}
}

// TestPolicyCloseConnection: close-connection aborts the request unanswered in either HTTP
// phase (the server then closes the connection).
func TestPolicyCloseConnection(t *testing.T) {
	for _, doc := range []string{
		`{"on_http_request":[{"expressions":["req.url.path == '/dc'"],"actions":[{"type":"close-connection"}]}]}`,
		`{"on_http_response":[{"expressions":["req.url.path == '/dc'"],"actions":[{"type":"close-connection"}]}]}`,
	} {
		h := stageWith(t, doc, PolicyOptions{}, echoUpstream)
		if w := serve(h, "GET", "https://a.test/ok", nil); w.Code != 200 {
			t.Errorf("%s: a request its rule does not match: %d", doc, w.Code)
		}
		got := func() (v any) {
			defer func() { v = recover() }()
			serve(h, "GET", "https://a.test/dc", nil)
			return nil
		}()
		if got != http.ErrAbortHandler {
			t.Errorf("%s: %v, want the handler aborted", doc, got)
		}
	}
}

// TestPolicySetVars: set-vars defines variables of any type, read by later rules' expressions
// and interpolations (a string of exactly one ${…} keeping its type), in the phase it ran in.
func TestPolicySetVars(t *testing.T) {
	h := stageWith(t, `
on_http_request:
  - actions:
      - type: set-vars
        config:
          vars:
            - who: "${req.headers['x-who'][0]}"
            - tags: "${req.url.query_params['t']}"
            - n: 1.5
            - nested: {key: [value1, value2]}
            - greeting: "Hello, ${vars.who}!"
  - expressions: ["vars.who == 'ada' && size(vars.tags) == 2 && vars.nested.key[1] == 'value2'"]
    actions:
      - type: custom-response
        config: {status_code: 200, body: "${vars.greeting} ${vars.tags[1]} ${vars.n}"}
  - actions: [{type: deny}]
on_http_response:
  - expressions: ["!has(vars.who)"]
    actions: [{type: add-headers, config: {headers: {x-phase: fresh}}}]
`, PolicyOptions{}, echoUpstream)
	w := serve(h, "GET", "https://a.test/?t=a&t=b", map[string]string{"X-Who": "ada"})
	if w.Code != 200 || w.Body.String() != "Hello, ada! b 1.5" {
		t.Errorf("set-vars read by a later rule: %d %q", w.Code, w.Body)
	}
	if w := serve(h, "GET", "https://a.test/?t=a", map[string]string{"X-Who": "bob"}); w.Code != 403 {
		t.Errorf("a rule the variables do not match: %d", w.Code)
	}
	resp := stageWith(t, `
on_http_request:
  - actions: [{type: set-vars, config: {vars: [{who: request}]}}]
on_http_response:
  - expressions: ["!has(vars.who)"]
    actions:
      - type: set-vars
        config: {vars: [{status: "${res.status_code}"}]}
      - type: add-headers
        config: {headers: {x-status: "${vars.status}"}}
`, PolicyOptions{}, echoUpstream)
	if w := serve(resp, "GET", "https://a.test/", nil); w.Header().Get("X-Status") != "200" {
		t.Errorf("variables are scoped to their phase: %v", w.Header())
	}
}

// TestPolicyLog: log writes one record per run with the endpoint's account and the evaluated
// metadata, records actions.ngrok.log.metadata, and bounds each account on its own: one
// account over its bound loses records, counted, while another's are all written.
func TestPolicyLog(t *testing.T) {
	var buf syncBuffer
	pl := NewPolicyLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	now := time.Unix(1000, 0)
	pl.now = func() time.Time { return now }
	doc := `{"on_http_request":[{"actions":[
	  {"type":"log","config":{"metadata":{"message":"seen","path":"${req.url.path}","n":[1,true]}}},
	  {"type":"add-headers","config":{"headers":{"x-seen":"${actions.ngrok.log.metadata.path}"}}}]}]}`
	a := stageWith(t, doc, PolicyOptions{Log: pl, Endpoint: &trafficpolicy.Endpoint{Account: "acct_a", ID: "tn_a", URL: "https://a.test"}}, echoUpstream)
	b := stageWith(t, doc, PolicyOptions{Log: pl, Endpoint: &trafficpolicy.Endpoint{Account: "acct_b", ID: "edghts_b", Route: "edghtsrt_b", URL: "https://b.test"}}, echoUpstream)
	if w := serve(a, "GET", "https://a.test/x", nil); !strings.HasPrefix(w.Body.String(), "seen=/x") {
		t.Errorf("actions.ngrok.log.metadata: %q", w.Body)
	}
	for range PolicyLogBurst + 50 {
		serve(b, "GET", "https://b.test/flood", nil)
	}
	for range 10 {
		serve(a, "GET", "https://a.test/y", nil)
	}
	records := map[string]int{}
	var first map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if rec["msg"] == "traffic policy log" {
			records[rec["account"].(string)]++
			if first == nil {
				first = rec
			}
		}
	}
	if records["acct_a"] != 11 || records["acct_b"] != PolicyLogBurst {
		t.Errorf("records per account: %v, want 11 for a and %d for b", records, PolicyLogBurst)
	}
	if written, dropped := pl.Counts(); written != uint64(11+PolicyLogBurst) || dropped != 50 {
		t.Errorf("counts: %d written, %d dropped", written, dropped)
	}
	meta, _ := first["metadata"].(map[string]any)
	if first["endpoint"] != "tn_a" || first["url"] != "https://a.test" || first["phase"] != "on_http_request" ||
		first["action"] != "on_http_request[0].actions[0]" || meta["message"] != "seen" || meta["path"] != "/x" {
		t.Errorf("the record: %v", first)
	}
	// Once b's bucket refills, its next record says how many were dropped.
	now = now.Add(time.Second)
	serve(b, "GET", "https://b.test/again", nil)
	if !strings.Contains(buf.String(), `"msg":"traffic policy log records dropped","account":"acct_b","edge":"edghts_b","route":"edghtsrt_b","url":"https://b.test","dropped":50`) {
		t.Errorf("no notice of the dropped records:\n%s", buf.String())
	}
	if _, err := NewTrafficPolicy(mustParse(t, doc)); err == nil || !strings.Contains(err.Error(), "needs the data plane's policy log") {
		t.Errorf("log without a policy log: %v", err)
	}
	big := stageWith(t, `{"on_http_request":[{"actions":[{"type":"log","config":{"metadata":{"h":"${req.headers['x-big'][0]}"}}}]}]}`,
		PolicyOptions{Log: pl, Endpoint: &trafficpolicy.Endpoint{Account: "acct_c"}}, echoUpstream)
	serve(big, "GET", "https://c.test/", map[string]string{"X-Big": strings.Repeat("x", 2*MaxPolicyLogMetadata)})
	if !strings.Contains(buf.String(), `"truncated":true`) {
		t.Error("metadata over the bound is not truncated")
	}
}

func mustParse(t *testing.T, doc string) *trafficpolicy.Policy {
	t.Helper()
	p, err := trafficpolicy.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPolicyActionResults: the actions edgeplane applied before record their results for later
// rules as ngrok documents them: rate-limit's bucket and whether it limited, restrict-ips'
// decision and the CIDR that made it, add-headers' headers, redirect's and url-rewrite's URL and
// matches.
func TestPolicyActionResults(t *testing.T) {
	h := stageWith(t, `
on_http_request:
  - actions:
      - type: rate-limit
        config: {name: r, algorithm: sliding_window, capacity: 1, rate: 60s, bucket_key: ["req.headers['x-k'][0]", "conn.client_ip"], enforce: false}
      - type: restrict-ips
        config: {allow: ["192.0.2.0/24"], enforce: false}
      - type: add-headers
        config: {headers: {x-a: "1"}}
      - type: url-rewrite
        config: {from: "/old/(\\w+)", to: "/new/$1"}
  - actions:
      - type: custom-response
        config:
          body: "${actions.ngrok.rate_limit.bucket_key} ${actions.ngrok.rate_limit.limited} ${actions.ngrok.restrict_ips.action} ${actions.ngrok.restrict_ips.matched_cidr} ${actions.ngrok.add_headers.headers_added['x-a']} ${actions.ngrok.url_rewrite.url} ${actions.ngrok.url_rewrite.matches[1]}"
`, PolicyOptions{}, echoUpstream)
	want := "k,192.0.2.7 false allow 192.0.2.0/24 1 https://a.test/new/page page"
	if w := serve(h, "GET", "https://a.test/old/page", map[string]string{"X-K": "k"}); w.Body.String() != want {
		t.Errorf("the results:\n got %q\nwant %q", w.Body, want)
	}
	if w := serve(h, "GET", "https://a.test/old/page", map[string]string{"X-K": "k"}); !strings.Contains(w.Body.String(), "k,192.0.2.7 true allow") {
		t.Errorf("the second request in the window: %q", w.Body)
	}
}
