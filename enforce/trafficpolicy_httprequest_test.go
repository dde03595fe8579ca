package enforce

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPolicyHTTPRequest: http-request makes the request its configuration describes and later
// rules read the answer; redirects, retries, the size bound, the timeout, loops and internal
// endpoints behave as documented, each failure recorded with its code, and on_error: halt
// answers 502 with it.
func TestPolicyHTTPRequest(t *testing.T) {
	var calls, flaky atomic.Int32
	block := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Hops", r.Header.Get("Ngrok-Req-Hops"))
			_, _ = io.WriteString(w, r.Method+" "+r.URL.RawQuery+" "+r.Header.Get("X-Token")+" "+r.Header.Get("X-Forwarded-For")+" "+r.Header.Get("Ngrok-Req-Type")+" "+string(b))
		case "/redirect":
			http.Redirect(w, r, "/redirect2", http.StatusFound)
		case "/redirect2":
			http.Redirect(w, r, "/echo", http.StatusFound)
		case "/big":
			_, _ = io.WriteString(w, strings.Repeat("b", MaxHTTPRequestBody+1))
		case "/flaky":
			if flaky.Add(1) < 3 {
				w.WriteHeader(500)
				return
			}
			_, _ = io.WriteString(w, "recovered")
		case "/slow":
			<-block
		}
	}))
	defer target.Close()
	defer close(block) // before the server closes: its slow handler waits on it
	o := PolicyOptions{Outbound: target.Client()}
	run := func(cfg, read string, hdr map[string]string) *httptest.ResponseRecorder {
		t.Helper()
		doc := `{"on_http_request":[{"actions":[{"type":"http-request","config":` + strings.ReplaceAll(cfg, "TARGET", target.URL) + `}]},
		  {"actions":[{"type":"custom-response","config":{"body":"` + read + `"}}]}]}`
		return serve(stageWith(t, doc, o, echoUpstream), "GET", "https://a.test/p", hdr)
	}
	w := run(`{"url":"TARGET/echo","method":"POST","query_params":[{"key":"q","value":"${req.url.path}"}],"headers":{"x-token":"${req.headers['x-in'][0]}"},"body":"hi ${conn.client_ip}"}`,
		`${actions.ngrok.http_request.res.status_code} ${actions.ngrok.http_request.res.body} hops=${actions.ngrok.http_request.res.header['x-hops'][0]} ${actions.ngrok.http_request.req.url}`,
		map[string]string{"X-In": "tok"})
	if want := "200 POST q=%2Fp tok 192.0.2.7 http-request hi 192.0.2.7 hops=1 " + target.URL + "/echo?q=%2Fp"; w.Body.String() != want {
		t.Errorf("the answer read by the next rule:\n got %q\nwant %q", w.Body, want)
	}
	if w := run(`{"url":"TARGET/redirect"}`, `${actions.ngrok.http_request.res.status_code}`, nil); w.Body.String() != "302" {
		t.Errorf("no redirects followed by default: %q", w.Body)
	}
	if w := run(`{"url":"TARGET/redirect","max_redirects":2}`, `${actions.ngrok.http_request.res.body}`, nil); !strings.HasPrefix(w.Body.String(), "GET") {
		t.Errorf("two redirects followed: %q", w.Body)
	}
	if w := run(`{"url":"TARGET/redirect","max_redirects":1}`, `${actions.ngrok.http_request.error.code}`, nil); w.Body.String() != "ERR_NGROK_3214" {
		t.Errorf("too many redirects: %q", w.Body)
	}
	if w := run(`{"url":"TARGET/big"}`, `${actions.ngrok.http_request.error.code}`, nil); w.Body.String() != "ERR_NGROK_3601" {
		t.Errorf("an answer over the bound: %q", w.Body)
	}
	if w := run(`{"url":"TARGET/flaky","retry_condition":"last_attempt.res.statusCode == 500"}`, `${actions.ngrok.http_request.res.body} ${size(actions.ngrok.http_request.attempts)}`, nil); w.Body.String() != "recovered 3" {
		t.Errorf("retried while the condition held: %q", w.Body)
	}
	if w := run(`{"url":"https://svc.internal/x"}`, `${actions.ngrok.http_request.error.message}`, nil); !strings.Contains(w.Body.String(), "cannot reach internal endpoints") {
		t.Errorf("an internal endpoint: %q", w.Body)
	}
	if w := run(`{"url":"TARGET/echo"}`, `${actions.ngrok.http_request.error.code}`, map[string]string{"Ngrok-Req-Hops": "3"}); w.Body.String() != "ERR_NGROK_3603" {
		t.Errorf("a request that went through three actions: %q", w.Body)
	}
	before := calls.Load()
	halt := stageWith(t, `{"on_http_request":[{"actions":[{"type":"http-request","config":{"url":"`+target.URL+`/slow","timeout":"1s","on_error":"halt"}}]}]}`, o, echoUpstream)
	if w := serve(halt, "GET", "https://a.test/", nil); w.Code != 502 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3602" {
		t.Errorf("halt on a timeout: %d %v", w.Code, w.Header())
	}
	cont := stageWith(t, `{"on_http_request":[{"actions":[{"type":"http-request","config":{"url":"`+target.URL+`/big"}}]}]}`, o, echoUpstream)
	if w := serve(cont, "GET", "https://a.test/", nil); w.Code != 200 || !strings.HasPrefix(w.Body.String(), "seen=") {
		t.Errorf("continue on a failure: %d %q", w.Code, w.Body)
	}
	if calls.Load()-before != 2 {
		t.Errorf("%d calls, want 2", calls.Load()-before)
	}
	resp := stageWith(t, `{"on_http_response":[{"actions":[{"type":"http-request","config":{"url":"`+target.URL+`/echo?s=${res.status_code}"}},
	  {"type":"add-headers","config":{"headers":{"x-got":"${actions.ngrok.http_request.res.body}"}}}]}]}`, o, echoUpstream)
	if w := serve(resp, "GET", "https://a.test/", nil); !strings.HasPrefix(w.Header().Get("X-Got"), "GET s=200") {
		t.Errorf("in on_http_response: %v", w.Header())
	}
	if _, err := NewTrafficPolicy(mustParse(t, `{"on_http_request":[{"actions":[{"type":"http-request","config":{"url":"https://example.com/"}}]}]}`)); err == nil || !strings.Contains(err.Error(), "outbound HTTP client") {
		t.Errorf("without an outbound client: %v", err)
	}
}
