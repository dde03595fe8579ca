package enforce

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// onlineInternal is the internal endpoints online, by account and target: what the data
// plane's directory answers forward-internal.
type onlineInternal map[string][]trafficpolicy.Target

func (o onlineInternal) ServeInternal(http.ResponseWriter, *http.Request, string, trafficpolicy.Target) bool {
	return false
}

func (o onlineInternal) InternalOnline(account string, target trafficpolicy.Target) bool {
	for _, t := range o[account] {
		if t == target {
			return true
		}
	}
	return false
}

// TestConnForwardInternal: forward-internal in on_tcp_connect hands the connection to the
// policy's account's internal tcp or tls endpoint when it is online, and no later action runs;
// an endpoint only another account has, or a URL rendering to no internal tcp endpoint, closes
// the connection (halt) or lets the next actions run (continue). Built without the internal
// endpoints or the account, or in an HTTP endpoint's on_tcp_connect, it is refused naming it.
func TestConnForwardInternal(t *testing.T) {
	db := trafficpolicy.Target{Scheme: "tcp", Host: "db.internal", Port: 5432}
	tlsDB := trafficpolicy.Target{Scheme: "tls", Host: "db.internal", Port: 443}
	online := onlineInternal{"acct_a": {db, tlsDB}, "acct_b": {{Scheme: "tcp", Host: "only-b.internal", Port: 5432}}}
	opts := PolicyOptions{Internal: online, Endpoint: &trafficpolicy.Endpoint{Account: "acct_a"}}
	fwd := func(url, onError string) string {
		return `{"type":"forward-internal","config":{"url":"` + url + `"` + onError + `}}`
	}
	client := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}
	server := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5432}
	for _, c := range []struct {
		actions string
		want    ConnVerdict
	}{
		{fwd("tcp://db.internal:5432", "") + `,{"type":"deny"}`, ConnVerdict{Allow: true, Forward: &db, Account: "acct_a"}},
		{fwd("tls://db.internal", ""), ConnVerdict{Allow: true, Forward: &tlsDB, Account: "acct_a"}},
		{fwd("tcp://db.internal:${conn.server_port}", ""), ConnVerdict{Allow: true, Forward: &db, Account: "acct_a"}},
		{fwd("tcp://only-b.internal:5432", ""), ConnVerdict{}},
		{fwd("tcp://only-b.internal:5432", `,"on_error":"continue"`), ConnVerdict{Allow: true}},
		{fwd("tcp://only-b.internal:5432", `,"on_error":"continue"`) + `,{"type":"deny"}`, ConnVerdict{}},
		{fwd("tcp://${'db.example'}.com:1", ""), ConnVerdict{}},
		{fwd("tcp://${'db.example'}.com:1", `,"on_error":"continue"`), ConnVerdict{Allow: true}},
	} {
		doc := `{"on_tcp_connect":[{"actions":[` + c.actions + `]}]}`
		cp, err := NewConnPolicyWith(mustParse(t, doc), opts)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		got := cp.Decide(client, server, nil)
		if got.Allow != c.want.Allow || got.Account != c.want.Account || (got.Forward == nil) != (c.want.Forward == nil) ||
			got.Forward != nil && *got.Forward != *c.want.Forward {
			t.Errorf("%s: %+v, want %+v", doc, got, c.want)
		}
		if cp.Allow(client, server) != (c.want.Allow && c.want.Forward == nil) {
			t.Errorf("%s: Allow must refuse what Decide forwards", doc)
		}
	}
	doc := `{"on_tcp_connect":[{"actions":[` + fwd("tcp://db.internal:5432", "") + `]}]}`
	for what, o := range map[string]PolicyOptions{"internal endpoints": {Endpoint: opts.Endpoint}, "account": {Internal: online}} {
		if _, err := NewConnPolicyWith(mustParse(t, doc), o); err == nil || !strings.Contains(err.Error(), "forward-internal needs the") {
			t.Errorf("built without the %s: %v", what, err)
		}
	}
	// The target must speak the endpoint's protocol (ngrok's ERR_NGROK_3502): a literal URL of
	// the other one refuses the stage, naming the field.
	for name, build := range map[string]func(doc string) error{
		"an HTTP policy naming a tcp endpoint": func(doc string) error { _, err := NewTrafficPolicyWith(mustParse(t, doc), opts); return err },
		"a TCP policy naming an https endpoint": func(string) error {
			_, err := NewConnPolicyWith(mustParse(t, `{"on_tcp_connect":[{"actions":[`+fwd("https://web.internal", "")+`]}]}`), opts)
			return err
		},
	} {
		if err := build(doc); err == nil || !strings.Contains(err.Error(), "on_tcp_connect[0].actions[0].config.url: the forward-internal action can't forward between endpoints that use different protocols") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// One rendering to the other protocol fails the action.
	cp, err := NewConnPolicyWith(mustParse(t, `{"on_tcp_connect":[{"actions":[`+fwd("${'https'}://db.internal", `,"on_error":"continue"`)+`]}]}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if v := cp.Decide(client, server, nil); !v.Allow || v.Forward != nil {
		t.Errorf("a URL rendering to an https endpoint on a TCP policy: %+v, want the next actions", v)
	}
}

// servingInternal is onlineInternal whose endpoints answer the requests handed to them with
// their name, and count them.
type servingInternal struct {
	onlineInternal
	served map[string]int
}

func (s servingInternal) ServeInternal(w http.ResponseWriter, r *http.Request, account string, target trafficpolicy.Target) bool {
	if !s.InternalOnline(account, target) {
		return false
	}
	s.served[account+" "+target.Host]++
	w.Header().Set("x-served-by", account+" "+target.Host)
	_, _ = io.WriteString(w, r.Host+r.URL.Path)
	return true
}

// TestHTTPConnForwardInternal: forward-internal in the on_tcp_connect phase of an http or https
// endpoint (or an HTTPS edge's route) hands the connection's requests to the policy's account's
// internal http or https endpoint: each is served there, with its Host and path, and the
// policy's own HTTP phases and upstream see none. An endpoint only another account has closes
// the connection unanswered (halt) or lets the next actions and the upstream run (continue).
// A request that an internal endpoint serves after a forward does not run that endpoint's
// on_tcp_connect rules (no connection was made to it).
func TestHTTPConnForwardInternal(t *testing.T) {
	web := trafficpolicy.Target{Scheme: "https", Host: "web.internal", Port: 443}
	internal := servingInternal{onlineInternal{"acct_a": {web}, "acct_b": {{Scheme: "https", Host: "only-b.internal", Port: 443}}}, map[string]int{}}
	opts := PolicyOptions{Internal: internal, Endpoint: &trafficpolicy.Endpoint{Account: "acct_a"}}
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "upstream") })
	serve := func(doc string) *httptest.Server {
		tp, err := NewTrafficPolicyWith(mustParse(t, doc), opts)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		srv := httptest.NewServer(tp.Wrap(upstream))
		t.Cleanup(srv.Close)
		return srv
	}
	phases := `"on_http_request":[{"actions":[{"type":"custom-response","config":{"status_code":418}}]}],` +
		`"on_http_response":[{"actions":[{"type":"add-headers","config":{"headers":{"x-public":"1"}}}]}]`
	fwd := func(url, onError string) string {
		return `{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"` + url + `"` + onError + `}}]}],` + phases + `}`
	}
	srv := serve(fwd("https://web.internal", ""))
	for _, path := range []string{"/a", "/b"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("x-served-by") != "acct_a web.internal" || resp.Header.Get("x-public") != "" ||
			string(body) != strings.TrimPrefix(srv.URL, "http://")+path {
			t.Errorf("GET %s: %d %v %q, want the internal endpoint's answer alone", path, resp.StatusCode, resp.Header, body)
		}
	}
	if internal.served["acct_a web.internal"] != 2 {
		t.Errorf("served: %v", internal.served)
	}
	if _, err := srv.Client().Get(serve(fwd("https://only-b.internal", "")).URL); err == nil {
		t.Error("a forward to another account's internal endpoint (halt) answered; want the connection closed")
	}
	resp, err := srv.Client().Get(serve(fwd("https://only-b.internal", `,"on_error":"continue"`)).URL)
	if err != nil || resp.StatusCode != 418 {
		t.Errorf("continue: %v %v, want the policy's own on_http_request", resp, err)
	}
	// Forwarded requests skip the on_tcp_connect rules of the endpoint serving them.
	tp, err := NewTrafficPolicyWith(mustParse(t, `{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	tp.Wrap(upstream).ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), forwardHopsKey{}, 1)))
	if rec.Body.String() != "upstream" {
		t.Errorf("a forwarded request met the serving endpoint's on_tcp_connect: %d %q", rec.Code, rec.Body)
	}
}
