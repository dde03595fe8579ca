package enforce

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPolicyOWASPBodyErrors: a request body whose inspected part stops arriving is answered 408
// ERR_NGROK_3903 once its time bound has passed (shortened here), over HTTP/1.1 and HTTP/2, and
// never reaches the upstream; an encoded body that cannot be inspected, in a request or in the
// upstream's answer, gets 503 ERR_NGROK_3700 with on_error halt and passes with continue.
func TestPolicyOWASPBodyErrors(t *testing.T) {
	o := PolicyOptions{WAF: &WAF{BodyTimeout: 200 * time.Millisecond}}
	reached := make(chan struct{}, 10)
	h := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"process_body":true}}]}]}`, o,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached <- struct{}{}
			_, _ = io.Copy(w, r.Body)
		}))
	for proto, srv := range servers(t, h) {
		resp := stalledPost(t, srv, "/form", "application/x-www-form-urlencoded", "name=")
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3903" {
			t.Errorf("%s: a stalled body: %d %s, want 408 ERR_NGROK_3903", proto, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
		if len(reached) != 0 {
			t.Errorf("%s: a stalled body reached the upstream", proto)
		}
	}

	encodedReq := func(h http.Handler) int {
		r, _ := http.NewRequest("POST", "https://a.test/form", strings.NewReader("\x1f\x8b not really gzip"))
		r.Header.Set("Content-Encoding", "gzip")
		r.Header.Set("User-Agent", "Mozilla/5.0")
		r.Header.Set("Accept", "text/html")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusServiceUnavailable && w.Header().Get("ngrok-error-code") != "ERR_NGROK_3700" {
			return -1
		}
		return w.Code
	}
	if got := encodedReq(h); got != http.StatusServiceUnavailable {
		t.Errorf("an encoded request body, on_error halt: %d, want 503 ERR_NGROK_3700", got)
	}
	cont := stageWith(t, `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"process_body":true,"on_error":"continue"}}]}]}`, o, leakyUpstream)
	if got := encodedReq(cont); got != 200 {
		t.Errorf("an encoded request body, on_error continue: %d", got)
	}

	gzipped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "identity" {
			t.Errorf("the upstream was asked for %q, want identity", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip") // despite being asked for identity
		_, _ = io.WriteString(w, "\x1f\x8b...")
	})
	resp := stageWith(t, `{"on_http_response":[{"actions":[{"type":"owasp-crs-response","config":{"process_body":true}}]}]}`, o, gzipped)
	if w := wafDo(resp, "GET", "/", ""); w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3700" || strings.Contains(w.Body.String(), "\x1f\x8b") {
		t.Errorf("an encoded response, on_error halt: %d %s %q", w.Code, w.Header().Get("ngrok-error-code"), w.Body)
	}
	respCont := stageWith(t, `{"on_http_response":[{"actions":[{"type":"owasp-crs-response","config":{"process_body":true,"on_error":"continue"}}]}]}`, o, gzipped)
	if w := wafDo(respCont, "GET", "/", ""); w.Code != 200 || w.Body.String() != "\x1f\x8b..." {
		t.Errorf("an encoded response, on_error continue: %d %q", w.Code, w.Body)
	}
}

// TestPolicyOWASPResponseResults: a later rule of on_http_response reads owasp-crs-response's
// result: with process_body it is the decision on the status and headers (the body is decided
// after the phase's rules), and on_error continue lets the leaking body through.
func TestPolicyOWASPResponseResults(t *testing.T) {
	o := PolicyOptions{WAF: testWAF}
	h := stageWith(t, `{"on_http_response":[
	  {"actions":[{"type":"owasp-crs-response","config":{"process_body":true,"on_error":"continue"}}]},
	  {"actions":[{"type":"add-headers","config":{"headers":{"x-waf":"${actions.ngrok.owasp_crs_response.decision}"}}}]}]}`, o, leakyUpstream)
	w := wafDo(h, "GET", "/leak", "")
	if w.Code != 200 || w.Header().Get("X-Waf") != "allow" || !strings.Contains(w.Body.String(), "SQL syntax") {
		t.Errorf("on_error continue: %d %q %q", w.Code, w.Header().Get("X-Waf"), w.Body)
	}
}
