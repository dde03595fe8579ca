package plan

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestStoredModulesTheAPIWouldRefuse: a route whose stored headers module names a header the
// API refuses, or whose user agent rule does not compile (written before the rule, or outside
// the API), fails closed naming the module and the reason; valid ones build their stages in
// the module table's order.
func TestStoredModulesTheAPIWouldRefuse(t *testing.T) {
	route := func(id string, set func(*ep.HTTPSEdgeRoute)) *ep.HTTPSEdgeRoute {
		r := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: id}, MatchType: ep.MatchPathPrefix, Match: "/" + id}
		set(r)
		return r
	}
	s := &Snapshot{Account: "acct_1"}
	s.HTTPSEdges = []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_1"}, Hostports: []string{"app.example.com:443"}},
		Routes: []*ep.HTTPSEdgeRoute{
			route("addhost", func(r *ep.HTTPSEdgeRoute) {
				r.RequestHeaders = &ep.EndpointHeaders{Enabled: true, Add: map[string]string{"host": "evil.example"}}
			}),
			route("rmte", func(r *ep.HTTPSEdgeRoute) {
				r.ResponseHeaders = &ep.EndpointHeaders{Enabled: true, Remove: []string{"transfer-encoding"}}
			}),
			route("badre", func(r *ep.HTTPSEdgeRoute) {
				r.UserAgentFilter = &ep.EndpointUserAgentFilter{Enabled: true, Deny: []string{"("}}
			}),
			route("good", func(r *ep.HTTPSEdgeRoute) {
				r.RequestHeaders = &ep.EndpointHeaders{Enabled: true, Add: map[string]string{"x-a": "1"}}
				r.ResponseHeaders = &ep.EndpointHeaders{Enabled: true, Remove: []string{"server"}}
				r.Compression = &ep.EndpointToggle{Enabled: true}
				r.UserAgentFilter = &ep.EndpointUserAgentFilter{Enabled: true, Allow: []string{"^curl/"}}
			}),
		}}}
	e := Merge(map[string]*Account{"acct_1": testLive.Build(s, nil)}).HTTPS("app.example.com")
	for path, want := range map[string]string{"/addhost": `request_headers ("host" cannot be added`,
		"/rmte": `response_headers ("transfer-encoding" cannot be removed`, "/badre": `user_agent_filter (deny[0] "("`} {
		if r := e.Route(path); r == nil || !strings.HasPrefix(r.Unenforced, want) {
			t.Errorf("%s: %+v, want it refused with %s", path, r, want)
		}
	}
	good := e.Route("/good")
	if good.Unenforced != "" || good.Chain == nil {
		t.Fatalf("valid modules refused: %q", good.Unenforced)
	}
	var names []string
	for _, st := range good.Chain.HTTP {
		names = append(names, st.Name())
	}
	for _, n := range []string{"compression", "request_headers", "response_headers", "user_agent_filter"} {
		if !strings.Contains(strings.Join(names, " "), n) {
			t.Errorf("stages %v lack %s", names, n)
		}
	}
}
