package plan

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// TestOAuthStage: a module with its own client, or a managed one from the environment, becomes
// a sign-in stage; one naming no client when the operator registered no managed application
// answers 503 naming --oauth-app; one without the session key fails its route closed.
func TestOAuthStage(t *testing.T) {
	id, secret := "cid", "csecret"
	own := func(r *ep.HTTPSEdgeRoute) {
		r.OAuth = &ep.EndpointOAuth{Enabled: true, Provider: &ep.EndpointOAuthProvider{
			GitHub: &ep.EndpointOAuthGitHub{EndpointOAuthProviderApp: ep.EndpointOAuthProviderApp{ClientID: &id, ClientSecret: &secret},
				Organizations: []string{"acme"}}}}
	}
	managed := func(r *ep.HTTPSEdgeRoute) {
		r.OAuth = &ep.EndpointOAuth{Enabled: true, Provider: &ep.EndpointOAuthProvider{Google: &ep.EndpointOAuthProviderApp{}}}
	}
	env := &Env{Outbound: http.DefaultClient, SessionKey: make([]byte, 32)}
	if !Enforced("oauth") {
		t.Fatal("oauth is not enforced")
	}
	if rt := signInRoute(env, own); rt.Unenforced != "" || rt.Chain == nil || rt.Chain.HTTP[0].Name() != "oauth" {
		t.Fatalf("own application: %+v", rt)
	}
	// No managed application: 503 naming the flag.
	rt := signInRoute(env, managed)
	if rt.Unenforced != "" || rt.Chain == nil {
		t.Fatalf("managed, none registered: %+v", rt)
	}
	rec := httptest.NewRecorder()
	rt.Chain.Handler(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 503 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3210" || !strings.Contains(rec.Body.String(), "--oauth-app google=") {
		t.Fatalf("managed, none registered: %d %v", rec.Code, rec.Header())
	}
	// With one: a redirect to Google's (overridden) authorization endpoint.
	withApp := &Env{Outbound: http.DefaultClient, SessionKey: make([]byte, 32),
		OAuthApps:      map[string]enforce.OAuthApp{"google": {ClientID: "managed-id", ClientSecret: "s"}},
		OAuthEndpoints: map[string]enforce.OAuthEndpoints{"google": {AuthURL: "https://idp.test/auth", TokenURL: "https://idp.test/token", UserInfoURL: "https://idp.test/me"}}}
	rt = signInRoute(withApp, managed)
	rec = httptest.NewRecorder()
	rt.Chain.Handler(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "https://app.test/x", nil))
	if loc := rec.Header().Get("Location"); rec.Code != 302 || !strings.HasPrefix(loc, "https://idp.test/auth?") || !strings.Contains(loc, "client_id=managed-id") {
		t.Fatalf("managed application: %d %s", rec.Code, loc)
	}
	if rt := signInRoute(&Env{Outbound: http.DefaultClient}, own); !strings.HasPrefix(rt.Unenforced, "oauth (") {
		t.Fatalf("no session key: %q", rt.Unenforced)
	}
}

// TestSignInModuleDisabledStripsIdentity: a sign-in module turned off (enabled: false) signs no
// one in, but a client's own ngrok-auth-* headers still never reach the upstream, which trusts
// them while the module is on.
func TestSignInModuleDisabledStripsIdentity(t *testing.T) {
	env := &Env{Outbound: http.DefaultClient, SessionKey: make([]byte, 32)}
	secret := "s"
	for name, set := range map[string]func(r *ep.HTTPSEdgeRoute){
		"oauth": func(r *ep.HTTPSEdgeRoute) {
			r.OAuth = &ep.EndpointOAuth{Enabled: false, Provider: &ep.EndpointOAuthProvider{Google: &ep.EndpointOAuthProviderApp{}}}
		},
		"oidc": func(r *ep.HTTPSEdgeRoute) {
			r.OIDC = &ep.EndpointOIDC{Enabled: false, Issuer: "https://idp.test", ClientID: "c", ClientSecret: &secret}
		},
	} {
		rt := signInRoute(env, set)
		if rt.Unenforced != "" || rt.Chain == nil {
			t.Fatalf("%s disabled: %+v", name, rt)
		}
		var seen http.Header
		r := httptest.NewRequest("GET", "https://app.test/", nil)
		r.Header.Set("Ngrok-Auth-User-Email", "ceo@victim.com")
		r.Header.Set("Ngrok-Auth-User-Id", "1")
		rec := httptest.NewRecorder()
		rt.Chain.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Header.Clone() })).ServeHTTP(rec, r)
		if seen == nil {
			t.Fatalf("%s disabled: the request did not reach the upstream (%d)", name, rec.Code)
		}
		if seen.Get("Ngrok-Auth-User-Email") != "" || seen.Get("Ngrok-Auth-User-Id") != "" {
			t.Errorf("%s disabled: the client's identity headers reached the upstream: %v", name, seen)
		}
	}
}
