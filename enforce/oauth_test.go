package enforce

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/oauthtest"
)

// newTestGitHub starts a GitHub-shaped provider knowing the gh-client application, with octo
// signed in; its token endpoint answers form-encoded.
func newTestGitHub(t *testing.T) *oauthtest.GitHub {
	return oauthtest.NewGitHub(t, oauthtest.Options{Clients: map[string]string{"gh-client": "gh-secret"}, FormEncoded: true,
		User: oauthtest.User{ID: 42, Login: "octo", Email: "octo@example.com", Orgs: []string{"acme"}, Teams: []string{"acme/ops"}}})
}

func githubEdge(t *testing.T, g *oauthtest.GitHub, clock *testClock, mut func(*OAuthConfig)) *httptest.Server {
	t.Helper()
	return signInEdge(t, OAuthConfig{Provider: "github", App: OAuthApp{"gh-client", "gh-secret"}, Client: g.Server.Client(),
		Endpoints: &OAuthEndpoints{g.AuthorizeURL(), g.TokenURL(), g.UserURL()},
		Session:   SessionConfig{Key: testKey, CookiePrefix: "gh.", Now: clock.Now}}, mut, NewOAuth)
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
	resp, _ = get(t, noFollow(b), edge.URL+"/")
	if resp.StatusCode != 302 || !strings.HasPrefix(resp.Header.Get("Location"), g.AuthorizeURL()+"?") {
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
	try := func(edge *httptest.Server, u oauthtest.User) *http.Response {
		g.SetUser(u)
		resp, _ := get(t, browser(t, edge), edge.URL+"/")
		return resp
	}
	octo := oauthtest.User{ID: 1, Login: "octo", Email: "octo@example.com", Orgs: []string{"acme"}, Teams: []string{"acme/ops"}}
	for name, edge := range map[string]*httptest.Server{"orgs": orgs, "teams": teams, "emails": emails} {
		if resp := try(edge, octo); resp.StatusCode != 200 {
			t.Errorf("%s: allowed user refused: %d", name, resp.StatusCode)
		}
	}
	wantCode(t, try(orgs, oauthtest.User{ID: 2, Login: "x", Email: "x@example.com", Orgs: []string{"other"}}), 403, "ERR_NGROK_3129")
	wantCode(t, try(teams, oauthtest.User{ID: 3, Login: "y", Email: "y@example.com", Orgs: []string{"acme"}, Teams: []string{"acme/dev", "other/ops"}}), 403, "ERR_NGROK_3129")
	wantCode(t, try(emails, oauthtest.User{ID: 4, Login: "z", Email: "z@evil.com"}), 403, "ERR_NGROK_3129")
	wantCode(t, try(emails, oauthtest.User{ID: 5, Login: "w", Email: "w@example.com", UnverifiedPrimary: true}), 403, "ERR_NGROK_3129")
	if resp := try(emails, oauthtest.User{ID: 6, Login: "boss", Email: "boss@corp.com"}); resp.StatusCode != 200 {
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
	g.ChangeSignedIn(func(u *oauthtest.User) { u.Orgs = nil })
	calls := g.Calls()
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 || g.Calls() != calls {
		t.Fatalf("within the interval: %d, %d calls", resp.StatusCode, g.Calls()-calls)
	}
	clock.Add(2 * time.Minute)
	resp, _ := get(t, b, edge.URL+"/")
	wantCode(t, resp, 403, "ERR_NGROK_3129")
	// A revoked token ends the session: the browser signs in again.
	g.RevokeAll()
	clock.Add(2 * time.Minute)
	g.SetUser(oauthtest.User{ID: 9, Login: "new", Email: "new@example.com", Orgs: []string{"acme"}})
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
