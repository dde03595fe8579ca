package enforce

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// servers serves h over HTTP/1.1 (plain) and HTTP/2 (TLS), each with its client.
func servers(t *testing.T, h http.Handler) map[string]*httptest.Server {
	h1 := httptest.NewServer(h)
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(func() { h1.Close(); h2.Close() })
	return map[string]*httptest.Server{"HTTP/1.1": h1, "HTTP/2": h2}
}

// stalledPost POSTs to path a body of which only first is ever sent, and returns the answer
// (failing the test when none comes within 20 s: without a time bound the server would wait
// for the rest of the body for ever).
func stalledPost(t *testing.T, srv *httptest.Server, path, contentType, first string) *http.Response {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() { _, _ = pw.Write([]byte(first)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, pr)
	req.ContentLength = int64(len(first) + 100)
	req.Header.Set("Content-Type", contentType)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A webhook delivery whose body stops arriving is answered 408 ERR_NGROK_3204 once its time
// bound has passed (shortened here), over HTTP/1.1 and HTTP/2, and never reaches the upstream;
// the same delivery sent whole passes.
func TestWebhookBodyTimeout(t *testing.T) {
	gh, err := NewWebhookVerification("github", "s", WebhookOptions{BodyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reached := make(chan struct{}, 10)
	h := gh.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		_, _ = io.Copy(w, r.Body)
	}))
	for proto, srv := range servers(t, h) {
		resp := stalledPost(t, srv, "/hook", "application/json", `{"id":`)
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3204" {
			t.Errorf("%s: a stalled body: %d %s, want 408 ERR_NGROK_3204", proto, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
		if len(reached) != 0 {
			t.Errorf("%s: a stalled body reached the upstream", proto)
		}
		req, _ := http.NewRequest("POST", srv.URL+"/hook", strings.NewReader("{}"))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hx(hm(sha256.New, "s", "{}")))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "{}" {
			t.Errorf("%s: a signed delivery: %d %q", proto, resp.StatusCode, b)
		}
		<-reached
	}
}

// The SAML endpoints that take a posted form (the ACS, the SLO URL) answer 408 when the form
// stops arriving, over HTTP/1.1 and HTTP/2.
func TestSAMLFormTimeout(t *testing.T) {
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.BodyTimeout = 200 * time.Millisecond })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.handler.ServeHTTP(w, r) })
	for proto, srv := range servers(t, h) {
		for _, path := range []string{"/ngrok/saml/rt_1/acs", "/ngrok/saml/rt_1/slo"} {
			resp := stalledPost(t, srv, path, "application/x-www-form-urlencoded", "SAMLResponse=PHNhbWxw")
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_"+strconv.Itoa(CodeSignInFailed) {
				t.Errorf("%s %s: a stalled form: %d %s, want 408 ERR_NGROK_%d", proto, path, resp.StatusCode, resp.Header.Get("ngrok-error-code"), CodeSignInFailed)
			}
		}
	}
	if _, hits := e.lastUpstream(); hits != 0 {
		t.Fatal("a stalled form reached the upstream")
	}
}

// jwt_validation reading a body for its token answers 408 ERR_NGROK_3406 when the body stops
// arriving (its time bound shortened here), over HTTP/1.1 and HTTP/2, and the upstream never sees
// the request; a whole body with a valid token still passes.
func TestJWTBodyTimeout(t *testing.T) {
	k := newTestKeys(t)
	keys := newJWKSServer(t, k.public()...)
	j, err := NewJWT(JWTConfig{Issuers: []string{"https://idp.example.com/"}, Audiences: []string{"api://edge"},
		Tokens: []JWTToken{{Type: "jwt", Method: "body", Name: "access_token"}}, Algorithms: []string{"RS256"},
		JKUs: []string{keys.URL + "/keys"}, Client: keys.Client(), BodyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reached := make(chan struct{}, 10)
	h := j.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		_, _ = io.Copy(w, r.Body)
	}))
	tok := sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))
	for proto, srv := range servers(t, h) {
		resp := stalledPost(t, srv, "/", "application/json", `{"access_token":"`)
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3406" {
			t.Errorf("%s: a stalled body: %d %s, want 408 ERR_NGROK_3406", proto, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
		if len(reached) != 0 {
			t.Errorf("%s: a stalled body reached the upstream", proto)
		}
		body := `{"access_token":"` + tok + `"}`
		resp, err := srv.Client().Post(srv.URL+"/", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != body {
			t.Errorf("%s: a whole body with a valid token: %d %q", proto, resp.StatusCode, b)
		}
		<-reached
	}
}
