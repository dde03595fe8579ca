package plan

import (
	"net/http"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestJWTStage: a complete jwt_validation module becomes a stage; one whose keys cannot be
// fetched (no outbound client) or that could admit no one (no key set) fails its route closed,
// naming the module and the reason.
func TestJWTStage(t *testing.T) {
	module := func(jkus ...string) *ep.EndpointJWTValidation {
		return &ep.EndpointJWTValidation{Enabled: true,
			Issuer: ep.JWTAllowList{AllowList: []ep.JWTValue{{Value: "https://idp.example.com/"}}},
			HTTP:   ep.JWTHTTP{Tokens: []ep.JWTTokenLocation{{Type: "jwt", Method: "header", Name: "Authorization", Prefix: "Bearer "}}},
			JWS: ep.JWTJWS{AllowedAlgorithms: []string{"RS256"},
				Keys: ep.JWTKeys{Sources: ep.JWTKeySources{AdditionalJKUs: jkus}}}}
	}
	route := func(m *ep.EndpointJWTValidation, env *Env) *Route {
		r := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_jwt"}, MatchType: ep.MatchPathPrefix, Match: "/"}
		r.JWTValidation = m // a field of an embedded, unexported struct
		s := &Snapshot{Account: "acct_jwt", Env: env, HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_jwt"}, Hostports: []string{"jwt.example.com:443"}},
			Routes: []*ep.HTTPSEdgeRoute{r}}}}
		return testLive.Build(s, nil).HTTPS[0].Routes[0]
	}
	env := &Env{Outbound: http.DefaultClient}
	if rt := route(module("https://idp.example.com/keys"), env); rt.Unenforced != "" || rt.Chain == nil || rt.Chain.HTTP[0].Name() != "jwt_validation" {
		t.Errorf("a complete module: %+v", rt)
	}
	for name, rt := range map[string]*Route{
		"no outbound client": route(module("https://idp.example.com/keys"), nil),
		"no key set":         route(module(), env),
	} {
		if !strings.HasPrefix(rt.Unenforced, "jwt_validation (") {
			t.Errorf("%s: Unenforced %q, want the module and the reason", name, rt.Unenforced)
		}
	}
}
