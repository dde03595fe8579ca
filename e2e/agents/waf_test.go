package agents

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// wafUpstream is the agent's side of the WAF tests: /leak answers with a database error (what
// the Core Rule Set's data leakage rules look for), anything else with "clean". The decision a
// policy passed on in X-Waf-Decision is answered in X-Saw-Waf-Decision.
var wafUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html")
	if d := r.Header.Get("X-Waf-Decision"); d != "" {
		w.Header().Set("X-Saw-Waf-Decision", d)
	}
	if r.URL.Path == "/leak" {
		_, _ = io.WriteString(w, "<p>Error</p><b>Warning</b>: mysql_fetch_array() expects parameter 1 to be resource, boolean given: You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version")
		return
	}
	if r.Method == "POST" {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "clean "+strconv.Itoa(len(b)))
		return
	}
	_, _ = io.WriteString(w, "clean")
})

// postForm posts body as a form with a browser's headers and returns the status, the error
// code and the body of the answer.
func postForm(t *testing.T, c *http.Client, url, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range browser {
		req.Header.Set(k, *v)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("ngrok-error-code"), string(b)
}

// wafRoute makes, in w's account, an edge on host whose route "/" goes to an agent serving
// wafUpstream, and returns the route's path.
func wafRoute(t *testing.T, w *world, host string) string {
	t.Helper()
	_, token := w.credential()
	w.reserveDomain(host)
	tun, err := w.mustConnect(token).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", host)))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, wafUpstream)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": host}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	return "/edges/https/" + edge + "/routes/" + w.mustCreate("/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})
}

// A browser's headers, so that only the attack scores.
var browser = map[string]*string{"User-Agent": ptr("Mozilla/5.0 (X11; Linux x86_64)"), "Accept": ptr("text/html")}

var (
	sqliPath = "/search?q=" + url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")
	xssPath  = "/search?q=" + url.QueryEscape("<script>alert(document.cookie)</script>")
)

// TestOWASPCRSOnRoutes: two accounts' routes with the OWASP Core Rule Set actions, through real
// agents. Account A blocks: a SQL injection or an XSS gets 403 ERR_NGROK_3700 and never reaches
// the agent, a clean request passes, and a response leaking a database error is replaced by 403
// ERR_NGROK_3700. Account B only records (on_error: continue) and inspects no response: the same
// attacks and leak pass there, and B's configuration never loosens A's. A configuration ngrok
// refuses is refused by the API naming the field.
func TestOWASPCRSOnRoutes(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	routeA, routeB := wafRoute(t, wa, "waf-a.example.com"), wafRoute(t, wb, "waf-b.example.com")
	for doc, field := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"on_error":"ignore"}}]}]}`:              "on_http_request[0].actions[0].config.on_error",
		`{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"exclude_rule_ids":[42]}}]}]}`:          "on_http_request[0].actions[0].config.exclude_rule_ids",
		`{"on_http_response":[{"actions":[{"type":"owasp-crs-response","config":{"outbound_anomaly_threshold":9}}]}]}`: "on_http_response[0].actions[0].config",
	} {
		var e apiError
		if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": doc}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, field+":") {
			t.Errorf("PUT %s: %d %s %q, want 400 ERR_NGROK_215 naming %s", doc, st, e.ErrorCode, e.Msg, field)
		}
	}
	docA := `
on_http_request:
  - actions: [{type: owasp-crs-request}]
on_http_response:
  - actions: [{type: owasp-crs-response, config: {process_body: true}}]
`
	docB := `
on_http_request:
  - actions:
      - type: owasp-crs-request
        config: {on_error: continue, exclude_rule_ids: [942100, 941100]}
      - type: add-headers
        config: {headers: {x-waf-decision: "${actions.ngrok.owasp_crs_request.decision}"}}
`
	if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": docA}, nil); st != 200 {
		t.Fatalf("put A's policy: %d", st)
	}
	if st := wb.call("PUT", routeB+"/traffic_policy", map[string]any{"value": docB}, nil); st != 200 {
		t.Fatalf("put B's policy: %d", st)
	}
	c := wa.httpsClient()
	eventually(t, 10*time.Second, "A's policy reaches traffic", func() bool {
		resp, _, err := try(c, "GET", "https://waf-a.example.com"+sqliPath, browser)
		return err == nil && resp.StatusCode == 403
	})
	for _, path := range []string{sqliPath, xssPath} {
		resp, body := send(t, c, "GET", "https://waf-a.example.com"+path, browser)
		if resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3700" || strings.Contains(string(body), "clean") {
			t.Errorf("A %s: %d %s %q", path, resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
		}
	}
	if resp, body := send(t, c, "GET", "https://waf-a.example.com/search?q=blue+shoes", browser); resp.StatusCode != 200 || string(body) != "clean" {
		t.Errorf("A clean: %d %q", resp.StatusCode, body)
	}
	if resp, body := send(t, c, "GET", "https://waf-a.example.com/leak", browser); resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3700" || strings.Contains(string(body), "SQL syntax") {
		t.Errorf("A's leaking response: %d %s %q", resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
	}

	// B's policy lets everything through, as the route does before the policy reaches the plan:
	// only the decision it passes on to the agent says it is there.
	eventually(t, 10*time.Second, "B's policy reaches traffic", func() bool {
		resp, _, err := try(c, "GET", "https://waf-b.example.com/search?q=blue+shoes", browser)
		return err == nil && resp.StatusCode == 200 && resp.Header.Get("X-Saw-Waf-Decision") == "allow"
	})
	for _, path := range []string{sqliPath, xssPath} {
		if resp, body := send(t, c, "GET", "https://waf-b.example.com"+path, browser); resp.StatusCode != 200 || string(body) != "clean" {
			t.Errorf("B %s (on_error: continue): %d %q", path, resp.StatusCode, body)
		}
	}
	if resp, body := send(t, c, "GET", "https://waf-b.example.com/leak", browser); resp.StatusCode != 200 || !strings.Contains(string(body), "SQL syntax") {
		t.Errorf("B inspects no response: %d %q", resp.StatusCode, body)
	}
	// B's exclusions and on_error never reach A, whose stage shares the server's engine.
	if resp, _ := send(t, c, "GET", "https://waf-a.example.com"+xssPath, browser); resp.StatusCode != 403 {
		t.Errorf("A after B's traffic: %d", resp.StatusCode)
	}
}

// TestOWASPCRSOnAgentBinds: agents of two accounts bind endpoints with their own policies:
// A's blocks a SQL injection with 403 ERR_NGROK_3700 and a leaking response likewise, and lets
// a clean request through; B's only records the decision, which its upstream sees; a bind whose
// action configuration ngrok refuses is refused with ERR_NGROK_301 naming the field.
func TestOWASPCRSOnAgentBinds(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	ctx := context.Background()
	docs := map[string]string{
		"wafbind-a": `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"process_body":true}}]}],
		  "on_http_response":[{"actions":[{"type":"owasp-crs-response","config":{"process_body":true}}]}]}`,
		"wafbind-b": `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"on_error":"continue"}},
		  {"type":"custom-response","config":{"status_code":200,"body":"b decided ${actions.ngrok.owasp_crs_request.decision}"}}]}]}`,
	}
	for name, w := range map[string]*world{"wafbind-a": wa, "wafbind-b": wb} {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(ctx, config.HTTPEndpoint(config.WithDomain(name+".edgeplane.app"),
			config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(docs[name])))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		serveTunnel(t, tun, wafUpstream)
	}
	hc := wa.httpClient()
	if resp, body := send(t, hc, "GET", "http://wafbind-a.edgeplane.app"+sqliPath, browser); resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3700" {
		t.Errorf("A's bind, SQL injection: %d %q", resp.StatusCode, body)
	}
	if resp, body := send(t, hc, "GET", "http://wafbind-a.edgeplane.app/search?q=blue+shoes", browser); resp.StatusCode != 200 || string(body) != "clean" {
		t.Errorf("A's bind, clean: %d %q", resp.StatusCode, body)
	}
	// process_body: an attack in the body is blocked; a clean body longer than the 4 KiB
	// inspected reaches the agent whole.
	if st, code, body := postForm(t, hc, "http://wafbind-a.edgeplane.app/form", "comment="+url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")); st != 403 || code != "ERR_NGROK_3700" {
		t.Errorf("A's bind, SQL injection in the body: %d %s %q", st, code, body)
	}
	long := "name=alice&pad=" + strings.Repeat("a", 20000)
	if st, _, body := postForm(t, hc, "http://wafbind-a.edgeplane.app/form", long); st != 200 || body != "clean "+strconv.Itoa(len(long)) {
		t.Errorf("A's bind, a long clean body: %d %q", st, body)
	}
	if resp, body := send(t, hc, "GET", "http://wafbind-a.edgeplane.app/leak", browser); resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3700" {
		t.Errorf("A's bind, leaking response: %d %q", resp.StatusCode, body)
	}
	if resp, body := send(t, hc, "GET", "http://wafbind-b.edgeplane.app"+sqliPath, browser); resp.StatusCode != 200 || string(body) != "b decided block" {
		t.Errorf("B's bind, SQL injection (on_error: continue): %d %q", resp.StatusCode, body)
	}
	if resp, body := send(t, hc, "GET", "http://wafbind-b.edgeplane.app/search?q=blue+shoes", browser); resp.StatusCode != 200 || string(body) != "b decided allow" {
		t.Errorf("B's bind, clean: %d %q", resp.StatusCode, body)
	}
	_, token := wa.credential()
	_, err := wa.mustConnect(token).Listen(ctx, config.HTTPEndpoint(config.WithDomain("wafbind-c.edgeplane.app"),
		config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"exclude_rule_ids":[42]}}]}]}`)))
	if got := ngrokCode(err); got != "ERR_NGROK_301" || !strings.Contains(err.Error(), "exclude_rule_ids") {
		t.Errorf("a bind with a configuration ngrok refuses: %v", err)
	}
}
