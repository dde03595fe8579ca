package agents

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestTrafficPolicyOnTraffic: a route's traffic_policy, put through the API, acts on real
// requests through a real agent: deny by an expression, custom-response, add-headers on the
// request (what the upstream got) and on the response (what the client got); an action ngrok
// defines but edgeplane does not apply fails the route closed naming it, and documents ngrok
// would refuse are refused by the API naming the problem.
func TestTrafficPolicyOnTraffic(t *testing.T) {
	w := start(t)
	_, module := moduleEdge(t, w, "policy.example.com", nil)
	policy := module("traffic_policy")

	for doc, want := range map[string]string{
		`{"on_http_requests":[]}`:                                                                  `"on_http_requests" is not a traffic policy phase`,
		`{"on_http_request":[{"actions":[{"type":"teleport"}]}]}`:                                  `"teleport" is not a traffic policy action`,
		`{"on_http_request":[{"expressions":["req.method = 'GET'"],"actions":[{"type":"deny"}]}]}`: `on_http_request[0].expressions[0]`,
	} {
		var e struct {
			ErrorCode string `json:"error_code"`
			Msg       string `json:"msg"`
		}
		if st := w.call("PUT", policy, map[string]any{"value": doc}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, want) {
			t.Errorf("PUT %s: %d %s %q, want 400 ERR_NGROK_215 naming %q", doc, st, e.ErrorCode, e.Msg, want)
		}
	}

	doc := `
on_http_request:
  - name: read only
    expressions:
      - req.method != 'GET'
    actions:
      - type: deny
        config: {status_code: 405}
  - expressions:
      - req.url.path == '/teapot'
    actions:
      - type: custom-response
        config:
          status_code: 418
          body: I am a teapot
          headers: {content-type: text/plain}
  - expressions:
      - "'x-internal' in req.headers"
    actions:
      - type: deny
  - actions:
      - type: remove-headers
        config: {headers: [x-secret]}
      - type: add-headers
        config: {headers: {x-policy: applied, x-client: "${conn.client_ip} ${req.method}"}}
on_http_response:
  - expressions: ["res.status_code == 200"]
    actions:
      - type: remove-headers
        config: {headers: [x-powered-by]}
      - type: add-headers
        config: {headers: {x-served-by: edgeplane}}
  - expressions: ["req.url.path == '/page'", "res.status_code == 200"]
    actions:
      - type: custom-response
        config: {status_code: 410, body: "gone: ${req.url.path}"}
`
	if st := w.call("PUT", policy, map[string]any{"value": doc}, nil); st != 200 {
		t.Fatalf("put traffic_policy: %d", st)
	}
	c := w.httpsClient()
	var resp *http.Response
	var body []byte
	eventually(t, 3*time.Second, "the policy reaches traffic", func() bool {
		var err error
		resp, body, err = try(c, "GET", "https://policy.example.com/headers", map[string]*string{"X-Secret": ptr("s"), "X-Keep": ptr("k")})
		return err == nil && resp.StatusCode == 200 && resp.Header.Get("X-Served-By") == "edgeplane"
	})
	got := upstreamSaw(t, body)
	for name, want := range map[string]string{"X-Policy": "applied", "X-Client": "127.0.0.1 GET", "X-Secret": "", "X-Keep": "k"} {
		if v := strings.Join(got[name], ","); v != want {
			t.Errorf("the upstream got %s %q, want %q", name, v, want)
		}
	}
	if resp.Header.Get("X-Powered-By") != "" || resp.Header.Get("Server") != "apache" {
		t.Errorf("the client got %v", resp.Header)
	}
	if resp, body := send(t, c, "POST", "https://policy.example.com/headers", nil); resp.StatusCode != 405 || strings.Contains(string(body), "X-Policy") {
		t.Errorf("POST: %d %q, want 405 from the policy", resp.StatusCode, body)
	}
	if resp, _ := send(t, c, "GET", "https://policy.example.com/headers", map[string]*string{"X-Internal": ptr("1")}); resp.StatusCode != 403 {
		t.Errorf("a header the policy denies: %d", resp.StatusCode)
	}
	resp, body = send(t, c, "GET", "https://policy.example.com/teapot", nil)
	if resp.StatusCode != 418 || string(body) != "I am a teapot" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("custom-response: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp.Header.Get("X-Served-By") != "" {
		t.Errorf("the response rule for 200 acted on a 418: %v", resp.Header)
	}
	if resp, body := send(t, c, "GET", "https://policy.example.com/page", nil); resp.StatusCode != 410 || string(body) != "gone: /page" {
		t.Errorf("custom-response in on_http_response: %d %q", resp.StatusCode, body)
	}

	// on_tcp_connect on a route runs on every request: a refusal closes the connection unanswered.
	closer := `{"on_tcp_connect":[{"expressions":["conn.client_ip == '127.0.0.1'"],"actions":[{"type":"deny"}]}]}`
	if st := w.call("PUT", policy, map[string]any{"value": closer}, nil); st != 200 {
		t.Fatalf("put an on_tcp_connect policy: %d", st)
	}
	eventually(t, 3*time.Second, "on_tcp_connect deny closes the connection", func() bool {
		_, _, err := try(c, "GET", "https://policy.example.com/headers", nil)
		return err != nil
	})

	// An action ngrok defines that edgeplane does not apply: accepted, and the route fails closed
	// naming it.
	limited := `{"on_http_request":[{"actions":[{"type":"saml"}]}]}`
	if st := w.call("PUT", policy, map[string]any{"value": limited}, nil); st != 200 {
		t.Fatalf("put a saml policy: %d", st)
	}
	eventually(t, 3*time.Second, "an unapplied action fails closed", func() bool {
		resp, body, err := try(c, "GET", "https://policy.example.com/headers", nil)
		return err == nil && resp.StatusCode == 503 && resp.Header.Get("ngrok-error-code") == "ERR_NGROK_3210" &&
			strings.Contains(string(body), "traffic_policy") && strings.Contains(string(body), "saml")
	})
}

// TestTrafficPolicyOnTCPEdge: a TCP edge's traffic_policy decides in on_tcp_connect, on the
// connection's addresses: deny by an expression and restrict-ips close the connection before
// any byte reaches the agent, a policy that admits the client lets bytes through, and a phase a
// TCP edge does not have fails it closed.
func TestTrafficPolicyOnTCPEdge(t *testing.T) {
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "28000-28999")
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "tcp-policy")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 5)
				_, _ = io.ReadFull(c, buf)
				_, _ = c.Write(append([]byte("echo "), buf...))
			}()
		}
	}()
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "tcp-policy"}})
	var ra struct{ Addr string }
	w.call("POST", "/reserved_addrs", map[string]any{}, &ra)
	edge := w.mustCreate("/edges/tcp", map[string]any{"hostports": []string{ra.Addr}, "backend": map[string]any{"backend_id": group}})
	talk := func() string {
		c, err := net.Dial("tcp", ra.Addr)
		if err != nil {
			return "dial: " + err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	eventually(t, 5*time.Second, "the TCP edge carries bytes", func() bool { return talk() == "echo hello" })

	put := func(doc string) {
		t.Helper()
		if st := w.call("PUT", "/edges/tcp/"+edge+"/traffic_policy", map[string]any{"value": doc}, nil); st != 200 {
			t.Fatalf("put traffic_policy %s: %d", doc, st)
		}
	}
	put(`{"on_tcp_connect":[{"expressions":["conn.client_ip == '127.0.0.1'","conn.server_port > 0"],"actions":[{"type":"deny"}]}]}`)
	eventually(t, 3*time.Second, "deny by expression closes the connection", func() bool { return talk() == "" })
	put("on_tcp_connect:\n  - actions:\n      - type: restrict-ips\n        config: {allow: [127.0.0.0/8]}\n")
	eventually(t, 3*time.Second, "restrict-ips admits the client", func() bool { return talk() == "echo hello" })
	put(`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"deny":["127.0.0.0/8","::1/128"]}}]}]}`)
	eventually(t, 3*time.Second, "restrict-ips refuses the client", func() bool { return talk() == "" })
	put(`{"on_tcp_connect":[{"expressions":["conn.client_ip == '192.0.2.1'"],"actions":[{"type":"deny"}]}]}`)
	eventually(t, 3*time.Second, "a rule whose expression is false lets bytes through", func() bool { return talk() == "echo hello" })
	put(`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x":"1"}}}]}]}`)
	eventually(t, 3*time.Second, "an HTTP phase fails the TCP edge closed", func() bool { return talk() == "" })

	// A TLS edge terminated here: a denied connection is closed before the handshake.
	w.reserveDomain("tls-policy.example.com")
	tlsEdge := w.mustCreate("/edges/tls", map[string]any{"hostports": []string{"tls-policy.example.com:443"},
		"backend": map[string]any{"backend_id": group}, "tls_termination": map[string]any{"terminate_at": "edge"}})
	talkTLS := func() string {
		c, err := tls.Dial("tcp", w.https, &tls.Config{ServerName: "tls-policy.example.com", RootCAs: w.ca})
		if err != nil {
			return "handshake: " + err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	eventually(t, 5*time.Second, "the TLS edge carries bytes", func() bool { return talkTLS() == "echo hello" })
	if st := w.call("PUT", "/edges/tls/"+tlsEdge+"/traffic_policy", map[string]any{"value": `{"on_tcp_connect":[{"expressions":["inCidrRange(conn.client_ip, '127.0.0.0/8')"],"actions":[{"type":"deny"}]}]}`}, nil); st != 200 {
		t.Fatalf("put the TLS edge's traffic_policy: %d", st)
	}
	eventually(t, 3*time.Second, "deny closes the TLS edge's connection", func() bool { return strings.HasPrefix(talkTLS(), "handshake: ") })
}

// TestTrafficPolicyOnAgentBind: a traffic policy an agent asks for in its bind options acts on
// its endpoint like a route's; one using an action edgeplane does not apply yet is refused, naming
// it, and so is one with HTTP phases on a TCP endpoint.
func TestTrafficPolicyOnAgentBind(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()
	doc := `{"on_http_request":[
		{"expressions":["req.url.path == '/blocked'"],"actions":[{"type":"deny","config":{"status_code":403}}]},
		{"actions":[{"type":"add-headers","config":{"headers":{"x-policy":"on"}}}]}]}`
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("tp.edgeplane.app"), config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(doc)))
	if err != nil {
		t.Fatalf("listen with a traffic policy: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("policy header: " + r.Header.Get("x-policy")))
	}))
	hc := w.httpClient()
	if st, body, _ := get(t, hc, "http://tp.edgeplane.app/open"); st != 200 || body != "policy header: on" {
		t.Errorf("allowed request: %d %q", st, body)
	}
	if st, _, _ := get(t, hc, "http://tp.edgeplane.app/blocked"); st != 403 {
		t.Errorf("denied by the policy: %d", st)
	}
	_, err = sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("tp2.edgeplane.app"),
		config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"saml"}]}]}`)))
	if got := ngrokCode(err); got != "ERR_NGROK_301" || !strings.Contains(err.Error(), "saml") {
		t.Errorf("a policy with an action not applied yet: %v", err)
	}
	// A tcp endpoint's policy acts in on_tcp_connect (TestTrafficPolicyOnAgentTCPAndTLSBinds); the
	// HTTP phases do not apply there.
	_, err = sess.Listen(ctx, config.TCPEndpoint(config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"deny"}]}]}`)))
	if got := ngrokCode(err); got != "ERR_NGROK_301" || !strings.Contains(err.Error(), "on_http_request") {
		t.Errorf("an on_http_request policy on a tcp endpoint: %v", err)
	}
}

// TestTrafficPolicyOnAgentTCPAndTLSBinds: the traffic policy of an agent's tcp or tls bind runs
// its on_tcp_connect rules on every public connection before any byte reaches the agent: deny
// by an expression and a refusing restrict-ips close the connection (a TLS one before its
// handshake completes) and the agent never sees it; a policy that admits the client lets bytes
// through (TLS passed through untouched). HTTP phases on those binds are refused naming the
// phase, and an http bind's on_tcp_connect still runs per request.
func TestTrafficPolicyOnAgentTCPAndTLSBinds(t *testing.T) {
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "29000-29999")
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()

	listen := func(opts config.Tunnel, cert *tls.Certificate) (string, *atomic.Int32) {
		return listenEcho(t, sess, opts, cert)
	}
	talk := func(url string) string {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "tcp://"), 10*time.Second)
		if err != nil {
			return "dial: " + err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b)
	}

	denied, deniedSeen := listen(config.TCPEndpoint(config.WithTrafficPolicy(
		`{"on_tcp_connect":[{"expressions":["conn.client_ip == '127.0.0.1'","conn.server_port > 0"],"actions":[{"type":"deny"}]}]}`)), nil)
	if got := talk(denied); got != "" || deniedSeen.Load() != 0 {
		t.Errorf("deny by expression: got %q, the agent saw %d connections; want it closed unseen", got, deniedSeen.Load())
	}
	admitted, admittedSeen := listen(config.TCPEndpoint(config.WithTrafficPolicy(
		"on_tcp_connect:\n  - actions:\n      - type: restrict-ips\n        config: {allow: [127.0.0.1/32]}\n")), nil)
	if got := talk(admitted); got != "echo hello" || admittedSeen.Load() != 1 {
		t.Errorf("restrict-ips admitting 127.0.0.1: got %q, the agent saw %d connections", got, admittedSeen.Load())
	}
	outside, outsideSeen := listen(config.TCPEndpoint(config.WithTrafficPolicy(
		`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"allow":["192.0.2.0/24"]}}]}]}`)), nil)
	if got := talk(outside); got != "" || outsideSeen.Load() != 0 {
		t.Errorf("restrict-ips not admitting 127.0.0.1: got %q, the agent saw %d connections", got, outsideSeen.Load())
	}

	// tls binds: the policy decides once the ClientHello named the endpoint, before passthrough.
	talkTLS := func(name string) string {
		d := &net.Dialer{Timeout: 10 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", w.https, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			return "handshake: " + err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	cert := selfSigned(t, "tp-tls.edgeplane.app")
	_, tlsDeniedSeen := listen(config.TLSEndpoint(config.WithDomain("tp-tls.edgeplane.app"),
		config.WithTrafficPolicy(`{"on_tcp_connect":[{"expressions":["inCidrRange(conn.client_ip, '127.0.0.0/8')"],"actions":[{"type":"deny"}]}]}`)), &cert)
	if got := talkTLS("tp-tls.edgeplane.app"); !strings.HasPrefix(got, "handshake: ") || tlsDeniedSeen.Load() != 0 {
		t.Errorf("deny on a tls bind: got %q, the agent saw %d connections; want the handshake to fail unseen", got, tlsDeniedSeen.Load())
	}
	cert2 := selfSigned(t, "tp-tls2.edgeplane.app")
	_, tlsSeen := listen(config.TLSEndpoint(config.WithDomain("tp-tls2.edgeplane.app"),
		config.WithTrafficPolicy(`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"allow":["127.0.0.0/8","::1/128"]}}]}]}`)), &cert2)
	if got := talkTLS("tp-tls2.edgeplane.app"); got != "echo hello" || tlsSeen.Load() != 1 {
		t.Errorf("restrict-ips admitting the client on a tls bind: got %q, the agent saw %d connections", got, tlsSeen.Load())
	}

	// HTTP phases do not apply to tcp and tls endpoints: the bind is refused naming the phase.
	for _, c := range []struct {
		what  string
		opts  config.Tunnel
		phase string
	}{
		{"tcp on_http_request", config.TCPEndpoint(config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"deny"}]}]}`)), "on_http_request"},
		{"tls on_http_response", config.TLSEndpoint(config.WithDomain("tp-tls3.edgeplane.app"),
			config.WithTrafficPolicy(`{"on_tcp_connect":[{"actions":[{"type":"deny"}]}],"on_http_response":[{"actions":[{"type":"deny"}]}]}`)), "on_http_response"},
		{"tcp action not applied in on_tcp_connect", config.TCPEndpoint(config.WithTrafficPolicy(`{"on_tcp_connect":[{"actions":[{"type":"add-headers","config":{"headers":{"x":"1"}}}]}]}`)), "add-headers"},
	} {
		_, err := sess.Listen(ctx, c.opts)
		if got := ngrokCode(err); got != "ERR_NGROK_301" || !strings.Contains(err.Error(), c.phase) {
			t.Errorf("%s: %v, want ERR_NGROK_301 naming %s", c.what, err, c.phase)
		}
	}

	// An http bind's on_tcp_connect runs on each request: a refusal closes the connection.
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("tp-http.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithTrafficPolicy(`{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}`)))
	if err != nil {
		t.Fatalf("listen http with on_tcp_connect: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("reached")) }))
	if resp, body, err := try(w.httpClient(), "GET", "http://tp-http.edgeplane.app/", nil); err == nil {
		t.Errorf("on_tcp_connect deny on an http bind: %d %q, want the connection closed", resp.StatusCode, body)
	}
}

// TestTrafficPolicyActionsThroughAnAgent: a route's traffic_policy with verify-webhook and
// rate-limit acts on requests through a real agent: a GitHub-signed webhook reaches the agent
// with its body intact, an unsigned or tampered one is refused 403 ERR_NGROK_3204; a client
// key's third request in the minute is refused 429 with Retry-After while another key's goes
// through, and the count survives a rebuild of the plan (another module of the route changed).
func TestTrafficPolicyActionsThroughAnAgent(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("actions.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "actions")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	var reached atomic.Int32
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.URL.Path+" "+string(b)+" env="+r.Header.Get("X-Env"))
	}))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "actions"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"actions.example.com:443"}})
	route := "/edges/https/" + edge + "/routes/" + w.mustCreate("/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})
	const secret = "s3cret"
	doc := `
on_http_request:
  - expressions: ["req.url.path == '/hook'"]
    actions:
      - type: verify-webhook
        config: {provider: github, secret: ` + secret + `}
  - expressions: ["req.url.path == '/api'"]
    actions:
      - type: rate-limit
        config:
          name: two a minute per client
          algorithm: sliding_window
          capacity: 2
          rate: 60s
          bucket_key: ["req.headers['x-client'][0]"]
`
	if st := w.call("PUT", route+"/traffic_policy", map[string]any{"value": doc}, nil); st != 200 {
		t.Fatalf("put traffic_policy: %d", st)
	}
	c := w.httpsClient()
	post := func(path, body string, hdr map[string]string) (*http.Response, string, error) {
		req, _ := http.NewRequest("POST", "https://actions.example.com"+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	sign := func(body string) map[string]string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(body))
		return map[string]string{"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil))}
	}
	const payload = `{"zen":"Design for failure."}`
	eventually(t, 3*time.Second, "verify-webhook refuses an unsigned webhook", func() bool {
		resp, _, err := post("/hook", payload, nil)
		return err == nil && resp.StatusCode == 403 && resp.Header.Get("ngrok-error-code") == "ERR_NGROK_3204"
	})
	before := reached.Load()
	if resp, body, err := post("/hook", payload, sign(payload)); err != nil || resp.StatusCode != 200 || body != "/hook "+payload+" env=" {
		t.Errorf("a signed webhook: %v %v %q", err, resp, body)
	}
	if resp, _, err := post("/hook", payload+" ", sign(payload)); err != nil || resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3204" {
		t.Errorf("a tampered webhook: %v %v", err, resp)
	}
	if n := reached.Load() - before; n != 1 {
		t.Errorf("the agent got %d webhooks, want the signed one", n)
	}

	alice := map[string]string{"X-Client": "alice"}
	for i := range 2 {
		if resp, body, err := post("/api", "", alice); err != nil || resp.StatusCode != 200 || !strings.HasPrefix(body, "/api ") {
			t.Fatalf("alice's request %d: %v %v %q", i+1, err, resp, body)
		}
	}
	limited := func(what string) {
		t.Helper()
		resp, _, err := post("/api", "", alice)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || err != nil || ra < 1 || ra > 60 {
			t.Errorf("%s: %d Retry-After %q, want 429 with 1..60", what, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	limited("alice's third request")
	if resp, _, err := post("/api", "", map[string]string{"X-Client": "bob"}); err != nil || resp.StatusCode != 200 {
		t.Errorf("bob's request: %v %v", err, resp)
	}
	// Another module of the route changes: the plan is rebuilt, the rate-limit action is not.
	if st := w.call("PUT", route+"/request_headers", map[string]any{"add": map[string]string{"x-env": "prod"}}, nil); st != 200 {
		t.Fatalf("put request_headers: %d", st)
	}
	eventually(t, 3*time.Second, "the rebuilt plan reaches traffic", func() bool {
		resp, body, err := post("/other", "", nil)
		return err == nil && resp.StatusCode == 200 && strings.HasSuffix(body, "env=prod")
	})
	limited("alice's request after the rebuild")

	// In an agent's own policy, rate-limit counts for the life of the bind; jwt-validation
	// fetches key sets with the data plane's outbound client, as a route's does.
	ctx := context.Background()
	btun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("limited.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"rate-limit","config":{"name":"one","algorithm":"sliding_window","capacity":1,"rate":"60s","bucket_key":["conn.client_ip"]}}]}]}`)))
	if err != nil {
		t.Fatalf("listen with a rate limit: %v", err)
	}
	serveTunnel(t, btun, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "bound") }))
	hc := w.httpClient()
	if st, body, _ := get(t, hc, "http://limited.edgeplane.app/"); st != 200 || body != "bound" {
		t.Errorf("the bind's first request: %d %q", st, body)
	}
	if st, _, h := get(t, hc, "http://limited.edgeplane.app/"); st != 429 || h.Get("Retry-After") == "" {
		t.Errorf("the bind's second request: %d %v", st, h)
	}
	jtun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("jwt.edgeplane.app"), config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"jwt-validation","config":{
	  "issuer":{"allow_list":[{"value":"https://idp.example.com/"}]},"http":{"tokens":[{"type":"jwt","method":"header","name":"Authorization","prefix":"Bearer "}]},
	  "jws":{"allowed_algorithms":["RS256"],"keys":{"sources":{"additional_jkus":["https://idp.example.com/jwks"]}}}}}]}]}`)))
	if err != nil {
		t.Fatalf("jwt-validation in a bind's policy: %v", err)
	}
	serveTunnel(t, jtun, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "reached") }))
	if st, _, h := get(t, hc, "http://jwt.edgeplane.app/"); st != 401 || h.Get("ngrok-error-code") != "ERR_NGROK_3406" {
		t.Errorf("a bind's jwt-validation without a token: %d %v", st, h)
	}
}

// listenEcho binds opts on sess and answers "echo "+5 bytes on each connection (over the agent's
// own TLS when cert is set), within 10 s; seen counts the connections the agent got.
func listenEcho(t *testing.T, sess ngrok.Session, opts config.Tunnel, cert *tls.Certificate) (url string, seen *atomic.Int32) {
	t.Helper()
	tun, err := sess.Listen(context.Background(), opts)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { tun.Close() })
	seen = &atomic.Int32{}
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			seen.Add(1)
			go func() {
				if cert != nil {
					c = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 5)
				_, _ = io.ReadFull(c, buf)
				_, _ = c.Write(append([]byte("echo "), buf...))
			}()
		}
	}()
	return tun.URL(), seen
}
