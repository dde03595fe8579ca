package plan

import (
	"net/http"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// signInRoute builds a one-route plan with the route's sign-in module set by set.
func signInRoute(env *Env, set func(r *ep.HTTPSEdgeRoute)) *Route {
	r := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_id"}, MatchType: ep.MatchPathPrefix, Match: "/"}
	set(r)
	s := &Snapshot{Account: "acct_id", Env: env, HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_id"},
		Hostports: []string{"id.example.com:443"}}, Routes: []*ep.HTTPSEdgeRoute{r}}}}
	return testLive.Build(s, nil).HTTPS[0].Routes[0]
}

// TestOIDCStage: a complete oidc module becomes a stage; without the session key, or with an
// issuer that is not https, the route fails closed naming the module and the reason.
func TestOIDCStage(t *testing.T) {
	module := func(issuer string) func(r *ep.HTTPSEdgeRoute) {
		return func(r *ep.HTTPSEdgeRoute) {
			secret := "s"
			r.OIDC = &ep.EndpointOIDC{Enabled: true, Issuer: issuer, ClientID: "c", ClientSecret: &secret}
			r.OIDC.CookiePrefix = "ngrok."
		}
	}
	env := &Env{Outbound: http.DefaultClient, SessionKey: make([]byte, 32)}
	if !Enforced("oidc") {
		t.Fatal("oidc is not enforced")
	}
	if rt := signInRoute(env, module("https://idp.example.com")); rt.Unenforced != "" || rt.Chain == nil || rt.Chain.HTTP[0].Name() != "oidc" {
		t.Errorf("a complete module: %+v", rt)
	}
	for name, rt := range map[string]*Route{
		"no session key": signInRoute(&Env{Outbound: http.DefaultClient}, module("https://idp.example.com")),
		"no env":         signInRoute(nil, module("https://idp.example.com")),
		"http issuer":    signInRoute(env, module("http://idp.example.com")),
	} {
		if !strings.HasPrefix(rt.Unenforced, "oidc (") {
			t.Errorf("%s: Unenforced %q, want the module and the reason", name, rt.Unenforced)
		}
	}
}
