package agents

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok/config"
)

// actionsUpstream is the agent's side of the traffic policy action tests: /echo answers with
// the body and the X-Who and X-User headers it got, /fail with 500, /secret with a secret in
// its body, /big with 2 KB of text, /sse with an event stream carrying a token.
var actionsUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/fail":
		w.WriteHeader(500)
	case "/secret":
		_, _ = io.WriteString(w, "the password is s3cr3t")
	case "/big":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, strings.Repeat("a compressible page ", 100))
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"abc", "def"} {
			_, _ = io.WriteString(w, "data: token-"+tok+" ok\n\n")
			http.NewResponseController(w).Flush()
		}
	default:
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "who="+r.Header.Get("X-Who")+" user="+r.Header.Get("X-User")+" body="+string(b))
	}
})

// policyRoute makes, in w's account, an edge on host with one route "/" to an agent serving
// actionsUpstream, and returns the route's path.
func policyRoute(t *testing.T, w *world, host string) string {
	t.Helper()
	_, token := w.credential()
	w.reserveDomain(host)
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", host)))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, actionsUpstream)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": host}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	return "/edges/https/" + edge + "/routes/" + w.mustCreate("/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})
}

// actionsPolicy uses every action of on_http_request, on_http_response and
// on_event_stream_message these tests cover, the same document for both accounts.
const actionsPolicy = `
on_http_request:
  - expressions: ["req.url.path == '/dc'"]
    actions: [{type: close-connection}]
  - expressions: ["req.url.path.startsWith('/private')"]
    actions:
      - type: basic-auth
        config: {credentials: ["alice:password1"], realm: private}
  - actions:
      - type: set-vars
        config: {vars: [{who: "${req.host}"}]}
      - type: log
        config: {metadata: {who: "${vars.who}", path: "${req.url.path}"}}
      - type: add-headers
        config:
          headers:
            x-who: "${vars.who}"
            x-user: "${has(actions.ngrok.basic_auth) ? actions.ngrok.basic_auth.credentials.username : 'nobody'}"
  - expressions: ["req.url.path == '/fail'"]
    actions:
      - type: circuit-breaker
        config: {error_threshold: 0.5, volume_threshold: 2, window_duration: 60s, tripped_duration: 2m}
  - expressions: ["req.url.path == '/redact'"]
    actions:
      - type: request-body-find-replace
        config: {replacements: [{from: "\\d{3}-\\d{2}-\\d{4}", to: "[SSN]"}]}
on_http_response:
  - expressions: ["req.url.path == '/secret'"]
    actions:
      - type: response-body-find-replace
        config: {replacements: [{from: "s3cr3t", to: "[hidden]"}]}
on_event_stream_message:
  - actions:
      - type: sse-find-replace
        config: {replacements: [{from: "token-\\w+", to: "token-***"}]}
`

// logRE reads the log action's records of the server's text log.
var logRE = regexp.MustCompile(`msg="traffic policy log" account=(\S+) (?:edge=\S+ route=(\S+)|endpoint=(\S+)) url=\S+ phase=(\S+) action=\S+ metadata="?map\[([^\]]*)\]`)

// policyLogs returns the log action's records so far: account, route or endpoint, phase and
// metadata, in order.
func policyLogs(w *world) [][]string {
	var out [][]string
	for _, m := range logRE.FindAllStringSubmatch(w.proc.Stderr.String(), -1) {
		out = append(out, []string{m[1], m[2] + m[3], m[4], m[5]})
	}
	return out
}

// TestTrafficPolicyActionsOnRoutes: two accounts' routes with the same traffic policy, through
// real agents: close-connection, basic-auth (its results read by a later rule), set-vars, log,
// circuit-breaker, the request and response body rewrites and the event stream rewrite all act
// on live traffic; each account's log records name its own account and route, one account's
// breaker trips without touching the other's, and a flood of one account's records is bounded
// without costing the other a record.
func TestTrafficPolicyActionsOnRoutes(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	routeA, routeB := policyRoute(t, wa, "tp-a.example.com"), policyRoute(t, wb, "tp-b.example.com")
	// A configuration ngrok refuses is refused on write, naming the field.
	for doc, field := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"basic-auth","config":{"credentials":["alice:short"]}}]}]}`:            "on_http_request[0].actions[0].config.credentials[0]",
		`{"on_http_request":[{"actions":[{"type":"circuit-breaker","config":{"window_duration":"5m"}}]}]}`:              "on_http_request[0].actions[0].config.window_duration",
		`{"on_http_request":[{"actions":[{"type":"http-request","config":{"url":"https://x.test/","timeout":"1m"}}]}]}`: "on_http_request[0].actions[0].config.timeout",
	} {
		var e apiError
		if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": doc}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, field+":") {
			t.Errorf("PUT %s: %d %s %q, want 400 ERR_NGROK_215 naming %s", doc, st, e.ErrorCode, e.Msg, field)
		}
	}
	for _, x := range []struct {
		w     *world
		route string
	}{{wa, routeA}, {wb, routeB}} {
		if st := x.w.call("PUT", x.route+"/traffic_policy", map[string]any{"value": actionsPolicy}, nil); st != 200 {
			t.Fatalf("put traffic_policy: %d", st)
		}
	}
	c := wa.httpsClient()
	get := func(host, path string, hdr map[string]*string) (*http.Response, string, error) {
		resp, b, err := try(c, "GET", "https://"+host+path, hdr)
		return resp, string(b), err
	}
	for _, host := range []string{"tp-a.example.com", "tp-b.example.com"} {
		eventually(t, 5*time.Second, "the policy of "+host+" reaches traffic", func() bool {
			resp, body, err := get(host, "/echo", nil)
			return err == nil && resp.StatusCode == 200 && body == "who="+host+" user=nobody body="
		})
	}
	if _, _, err := get("tp-a.example.com", "/dc", nil); err == nil {
		t.Error("close-connection: the request was answered")
	}
	resp, _, err := get("tp-a.example.com", "/private", nil)
	if err != nil || resp.StatusCode != 401 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3401" || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `realm="private"`) {
		t.Errorf("basic-auth without credentials: %v %v", err, resp)
	}
	auth := ptr("Basic YWxpY2U6cGFzc3dvcmQx") // alice:password1
	if resp, body, err := get("tp-a.example.com", "/private", map[string]*string{"Authorization": auth}); err != nil || resp.StatusCode != 200 || body != "who=tp-a.example.com user=alice body=" {
		t.Errorf("basic-auth with alice's credentials: %v %v %q", err, resp, body)
	}
	req, _ := http.NewRequest("POST", "https://tp-a.example.com/redact", strings.NewReader("ssn 123-45-6789."))
	if resp, err := c.Do(req); err != nil {
		t.Errorf("request-body-find-replace: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "who=tp-a.example.com user=nobody body=ssn [SSN]." {
			t.Errorf("request-body-find-replace: the upstream got %q", b)
		}
	}
	if _, body, err := get("tp-a.example.com", "/secret", nil); err != nil || body != "the password is [hidden]" {
		t.Errorf("response-body-find-replace: %v %q", err, body)
	}
	if resp, err := c.Get("https://tp-a.example.com/sse"); err != nil {
		t.Errorf("sse-find-replace: %v", err)
	} else {
		b, _ := io.ReadAll(bufio.NewReader(resp.Body))
		resp.Body.Close()
		if string(b) != "data: token-*** ok\n\ndata: token-*** ok\n\n" {
			t.Errorf("sse-find-replace: %q", b)
		}
	}

	// A's breaker trips after two failures; B's, of the same document, is its own.
	for i := range 2 {
		if resp, _, err := get("tp-a.example.com", "/fail", nil); err != nil || resp.StatusCode != 500 {
			t.Fatalf("A's failure %d: %v %v", i+1, err, resp)
		}
	}
	if resp, _, err := get("tp-a.example.com", "/fail", nil); err != nil || resp.StatusCode != 503 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3202" {
		t.Errorf("A's breaker: %v %v, want 503 ERR_NGROK_3202", err, resp)
	}
	if resp, _, err := get("tp-b.example.com", "/fail", nil); err != nil || resp.StatusCode != 500 {
		t.Errorf("B's breaker tripped with A's: %v %v", err, resp)
	}

	// Log records name their own account and route; a flood of A's is bounded, B's all written.
	var wg sync.WaitGroup
	var answered atomic.Int32 // by the upstream: the policy ran (the account's share of the public connections may refuse some)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				if resp, _, err := get("tp-a.example.com", "/flood", nil); err == nil && resp.StatusCode == 200 {
					answered.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for range 5 {
		if resp, _, err := get("tp-b.example.com", "/after-flood", nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("B after A's flood: %v %v", err, resp)
		}
	}
	var accountA, accountB string
	flood, afterFlood := 0, 0
	eventually(t, 5*time.Second, "B's records are written", func() bool {
		afterFlood = 0
		for _, r := range policyLogs(wa) {
			if strings.Contains(r[3], "path:/after-flood") {
				afterFlood++
			}
		}
		return afterFlood == 5
	})
	for _, r := range policyLogs(wa) {
		account, route, meta := r[0], r[1], r[3]
		switch {
		case strings.Contains(meta, "who:tp-a.example.com"):
			if accountA == "" {
				accountA = account
			}
			if account != accountA || !strings.HasSuffix(routeA, "/"+route) {
				t.Errorf("A's record names account %s route %s (want %s, %s)", account, route, accountA, routeA)
			}
			if strings.Contains(meta, "path:/flood") {
				flood++
			}
		case strings.Contains(meta, "who:tp-b.example.com"):
			if accountB == "" {
				accountB = account
			}
			if account != accountB || !strings.HasSuffix(routeB, "/"+route) {
				t.Errorf("B's record names account %s route %s (want %s, %s)", account, route, accountB, routeB)
			}
		default:
			t.Errorf("a record of neither: %v", r)
		}
	}
	if accountA == "" || accountB == "" || accountA == accountB {
		t.Errorf("the records' accounts: A %q, B %q", accountA, accountB)
	}
	if n := int(answered.Load()); flood == 0 || flood >= n {
		t.Errorf("A's flood of %d answered requests wrote %d records, want some and fewer", n, flood)
	}
	m := wa.metrics()
	if dropped := m.value(`edgeplane_policy_log_records_total{result="dropped"}`); dropped < float64(int(answered.Load())-flood) {
		t.Errorf("dropped records: %v, want at least %d", dropped, int(answered.Load())-flood)
	}
}

// TestTrafficPolicyActionsOnAgentBinds: agents of two accounts bind endpoints with their own
// traffic policies: on http binds basic-auth, set-vars and log act on live traffic and each
// account's records name its own account and endpoint, and http-request's answer reaches the
// upstream; on a tcp bind on_tcp_connect's log
// records the connection and close-connection closes it before any byte reaches the agent.
func TestTrafficPolicyActionsOnAgentBinds(t *testing.T) {
	wa := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "27000-27999", "--outbound-allow-private")
	wb := wa.asAccount("tenant-b")
	ctx := context.Background()
	doc := `
on_http_request:
  - actions:
      - type: basic-auth
        config: {credentials: ["alice:password1"], enforce: false}
      - type: set-vars
        config: {vars: [{who: "${endpoint.url}"}]}
      - type: log
        config: {metadata: {who: "${vars.who}", authorized: "${actions.ngrok.basic_auth.credentials.authorized}"}}
      - type: add-headers
        config: {headers: {x-who: "${vars.who}", x-user: "${actions.ngrok.basic_auth.credentials.username}"}}
`
	endpoints := map[string]string{}
	for name, w := range map[string]*world{"bind-a": wa, "bind-b": wb} {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(ctx, config.HTTPEndpoint(config.WithDomain(name+".edgeplane.app"),
			config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(doc)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		serveTunnel(t, tun, actionsUpstream)
		endpoints[name] = tun.ID()
	}
	hc := wa.httpClient()
	for name := range endpoints {
		url := "http://" + name + ".edgeplane.app/echo"
		if st, body, _ := get(t, hc, url); st != 200 || body != "who="+url[:len(url)-5]+" user= body=" {
			t.Errorf("%s without credentials (enforce: false): %d %q", name, st, body)
		}
	}
	resp, body, err := try(hc, "GET", "http://bind-a.edgeplane.app/echo", map[string]*string{"Authorization": ptr("Basic YWxpY2U6cGFzc3dvcmQx")})
	if err != nil || resp.StatusCode != 200 || string(body) != "who=http://bind-a.edgeplane.app user=alice body=" {
		t.Errorf("bind-a with alice's credentials: %v %v %q", err, resp, body)
	}
	accounts := map[string]string{}
	eventually(t, 5*time.Second, "three records", func() bool { return len(policyLogs(wa)) >= 3 })
	for _, r := range policyLogs(wa) {
		account, endpoint, meta := r[0], r[1], r[3]
		name := "bind-a"
		if strings.Contains(meta, "who:http://bind-b.") {
			name = "bind-b"
		}
		if prev, ok := accounts[name]; ok && prev != account {
			t.Errorf("%s's records name accounts %s and %s", name, prev, account)
		}
		accounts[name] = account
		if endpoint == "" || r[2] != "on_http_request" {
			t.Errorf("%s's record: %v", name, r)
		}
	}
	if len(accounts) != 2 || accounts["bind-a"] == accounts["bind-b"] {
		t.Errorf("the records' accounts: %v", accounts)
	}

	// http-request: the bind's policy asks a service (here on this host: a server whose
	// outbound client refuses loopback needs --outbound-allow-private for it) and the upstream
	// gets its answer.
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "grant-"+r.URL.Query().Get("who"))
	}))
	defer svc.Close()
	_, tokenA := wa.credential()
	htun, err := wa.mustConnect(tokenA).Listen(ctx, config.HTTPEndpoint(config.WithDomain("bind-hr.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithTrafficPolicy(`{"on_http_request":[{"actions":[
		  {"type":"http-request","config":{"url":"`+svc.URL+`/check","query_params":[{"key":"who","value":"${req.url.path}"}],"on_error":"halt"}},
		  {"type":"add-headers","config":{"headers":{"x-who":"${actions.ngrok.http_request.res.body}"}}}]}]}`)))
	if err != nil {
		t.Fatalf("http-request bind: %v", err)
	}
	serveTunnel(t, htun, actionsUpstream)
	if st, body, _ := get(t, hc, "http://bind-hr.edgeplane.app/echo"); st != 200 || body != "who=grant-/echo user= body=" {
		t.Errorf("http-request in a bind's policy: %d %q", st, body)
	}

	// A tcp bind: on_tcp_connect logs the connection and closes it unseen by the agent.
	_, token := wb.credential()
	tun, err := wb.mustConnect(token).Listen(ctx, config.TCPEndpoint(config.WithTrafficPolicy(`
on_tcp_connect:
  - actions:
      - type: set-vars
        config: {vars: [{port: "${conn.server_port}"}]}
      - type: log
        config: {metadata: {port: "${vars.port}", started: "${conn.ts.start}"}}
      - type: close-connection`)))
	if err != nil {
		t.Fatalf("tcp bind: %v", err)
	}
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := (acceptguard.Listener{Listener: tun}).Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	conn, err := net.Dial("tcp", strings.TrimPrefix(tun.URL(), "tcp://"))
	if err != nil {
		t.Fatalf("dial the tcp endpoint: %v", err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = conn.Write([]byte("hello"))
	if b, _ := io.ReadAll(conn); len(b) != 0 {
		t.Errorf("close-connection: read %q", b)
	}
	conn.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(tun.URL(), "tcp://"), ":")
	eventually(t, 5*time.Second, "the tcp bind's record", func() bool {
		for _, r := range policyLogs(wa) {
			if r[2] == "on_tcp_connect" && strings.Contains(r[3], "port:"+port) && r[0] == accounts["bind-b"] {
				return true
			}
		}
		return false
	})
	select {
	case <-accepted:
		t.Error("the agent got a connection close-connection closed")
	default:
	}
}
