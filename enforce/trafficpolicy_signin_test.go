package enforce

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/oauthtest"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// TestSignInActionsBuild: a sign-in action that cannot work is refused when the stage is built,
// naming why (no managed application for the provider, a secret read from ngrok's vaults, no
// session key); one that can sends a visitor without a session to the provider with its
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
	// client_secret from ngrok's vaults, which edgeplane does not have: the stage is refused.
	if _, err := build(`{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"github","client_id":"c","client_secret":"${secrets.get('v', 's')}"}}]}]}`, opts); err == nil ||
		!strings.Contains(err.Error(), "config.client_secret: secrets.get: edgeplane has no ngrok vaults") {
		t.Errorf("client_secret from a vault: %v", err)
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

// TestSignInActionsInterpolation: client_id and client_secret interpolate CEL, rendered on each
// request from its variables (here a request header, and a variable set-vars made of another):
// a browser signs in with the application its requests render; a session of one application
// does not admit a request rendering another; a callback rendering another client_id or
// client_secret than the sign-in began with is refused 400 ERR_NGROK_5211, its code never
// exchanged; a value that does not render answers 503 ERR_NGROK_3900 naming the field.
func TestSignInActionsInterpolation(t *testing.T) {
	g := oauthtest.NewGitHub(t, oauthtest.Options{Clients: map[string]string{"app-one": "secret-one", "app-two": "secret-two"},
		User: oauthtest.User{ID: 42, Login: "octo", Email: "octo@example.com"}})
	opts := PolicyOptions{Outbound: g.Server.Client(), SignIn: &SignInOptions{SessionKey: testKey,
		OAuthEndpoints: map[string]OAuthEndpoints{"github": {g.AuthorizeURL(), g.TokenURL(), g.UserURL()}}}}
	p, err := trafficpolicy.Parse(`
on_http_request:
  - actions:
      - type: set-vars
        config: {vars: [{secret: "${getReqHeader('x-secret').join('')}"}]}
      - type: oauth
        config: {provider: github, client_id: "${req.headers['x-app'][0]}", client_secret: "${vars.secret}"}
`)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTrafficPolicyWith(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	edge := httptest.NewTLSServer(tp.Wrap(upstreamEcho()))
	t.Cleanup(edge.Close)
	one := []string{"x-app", "app-one", "x-secret", "secret-one"}
	two := []string{"x-app", "app-two", "x-secret", "secret-two"}

	b := browser(t, edge)
	resp, body := get(t, b, edge.URL+"/repo", one...)
	if resp.StatusCode != 200 || body != "upstream /repo" || resp.Header.Get("X-Got-Email") != "octo@example.com" {
		t.Fatalf("sign-in with app-one: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if asked := g.Asked(); len(asked) != 1 || !strings.HasPrefix(asked[0], "app-one ") {
		t.Errorf("authorization requests: %q", asked)
	}
	if resp, body := get(t, noFollow(b), edge.URL+"/repo", one...); resp.StatusCode != 200 || body != "upstream /repo" {
		t.Errorf("app-one's session: %d %q", resp.StatusCode, body)
	}
	// The same browser's session is app-one's: a request rendering app-two signs in anew.
	if resp, _ := get(t, noFollow(b), edge.URL+"/repo", two...); resp.StatusCode != 302 || !strings.Contains(resp.Header.Get("Location"), "client_id=app-two") {
		t.Errorf("app-one's session for a request rendering app-two: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// A callback must render the application the sign-in began with.
	for name, at := range map[string]struct {
		callback []string
		says     string
	}{
		"another client_id":     {two, "another client_id"},
		"another client_secret": {[]string{"x-app", "app-one", "x-secret", "secret-two"}, "another client_secret"},
	} {
		c := noFollow(browser(t, edge))
		resp, _ := get(t, c, edge.URL+"/", one...)
		if resp.StatusCode != 302 {
			t.Fatalf("%s: the sign-in did not begin: %d", name, resp.StatusCode)
		}
		resp, _ = get(t, c, resp.Header.Get("Location"), one...) // the provider
		callback := resp.Header.Get("Location")
		if resp.StatusCode != 302 || !strings.Contains(callback, "/ngrok/oauth2/callback") {
			t.Fatalf("%s: the provider: %d %q", name, resp.StatusCode, callback)
		}
		resp, body := get(t, c, callback, at.callback...)
		if resp.StatusCode != 400 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" || !strings.Contains(body, at.says) {
			t.Errorf("%s at the callback: %d %q %q", name, resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
		}
	}

	// Values that do not render.
	for name, c := range map[string]struct {
		hdr   []string
		field string
	}{
		"no client_id":      {[]string{"x-secret", "secret-one"}, "client_id"},
		"an empty one":      {[]string{"x-app", "", "x-secret", "secret-one"}, "client_id"},
		"no client_secret":  {[]string{"x-app", "app-one"}, "client_secret"},
		"a client_id 5 KiB": {[]string{"x-app", strings.Repeat("a", 5000), "x-secret", "secret-one"}, "client_id"},
	} {
		resp, body := get(t, noFollow(browser(t, edge)), edge.URL+"/", c.hdr...)
		if resp.StatusCode != 503 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3900" || !strings.Contains(body, "action oauth field "+c.field+" (on_http_request[0].actions[1])") {
			t.Errorf("%s: %d %q %q", name, resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
		}
	}
}

// TestSignInAppsBounded: an action keeps a stage for at most maxSignInApps applications, the
// oldest dropped first, and makes one again when a request renders it.
func TestSignInAppsBounded(t *testing.T) {
	tpl, err := trafficpolicy.CompileTemplate(trafficpolicy.OnHTTPRequest, "${req.headers['x-app'][0]}")
	if err != nil {
		t.Fatal(err)
	}
	built := 0
	apps := &appTemplates{id: tpl, literal: OAuthApp{ClientSecret: "s"}, action: "openid-connect", path: "on_http_request[0].actions[0]", stages: map[string]Stage{},
		build: func(app OAuthApp) (Stage, error) {
			built++
			return NewOIDC(OIDCConfig{Issuer: "https://idp.example", ClientID: app.ClientID, ClientSecret: app.ClientSecret,
				Session: SessionConfig{Key: testKey}})
		}}
	render := func(id string) Stage {
		r := httptest.NewRequest("GET", "https://app.example.com/", nil)
		r.Header.Set("x-app", id)
		return apps.stage(httptest.NewRecorder(), r, trafficpolicy.RequestVars(trafficpolicy.ConnVars("192.0.2.1:1", ""), r, "https"))
	}
	first := render("app-0")
	for i := range 2 * maxSignInApps {
		render(fmt.Sprintf("app-%d", i))
	}
	if len(apps.stages) != maxSignInApps || len(apps.order) != maxSignInApps || built != 2*maxSignInApps {
		t.Errorf("%d stages kept (%d in order), %d built", len(apps.stages), len(apps.order), built)
	}
	if again := render("app-0"); again == nil || again == first || built != 2*maxSignInApps+1 {
		t.Errorf("the dropped application was not made again: built %d", built)
	}
}

// TestSignInActionsInterpolationOIDC: openid-connect signs in with the client its request
// renders: the provider's authorization, token exchange and ID token audience are all that
// client's; a request rendering another client is sent to the provider under that one.
func TestSignInActionsInterpolationOIDC(t *testing.T) {
	p := newTestOIDC(t)
	doc, err := trafficpolicy.Parse(`{"on_http_request":[{"actions":[{"type":"openid-connect","config":{"issuer_url":"` + p.srv.URL + `",
		"client_id":"${getReqHeader('x-tenant').join('') == 'one' ? 'client-1' : 'client-other'}","client_secret":"${'secret-' + '1'}"}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTrafficPolicyWith(doc, PolicyOptions{Outbound: p.srv.Client(), SignIn: &SignInOptions{SessionKey: testKey}})
	if err != nil {
		t.Fatal(err)
	}
	edge := httptest.NewTLSServer(tp.Wrap(upstreamEcho()))
	t.Cleanup(edge.Close)
	b := browser(t, edge)
	resp, body := get(t, b, edge.URL+"/page", "x-tenant", "one")
	if resp.StatusCode != 200 || body != "upstream /page" || resp.Header.Get("X-Got-Email") != "alice@example.com" {
		t.Fatalf("sign-in as client-1: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, _ = get(t, noFollow(b), edge.URL+"/page", "x-tenant", "two")
	if resp.StatusCode != 302 || !strings.Contains(resp.Header.Get("Location"), "client_id=client-other") {
		t.Errorf("a request rendering another client: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}
