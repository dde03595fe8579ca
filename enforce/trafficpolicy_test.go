package enforce

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// policyStage parses doc and builds its stage in front of an upstream that answers with what it
// received: the URL, the Host and the request's headers, and a Server header to remove.
func policyStage(t *testing.T, doc string) http.Handler {
	t.Helper()
	p, err := trafficpolicy.Parse(doc)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	st, err := NewTrafficPolicy(p)
	if err != nil {
		t.Fatalf("stage: %v", err)
	}
	return st.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "apache")
		w.Header().Set("X-Up", "1")
		io.WriteString(w, "up "+r.URL.RequestURI()+" host="+r.Host+" x-a="+strings.Join(r.Header.Values("X-A"), ",")+" x-gone="+r.Header.Get("X-Gone"))
	}))
}

// serve sends one request through h: method and target, with headers and a client address.
func serve(h http.Handler, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "192.0.2.7:4000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestPolicyDenyAndCustomResponse: deny and custom-response answer when their rule's
// expressions all hold, and the request goes upstream otherwise.
func TestPolicyDenyAndCustomResponse(t *testing.T) {
	h := policyStage(t, `{"on_http_request":[
	  {"expressions":["req.method == 'DELETE'"],"actions":[{"type":"deny","config":{"status_code":405}}]},
	  {"expressions":["req.url.path == '/teapot'","'x-tea' in req.headers"],"actions":[{"type":"custom-response","config":{"status_code":418,"body":"short and stout","headers":{"X-Kind":"tea"}}}]},
	  {"expressions":["req.url.path == '/blocked'"],"actions":[{"type":"deny"}]}]}`)
	if w := serve(h, "DELETE", "https://a.test/x", nil); w.Code != 405 || strings.Contains(w.Body.String(), "up") {
		t.Errorf("DELETE: %d %q", w.Code, w.Body)
	}
	if w := serve(h, "GET", "https://a.test/blocked", nil); w.Code != 403 {
		t.Errorf("deny's default: %d", w.Code)
	}
	w := serve(h, "GET", "https://a.test/teapot", map[string]string{"X-Tea": "1"})
	if w.Code != 418 || w.Body.String() != "short and stout" || w.Header().Get("X-Kind") != "tea" {
		t.Errorf("custom-response: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w := serve(h, "GET", "https://a.test/teapot", nil); w.Code != 200 || !strings.HasPrefix(w.Body.String(), "up /teapot") {
		t.Errorf("one expression false: %d %q", w.Code, w.Body)
	}
}

// TestPolicyHeaders: add-headers appends to the request (Host replaces), remove-headers deletes
// in any case; on the response, the same once the upstream's status is written.
func TestPolicyHeaders(t *testing.T) {
	h := policyStage(t, `
on_http_request:
  - actions:
      - type: remove-headers
        config: {headers: [x-gone]}
      - type: add-headers
        config: {headers: {x-a: added, host: inner.test}}
on_http_response:
  - expressions: ["res.status_code == 200", "res.headers['server'][0] == 'apache'"]
    actions:
      - type: remove-headers
        config: {headers: [SERVER]}
      - type: add-headers
        config: {headers: {x-up: "2"}}
`)
	w := serve(h, "GET", "https://a.test/p", map[string]string{"X-A": "client", "X-Gone": "secret"})
	if got := w.Body.String(); got != "up /p host=inner.test x-a=client,added x-gone=" {
		t.Errorf("upstream saw %q", got)
	}
	if w.Header().Get("Server") != "" || strings.Join(w.Header().Values("X-Up"), ",") != "1,2" {
		t.Errorf("response headers: %v", w.Header())
	}
}

// TestPolicyResponseAnswers: in on_http_response, deny and custom-response replace the upstream's
// answer (its status, headers and body) when their rule holds.
func TestPolicyResponseAnswers(t *testing.T) {
	h := policyStage(t, `{"on_http_response":[
	  {"expressions":["req.url.path == '/hide'"],"actions":[{"type":"deny","config":{"status_code":404}}]},
	  {"expressions":["res.headers['server'][0] == 'apache'","req.url.path == '/sorry'"],"actions":[{"type":"custom-response","config":{"status_code":503,"body":"sorry, ${req.url.path}","headers":{"retry-after":"5"}}}]}]}`)
	if w := serve(h, "GET", "https://a.test/hide", nil); w.Code != 404 || w.Body.Len() != 0 || w.Header().Get("Server") != "" {
		t.Errorf("deny: %d %q %v", w.Code, w.Body, w.Header())
	}
	w := serve(h, "GET", "https://a.test/sorry", nil)
	if w.Code != 503 || w.Body.String() != "sorry, /sorry" || w.Header().Get("Retry-After") != "5" || w.Header().Get("X-Up") != "" {
		t.Errorf("custom-response: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w := serve(h, "GET", "https://a.test/other", nil); w.Code != 200 || !strings.HasPrefix(w.Body.String(), "up /other") {
		t.Errorf("no rule holds: %d %q", w.Code, w.Body)
	}
}

// TestPolicyInterpolation: ${…} in header values, a custom-response body and a redirect's to is
// evaluated per request with the phase's variables.
func TestPolicyInterpolation(t *testing.T) {
	h := policyStage(t, `{"on_http_request":[
	  {"expressions":["req.url.path == '/echo'"],"actions":[{"type":"custom-response","config":{"body":"${req.method} ${req.url.path} from ${conn.client_ip}","headers":{"x-q":"${req.url.query_params['q']}"}}}]},
	  {"expressions":["req.url.path == '/go'"],"actions":[{"type":"redirect","config":{"to":"https://${req.host}/went${req.url.path}"}}]},
	  {"actions":[{"type":"add-headers","config":{"headers":{"x-a":"ip=${conn.client_ip}"}}}]}],
	 "on_http_response":[{"actions":[{"type":"add-headers","config":{"headers":{"x-status":"${res.status_code}"}}}]}]}`)
	w := serve(h, "GET", "https://a.test/echo?q=1&q=2", nil)
	if w.Body.String() != "GET /echo from 192.0.2.7" || w.Header().Get("X-Q") != "1,2" || w.Header().Get("X-Status") != "200" {
		t.Errorf("custom-response: %q %v", w.Body, w.Header())
	}
	if w := serve(h, "GET", "https://a.test/go", nil); w.Code != 302 || w.Header().Get("Location") != "https://a.test/went/go" {
		t.Errorf("redirect: %d %v", w.Code, w.Header())
	}
	if w := serve(h, "GET", "https://a.test/x", nil); !strings.Contains(w.Body.String(), "x-a=ip=192.0.2.7") {
		t.Errorf("add-headers: %q", w.Body)
	}
}

// TestPolicyRedirectAndRewrite: redirect sends the client elsewhere when from matches the full
// URL; url-rewrite changes the path and query the upstream gets.
func TestPolicyRedirectAndRewrite(t *testing.T) {
	h := policyStage(t, `{"on_http_request":[
	  {"actions":[{"type":"redirect","config":{"from":"^https://a.test/old/(.*)$","to":"https://a.test/new/$1","status_code":301}}]},
	  {"actions":[{"type":"url-rewrite","config":{"from":"/v1/([a-z]+)\\?id=(\\d+)","to":"/v2/$1/$2?src=v1"}}]}]}`)
	w := serve(h, "GET", "https://a.test/old/page?q=1", nil)
	if w.Code != 301 || w.Header().Get("Location") != "https://a.test/new/page?q=1" {
		t.Errorf("redirect: %d %q", w.Code, w.Header().Get("Location"))
	}
	if w := serve(h, "GET", "https://a.test/v1/users?id=42", nil); !strings.HasPrefix(w.Body.String(), "up /v2/users/42?src=v1 ") {
		t.Errorf("rewrite: %d %q", w.Code, w.Body)
	}
	if w := serve(h, "GET", "https://a.test/other", nil); !strings.HasPrefix(w.Body.String(), "up /other ") {
		t.Errorf("no match: %d %q", w.Code, w.Body)
	}
}

// TestPolicyRestrictIPs: restrict-ips refuses a client its rules do not admit; enforce: false
// only reports.
func TestPolicyRestrictIPs(t *testing.T) {
	h := policyStage(t, `{"on_http_request":[{"actions":[{"type":"restrict-ips","config":{"deny":["192.0.2.0/24"]}}]}]}`)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 403 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3205" {
		t.Errorf("denied client: %d %v", w.Code, w.Header())
	}
	h = policyStage(t, `{"on_http_request":[{"actions":[{"type":"restrict-ips","config":{"allow":["192.0.2.7/32"]}}]}]}`)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 200 {
		t.Errorf("allowed client: %d", w.Code)
	}
	h = policyStage(t, `{"on_http_request":[{"actions":[{"type":"restrict-ips","config":{"enforce":false,"deny":["0.0.0.0/0"]}}]}]}`)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 200 {
		t.Errorf("enforce false: %d", w.Code)
	}
}

// TestPolicyFailsClosed: what the stage does not apply is refused when it is built, naming it;
// an expression that fails to evaluate answers 503.
func TestPolicyFailsClosed(t *testing.T) {
	for doc, want := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"saml"}]}]}`:                                              "saml action is not applied",
		`{"on_http_request":[{"actions":[{"type":"redirect","config":{"from":"${req.host}","to":"/"}}]}]}`: "CEL interpolation",
		`{"on_http_request":[{"actions":[{"type":"restrict-ips","config":{"ip_policies":["ipp_1"]}}]}]}`:   "ip_policies",
	} {
		p, err := trafficpolicy.Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if _, err := NewTrafficPolicy(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	h := policyStage(t, `{"on_http_request":[{"expressions":["req.headers['x-absent'][0] == 'x'"],"actions":[{"type":"deny"}]}]}`)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3210" {
		t.Errorf("an evaluation error: %d %q", w.Code, w.Body)
	}
	h = policyStage(t, `{"on_http_response":[{"expressions":["res.headers['x-absent'][0] == 'x'"],"actions":[{"type":"remove-headers","config":{"headers":["x"]}}]}]}`)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 503 || strings.Contains(w.Body.String(), "up ") {
		t.Errorf("an evaluation error on the response: %d %q", w.Code, w.Body)
	}
}

// TestPolicyTCPConnectOnRoute: on a route, on_tcp_connect runs on every request first; a refusal
// aborts the request (the server closes the connection) before the upstream is reached.
func TestPolicyTCPConnectOnRoute(t *testing.T) {
	h := policyStage(t, `{"on_tcp_connect":[{"expressions":["conn.client_ip == '192.0.2.7'"],"actions":[{"type":"deny"}]}]}`)
	aborted := func() (v any) {
		defer func() { v = recover() }()
		serve(h, "GET", "https://a.test/", nil)
		return nil
	}()
	if aborted != http.ErrAbortHandler {
		t.Errorf("a denied connection: %v", aborted)
	}
	h = policyStage(t, `{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"allow":["192.0.2.0/24"]}}]}]}`)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 200 {
		t.Errorf("an admitted client: %d", w.Code)
	}
}

// TestConnPolicy: on_tcp_connect decides on a connection by its addresses: deny and
// restrict-ips close it, and HTTP phases or other actions are refused when it is built.
func TestConnPolicy(t *testing.T) {
	build := func(doc string) (*ConnPolicy, error) {
		p, err := trafficpolicy.Parse(doc)
		if err != nil {
			t.Fatalf("parse %s: %v", doc, err)
		}
		return NewConnPolicy(p)
	}
	client := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}
	server := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 26001}
	for doc, want := range map[string]bool{
		`{"on_tcp_connect":[{"expressions":["conn.client_ip == '192.0.2.7'","conn.server_port == 26001"],"actions":[{"type":"deny"}]}]}`: false,
		`{"on_tcp_connect":[{"expressions":["conn.client_port == 1"],"actions":[{"type":"deny"}]}]}`:                                     true,
		`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"allow":["10.0.0.0/8"]}}]}]}`:                                   false,
		`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"allow":["192.0.2.0/24"]}}]}]}`:                                 true,
		`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"enforce":false,"deny":["0.0.0.0/0"]}}]}]}`:                     true,
		`{"on_tcp_connect":[{"expressions":["inCidrRange(conn.client_ip, '192.0.2.0/24')"],"actions":[{"type":"deny"}]}]}`:               false,
		`{}`: true,
	} {
		cp, err := build(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if got := cp.Allow(client, server); got != want {
			t.Errorf("%s: %v, want %v", doc, got, want)
		}
	}
	for doc, want := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"deny"}]}]}`:                                           "on_http_request does not apply",
		`{"on_tcp_connect":[{"actions":[{"type":"log","config":{"metadata":{"a":"b"}}}]}]}`:             "needs the data plane's policy log",
		`{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"ip_policies":["ipp_1"]}}]}]}`: "ip_policies",
	} {
		if _, err := build(doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
