package enforce

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// testGitHubUser is who is signed in at the GitHub-shaped provider.
type testGitHubUser struct {
	ID            int
	Login, Email  string
	Orgs          []string
	Teams         []string // "org/team"
	UnverifiedPri bool
}

// testGitHub is a GitHub-shaped OAuth provider served by the test (the GitHub Enterprise layout:
// /login/oauth/… and /api/v3/…), reached through the endpoint override.
type testGitHub struct {
	srv *httptest.Server

	mu     sync.Mutex
	user   testGitHubUser
	codes  map[string]string // code -> PKCE challenge
	tokens map[string]testGitHubUser
	calls  int
}

func newTestGitHub(t *testing.T) *testGitHub {
	g := &testGitHub{codes: map[string]string{}, tokens: map[string]testGitHubUser{},
		user: testGitHubUser{ID: 42, Login: "octo", Email: "octo@example.com", Orgs: []string{"acme"}, Teams: []string{"acme/ops"}}}
	mux := http.NewServeMux()
	mux.HandleFunc("/login/oauth/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != "gh-client" || q.Get("code_challenge_method") != "S256" {
			http.Error(w, "bad request", 400)
			return
		}
		code := RandomToken()
		g.mu.Lock()
		g.codes[code] = q.Get("code_challenge")
		g.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("/login/oauth/access_token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		ch, ok := g.codes[r.PostForm.Get("code")]
		delete(g.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		w.Header().Set("Content-Type", "application/x-www-form-urlencoded")
		if id != "gh-client" || secret != "gh-secret" || !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != ch {
			_, _ = w.Write([]byte("error=bad_verification_code"))
			return
		}
		tok := RandomToken()
		g.tokens[tok] = g.user
		_, _ = w.Write([]byte("access_token=" + tok + "&token_type=bearer&scope=read%3Auser"))
	})
	api := func(path string, f func(u testGitHubUser) any) {
		mux.HandleFunc("/api/v3"+path, func(w http.ResponseWriter, r *http.Request) {
			g.mu.Lock()
			g.calls++
			u, ok := g.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
			g.mu.Unlock()
			if !ok {
				http.Error(w, `{"message":"Bad credentials"}`, 401)
				return
			}
			_ = json.NewEncoder(w).Encode(f(u))
		})
	}
	api("/user", func(u testGitHubUser) any {
		return map[string]any{"id": u.ID, "login": u.Login, "name": nil, "email": nil}
	})
	api("/user/emails", func(u testGitHubUser) any {
		return []map[string]any{{"email": "other@elsewhere.com", "primary": false, "verified": true},
			{"email": u.Email, "primary": true, "verified": !u.UnverifiedPri}}
	})
	api("/user/orgs", func(u testGitHubUser) any {
		var out []map[string]any
		for _, o := range u.Orgs {
			out = append(out, map[string]any{"login": o})
		}
		return out
	})
	api("/user/teams", func(u testGitHubUser) any {
		var out []map[string]any
		for _, t := range u.Teams {
			org, slug, _ := strings.Cut(t, "/")
			out = append(out, map[string]any{"slug": slug, "organization": map[string]any{"login": org}})
		}
		return out
	})
	g.srv = httptest.NewTLSServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *testGitHub) setUser(u testGitHubUser) { g.mu.Lock(); g.user = u; g.mu.Unlock() }

func (g *testGitHub) revokeAll() { g.mu.Lock(); g.tokens = map[string]testGitHubUser{}; g.mu.Unlock() }

func githubEdge(t *testing.T, g *testGitHub, clock *testClock, mut func(*OAuthConfig)) *httptest.Server {
	t.Helper()
	cfg := OAuthConfig{Provider: "github", App: OAuthApp{"gh-client", "gh-secret"}, Client: g.srv.Client(),
		Endpoints: &OAuthEndpoints{g.srv.URL + "/login/oauth/authorize", g.srv.URL + "/login/oauth/access_token", g.srv.URL + "/api/v3/user"},
		Session:   SessionConfig{Key: testKey, CookiePrefix: "gh.", Now: clock.Now}}
	if mut != nil {
		mut(&cfg)
	}
	st, err := NewOAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	edge := httptest.NewTLSServer(st.Wrap(upstreamEcho()))
	t.Cleanup(edge.Close)
	return edge
}

func TestOAuthGitHubSignIn(t *testing.T) {
	g := newTestGitHub(t)
	clock := newTestClock()
	edge := githubEdge(t, g, clock, nil)
	b := browser(t, edge)
	resp, body := get(t, b, edge.URL+"/repo?tab=1", "ngrok-auth-user-email", "spoof@example.com", "ngrok-auth-user-name", "x")
	if resp.StatusCode != 200 || body != "upstream /repo?tab=1" {
		t.Fatalf("sign-in: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Got-Email") != "octo@example.com" || resp.Header.Get("X-Got-Id") != "42" || resp.Header.Get("X-Got-Name") != "octo" {
		t.Fatalf("identity headers %v", resp.Header)
	}
	// Logout, then the next request signs in again.
	if resp, _ := get(t, b, edge.URL+"/ngrok/logout"); resp.StatusCode != 200 {
		t.Fatalf("logout %d", resp.StatusCode)
	}
	noFollow := &http.Client{Jar: b.Jar, Transport: b.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _ = get(t, noFollow, edge.URL+"/")
	if resp.StatusCode != 302 || !strings.HasPrefix(resp.Header.Get("Location"), g.srv.URL+"/login/oauth/authorize?") {
		t.Fatalf("after logout: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if q, _ := url.ParseQuery(strings.SplitN(resp.Header.Get("Location"), "?", 2)[1]); q.Get("scope") != "read:user user:email" ||
		q.Get("redirect_uri") != edge.URL+"/ngrok/oauth2/callback" {
		t.Fatalf("authorize query %v", q)
	}
}

func TestOAuthGitHubAuthorization(t *testing.T) {
	g := newTestGitHub(t)
	clock := newTestClock()
	orgs := githubEdge(t, g, clock, func(c *OAuthConfig) { c.Organizations = []string{"Acme"} })
	teams := githubEdge(t, g, clock, func(c *OAuthConfig) { c.Teams = []string{"acme/ops"} })
	emails := githubEdge(t, g, clock, func(c *OAuthConfig) {
		c.EmailAddresses = []string{"boss@corp.com"}
		c.EmailDomains = []string{"example.com"}
	})
	try := func(edge *httptest.Server, u testGitHubUser) *http.Response {
		g.setUser(u)
		resp, _ := get(t, browser(t, edge), edge.URL+"/")
		return resp
	}
	octo := testGitHubUser{ID: 1, Login: "octo", Email: "octo@example.com", Orgs: []string{"acme"}, Teams: []string{"acme/ops"}}
	for name, edge := range map[string]*httptest.Server{"orgs": orgs, "teams": teams, "emails": emails} {
		if resp := try(edge, octo); resp.StatusCode != 200 {
			t.Errorf("%s: allowed user refused: %d", name, resp.StatusCode)
		}
	}
	wantCode(t, try(orgs, testGitHubUser{ID: 2, Login: "x", Email: "x@example.com", Orgs: []string{"other"}}), 403, "ERR_NGROK_3129")
	wantCode(t, try(teams, testGitHubUser{ID: 3, Login: "y", Email: "y@example.com", Orgs: []string{"acme"}, Teams: []string{"acme/dev", "other/ops"}}), 403, "ERR_NGROK_3129")
	wantCode(t, try(emails, testGitHubUser{ID: 4, Login: "z", Email: "z@evil.com"}), 403, "ERR_NGROK_3129")
	wantCode(t, try(emails, testGitHubUser{ID: 5, Login: "w", Email: "w@example.com", UnverifiedPri: true}), 403, "ERR_NGROK_3129")
	if resp := try(emails, testGitHubUser{ID: 6, Login: "boss", Email: "boss@corp.com"}); resp.StatusCode != 200 {
		t.Errorf("listed address refused: %d", resp.StatusCode)
	}
}

func TestOAuthRecheck(t *testing.T) {
	g := newTestGitHub(t)
	clock := newTestClock()
	edge := githubEdge(t, g, clock, func(c *OAuthConfig) {
		c.Organizations = []string{"acme"}
		c.CheckInterval = time.Minute
	})
	b := browser(t, edge)
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 {
		t.Fatalf("sign-in %d", resp.StatusCode)
	}
	// The user leaves the organization: within the interval nothing is asked; after it, the
	// re-check sees it and refuses.
	g.mu.Lock()
	for k, u := range g.tokens {
		u.Orgs = nil
		g.tokens[k] = u
	}
	calls := g.calls
	g.mu.Unlock()
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 || g.calls != calls {
		t.Fatalf("within the interval: %d, %d calls", resp.StatusCode, g.calls-calls)
	}
	clock.Add(2 * time.Minute)
	resp, _ := get(t, b, edge.URL+"/")
	wantCode(t, resp, 403, "ERR_NGROK_3129")
	// A revoked token ends the session: the browser signs in again.
	g.revokeAll()
	clock.Add(2 * time.Minute)
	g.setUser(testGitHubUser{ID: 9, Login: "new", Email: "new@example.com", Orgs: []string{"acme"}})
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 || resp.Header.Get("X-Got-Id") != "9" {
		t.Fatalf("after revocation: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestOAuthErrors(t *testing.T) {
	g := newTestGitHub(t)
	clock := newTestClock()
	bad := githubEdge(t, g, clock, func(c *OAuthConfig) { c.App.ClientSecret = "wrong" })
	resp, _ := get(t, browser(t, bad), bad.URL+"/")
	wantCode(t, resp, 502, "ERR_NGROK_5211")
	// The managed application is missing.
	rec := httptest.NewRecorder()
	OAuthUnavailable("google").Wrap(upstreamEcho()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 503 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3210" || !strings.Contains(rec.Body.String(), "--oauth-app google=") {
		t.Fatalf("unavailable: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	for _, c := range []OAuthConfig{
		{Provider: "myspace", App: OAuthApp{"a", "b"}, Session: SessionConfig{Key: testKey}},
		{Provider: "github", Session: SessionConfig{Key: testKey}},
		{Provider: "github", App: OAuthApp{"a", "b"}, Endpoints: &OAuthEndpoints{"http://x/a", "https://x/t", "https://x/u"}, Session: SessionConfig{Key: testKey}},
		{Provider: "github", App: OAuthApp{"a", "b"}},
	} {
		if _, err := NewOAuth(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	for name := range oauthProviders {
		if _, err := NewOAuth(OAuthConfig{Provider: name, App: OAuthApp{"a", "b"}, Session: SessionConfig{Key: testKey}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A provider answer larger than the bound is refused, not read whole.
	huge := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"` + strings.Repeat("a", 2<<20) + `"}`))
	}))
	defer huge.Close()
	hb := githubEdge(t, g, clock, func(c *OAuthConfig) { c.Endpoints.TokenURL = huge.URL + "/token"; c.Client = huge.Client() })
	resp, _ = get(t, browser(t, hb), hb.URL+"/")
	wantCode(t, resp, 502, "ERR_NGROK_5211")
}

// TestOAuthMicrosoftMailNotTrusted: Microsoft Graph's mail is set by the user's tenant and never
// verified, so it must not pass email_domains; the user principal name (in a domain the tenant
// verified) is the email.
func TestOAuthMicrosoftMailNotTrusted(t *testing.T) {
	var me string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(me))
	}))
	defer srv.Close()
	st, err := NewOAuth(OAuthConfig{Provider: "microsoft", App: OAuthApp{"cid", "cs"}, EmailDomains: []string{"victim.com"},
		Endpoints: &OAuthEndpoints{srv.URL + "/auth", srv.URL + "/token", srv.URL + "/me"}, Client: srv.Client(), Session: SessionConfig{Key: testKey}})
	if err != nil {
		t.Fatal(err)
	}
	b := st.(*signIn).b.(*oauthBackend)
	for _, c := range []struct {
		me, email string
	}{
		{`{"id":"1","displayName":"Eve","mail":"ceo@victim.com","userPrincipalName":"eve@attacker.onmicrosoft.com"}`, "eve@attacker.onmicrosoft.com"},
		{`{"id":"2","mail":"ceo@victim.com","userPrincipalName":"ceo_victim.com#EXT#@attacker.onmicrosoft.com"}`, ""},
		{`{"id":"3","mail":"other@elsewhere.org","userPrincipalName":"ann@victim.com"}`, "ann@victim.com"},
	} {
		me = c.me
		id, err := b.user(context.Background(), "tok")
		if err != nil {
			t.Fatal(err)
		}
		if id.Email != c.email {
			t.Errorf("%s: email %q, want %q", c.me, id.Email, c.email)
		}
		if want := c.email == "ann@victim.com"; b.allowed(id) != want {
			t.Errorf("%s: allowed %v", c.me, !want)
		}
	}
}
