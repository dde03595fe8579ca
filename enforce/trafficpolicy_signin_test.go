package enforce

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// TestSignInActionsBuild: a sign-in action that cannot work is refused when the stage is built,
// naming why (no managed application for the provider, interpolation in a secret, no session
// key); one that can sends a visitor without a session to the provider with its
// authz_url_params, and answers its special paths only for its own auth_id.
func TestSignInActionsBuild(t *testing.T) {
	key := make([]byte, 32)
	opts := PolicyOptions{Outbound: http.DefaultClient, SignIn: &SignInOptions{SessionKey: key,
		OAuthApps: map[string]OAuthApp{"google": {ClientID: "managed", ClientSecret: "secret"}}}}
	build := func(doc string, o PolicyOptions) (*TrafficPolicy, error) {
		p, err := trafficpolicy.Parse(doc)
		if err != nil {
			t.Fatalf("parse %s: %v", doc, err)
		}
		return NewTrafficPolicyWith(p, o)
	}
	for doc, want := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"github"}}]}]}`:                                                             "--oauth-app github=",
		`{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"github","client_id":"c","client_secret":"${vars.s}"}}]}]}`:                 "config.client_secret: CEL interpolation",
		`{"on_http_request":[{"actions":[{"type":"openid-connect","config":{"issuer_url":"https://idp.example","client_id":"c","client_secret":"s"}}]}]}`: "",
	} {
		_, err := build(doc, opts)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
		if _, err := build(doc, PolicyOptions{Outbound: http.DefaultClient}); err == nil || !strings.Contains(err.Error(), "session key") {
			t.Errorf("%s without a session key: %v", doc, err)
		}
	}
	tp, err := build(`{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"google","auth_id":"g","authz_url_params":{"hd":"example.com"}}}]}]}`, opts)
	if err != nil {
		t.Fatal(err)
	}
	reached := false
	h := tp.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "https://app.example.com/x", nil))
	if loc := rec.Header().Get("Location"); rec.Code != 302 || !strings.Contains(loc, "client_id=managed") || !strings.Contains(loc, "hd=example.com") || reached {
		t.Errorf("without a session: %d %q (reached %v)", rec.Code, loc, reached)
	}
	// Another action's logout passes this one by; its own is answered here, clearing its cookie.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "https://app.example.com/ngrok/logout?auth_id=other", nil))
	if !reached || rec.Header().Get("Set-Cookie") != "" {
		t.Errorf("another auth_id's logout: reached %v, %v", reached, rec.Header())
	}
	reached = false
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "https://app.example.com/ngrok/logout?auth_id=g", nil))
	if reached || !strings.Contains(rec.Header().Get("Set-Cookie"), "ngrok.g.session=") {
		t.Errorf("its own logout: reached %v, %v", reached, rec.Header())
	}
}
