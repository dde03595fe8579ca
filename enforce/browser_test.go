package enforce

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"testing"
	"time"
)

// The oauth and oidc tests share these: an edge serving a sign-in stage in front of an upstream
// that echoes the identity headers, and a browser to sign in through it.

// signInEdge serves the stage newStage makes of cfg (after mut, when not nil) in front of
// upstreamEcho.
func signInEdge[C any](t *testing.T, cfg C, mut func(*C), newStage func(C) (Stage, error)) *httptest.Server {
	t.Helper()
	if mut != nil {
		mut(&cfg)
	}
	st, err := newStage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	edge := httptest.NewTLSServer(st.Wrap(upstreamEcho()))
	t.Cleanup(edge.Close)
	return edge
}

// upstreamEcho answers with the identity headers it received.
func upstreamEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Got-Email", r.Header.Get("ngrok-auth-user-email"))
		w.Header().Set("X-Got-Id", r.Header.Get("ngrok-auth-user-id"))
		w.Header().Set("X-Got-Name", r.Header.Get("ngrok-auth-user-name"))
		_, _ = io.WriteString(w, "upstream "+r.URL.RequestURI())
	})
}

// browser is a client with a cookie jar that follows redirects and trusts the test servers.
func browser(t *testing.T, srv *httptest.Server) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Transport: srv.Client().Transport, Timeout: 30 * time.Second}
}

// noFollow is b (its cookie jar and transport) without following redirects, to see where a
// response sends the browser.
func noFollow(b *http.Client) *http.Client {
	c := *b
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func wantCode(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("ngrok-error-code") != code {
		t.Fatalf("got %d %q, want %d %q", resp.StatusCode, resp.Header.Get("ngrok-error-code"), status, code)
	}
}
