package enforce

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testWAF is compiled once for the package's tests: each compilation takes most of a second.
// testWAFEngine holds its engine for the whole run, as a stage would, so that it is not
// collected (and compiled again) between tests.
var (
	testWAF          = NewWAF()
	testWAFEngine, _ = testWAF.engine()
)

// leakyUpstream answers with a database error in its body when asked for /leak, and echoes the
// request's body otherwise.
var leakyUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html")
	if r.URL.Path == "/leak" {
		_, _ = io.WriteString(w, strings.Repeat("<p>filler</p>", 10)+"<b>Warning</b>: mysql_fetch_array() expects parameter 1 to be resource, boolean given in /var/www/app.php on line 12: You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version")
		return
	}
	b, _ := io.ReadAll(r.Body)
	_, _ = io.WriteString(w, "ok body="+string(b))
})

func wafDo(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.Header.Set("User-Agent", "Mozilla/5.0 (edgeplane test)")
	r.Header.Set("Accept", "text/html")
	if body != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestPolicyOWASPRequest: a SQL injection or XSS in the query is blocked with 403
// ERR_NGROK_3700, a clean request passes with its body intact, the body is inspected only with
// process_body, an excluded rule no longer counts, and on_error continue lets a blocked request
// on with the decision recorded.
func TestPolicyOWASPRequest(t *testing.T) {
	o := PolicyOptions{WAF: testWAF}
	h := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request"}]}]}`, o, leakyUpstream)
	sqli := "/?id=" + url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")
	xss := "/?q=" + url.QueryEscape(`<script>alert(document.cookie)</script>`)
	for _, target := range []string{sqli, xss} {
		if w := wafDo(h, "GET", target, ""); w.Code != 403 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3700" {
			t.Errorf("%s: %d %s %q", target, w.Code, w.Header().Get("ngrok-error-code"), w.Body)
		}
	}
	attackBody := "comment=" + url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")
	if w := wafDo(h, "POST", "/form", attackBody); w.Code != 200 {
		t.Errorf("a body without process_body is not inspected: %d %q", w.Code, w.Body)
	}
	if w := wafDo(h, "POST", "/form", "name=alice&city=paris"); w.Code != 200 || w.Body.String() != "ok body=name=alice&city=paris" {
		t.Errorf("clean: %d %q", w.Code, w.Body)
	}

	body := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"process_body":true}}]}]}`, o, leakyUpstream)
	if w := wafDo(body, "POST", "/form", attackBody); w.Code != 403 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3700" {
		t.Errorf("an attack in the body with process_body: %d %q", w.Code, w.Body)
	}
	long := "name=alice&pad=" + strings.Repeat("a", 2*MaxWAFBody) + "&tail=end"
	if w := wafDo(body, "POST", "/form", long); w.Code != 200 || w.Body.String() != "ok body="+long {
		t.Errorf("a clean body longer than the inspected part reaches the upstream whole: %d %d bytes", w.Code, w.Body.Len())
	}
	late := "name=alice&pad=" + strings.Repeat("a", 2*MaxWAFBody) + "&c=" + url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")
	if w := wafDo(body, "POST", "/form", late); w.Code != 200 {
		t.Errorf("what is past the inspected part is not inspected (as ngrok): %d", w.Code)
	}

	cont := stageWith(t, `{"on_http_request":[
	  {"actions":[{"type":"owasp-crs-request","config":{"on_error":"continue"}}]},
	  {"actions":[{"type":"custom-response","config":{"body":"${actions.ngrok.owasp_crs_request.decision} ${string(actions.ngrok.owasp_crs_request.anomaly_score > 0)}"}}]}]}`, o, leakyUpstream)
	if w := wafDo(cont, "GET", sqli, ""); w.Code != 200 || w.Body.String() != "block true" {
		t.Errorf("on_error continue: %d %q", w.Code, w.Body)
	}
	if w := wafDo(cont, "GET", "/?id=42", ""); w.Code != 200 || w.Body.String() != "allow false" {
		t.Errorf("on_error continue, clean: %d %q", w.Code, w.Body)
	}
}

// TestPolicyOWASPExclude: rules left out by one action's exclude_rule_ids do not count for it,
// and the shared engine keeps them for every other stage.
func TestPolicyOWASPExclude(t *testing.T) {
	o := PolicyOptions{WAF: testWAF}
	xss := "/?q=" + url.QueryEscape(`<script>alert(1)</script>`)
	all := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"on_error":"continue"}}]},
	  {"actions":[{"type":"custom-response","config":{"body":"${string(actions.ngrok.owasp_crs_request.anomaly_score)}"}}]}]}`, o, leakyUpstream)
	w := wafDo(all, "GET", xss, "")
	if w.Body.String() == "0" {
		t.Fatalf("the XSS scored nothing")
	}
	excluded := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"exclude_rule_ids":[941100,941110,941160,941390,942100,941120,941180,941170,941300,941310,941320,941330,941340,941350,941360,941370,941380]}}]}]}`, o, leakyUpstream)
	if w := wafDo(excluded, "GET", xss, ""); w.Code != 200 {
		t.Errorf("XSS rules excluded: %d %q", w.Code, w.Body)
	}
	strict := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request"}]}]}`, o, leakyUpstream)
	if w := wafDo(strict, "GET", xss, ""); w.Code != 403 {
		t.Errorf("another stage on the same engine keeps the rules: %d", w.Code)
	}
}

// TestPolicyOWASPResponse: a response leaking a database error is replaced by 403
// ERR_NGROK_3700 when the body is inspected, a clean one passes whole, and without process_body
// the body is not looked at.
func TestPolicyOWASPResponse(t *testing.T) {
	o := PolicyOptions{WAF: testWAF}
	h := stageWith(t, `{"on_http_response":[{"actions":[{"type":"owasp-crs-response","config":{"process_body":true}}]}]}`, o, leakyUpstream)
	if w := wafDo(h, "GET", "/leak", ""); w.Code != 403 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3700" || strings.Contains(w.Body.String(), "SQL syntax") {
		t.Errorf("leak: %d %s %q", w.Code, w.Header().Get("ngrok-error-code"), w.Body)
	}
	if w := wafDo(h, "POST", "/ok", "name=alice"); w.Code != 200 || w.Body.String() != "ok body=name=alice" {
		t.Errorf("clean: %d %q", w.Code, w.Body)
	}
	big := stageWith(t, `{"on_http_response":[{"actions":[{"type":"owasp-crs-response","config":{"process_body":true}}]}]}`, o,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			for range 10 {
				_, _ = io.WriteString(w, strings.Repeat("x", 1000))
			}
		}))
	if w := wafDo(big, "GET", "/", ""); w.Code != 200 || w.Body.Len() != 10000 {
		t.Errorf("a clean body longer than the inspected part: %d %d bytes", w.Code, w.Body.Len())
	}
	headers := stageWith(t, `{"on_http_response":[{"actions":[{"type":"owasp-crs-response"}]}]}`, o, leakyUpstream)
	if w := wafDo(headers, "GET", "/leak", ""); w.Code != 200 {
		t.Errorf("without process_body the body is not inspected: %d", w.Code)
	}
}

// TestWAFReleased: the engine is compiled when the first stage with an owasp-crs action is
// built and shared by the next ones; once no stage holds it, it is collected, and the next
// such stage compiles it again. A stage without such an action never compiles it.
func TestWAFReleased(t *testing.T) {
	w := NewWAF()
	o := PolicyOptions{WAF: w}
	plain := stageWith(t, `{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x-a":"1"}}}]}]}`, o, leakyUpstream)
	if n := w.compiles.Load(); n != 0 {
		t.Fatalf("%d compilations for a policy without owasp-crs actions", n)
	}
	doc := `{"on_http_request":[{"actions":[{"type":"owasp-crs-request"}]}]}`
	a := stageWith(t, doc, o, leakyUpstream)
	b := stageWith(t, doc, o, leakyUpstream)
	if n := w.compiles.Load(); n != 1 {
		t.Fatalf("%d compilations for two stages, want 1", n)
	}
	xss := "/?q=" + url.QueryEscape(`<script>alert(document.cookie)</script>`)
	for _, h := range []http.Handler{a, b} {
		if rec := wafDo(h, "GET", xss, ""); rec.Code != 403 {
			t.Fatalf("an XSS through a stage sharing the engine: %d", rec.Code)
		}
	}
	a, b = nil, nil
	deadline := time.Now().Add(20 * time.Second)
	for w.cur.Value() != nil && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if w.cur.Value() != nil {
		t.Fatal("the engine is still held with no stage using it")
	}
	c := stageWith(t, doc, o, leakyUpstream)
	if n := w.compiles.Load(); n != 2 {
		t.Errorf("%d compilations after the engine was let go, want 2", n)
	}
	if rec := wafDo(c, "GET", xss, ""); rec.Code != 403 {
		t.Errorf("an XSS through the engine compiled again: %d", rec.Code)
	}
	runtime.KeepAlive(plain)
}
