package plan

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestTrafficPolicyStage: a route's policy becomes a stage, built once per document (a rebuild
// of the plan reuses it); one with an action edgeplane does not apply fails the route closed
// naming the module and the action.
func TestTrafficPolicyStage(t *testing.T) {
	route := func(doc string) *ep.HTTPSEdgeRoute {
		return &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_1"}, MatchType: ep.MatchPathPrefix, Match: "/",
			TrafficPolicy: &ep.EndpointTrafficPolicy{Enabled: true, Value: doc}}
	}
	b := &builder{s: &Snapshot{Account: "acct_1"}}
	doc := `{"on_http_request":[{"expressions":["req.method == 'POST'"],"actions":[{"type":"deny"}]}]}`
	one, two := b.route(route(doc)), b.route(route(doc))
	if one.Unenforced != "" || one.Chain == nil || len(one.Chain.HTTP) != 1 || one.Chain.HTTP[0].Name() != "traffic_policy" {
		t.Fatalf("route: %+v", one)
	}
	if one.Chain.HTTP[0] != two.Chain.HTTP[0] {
		t.Error("the same document was compiled twice")
	}
	limited := b.route(route(`{"on_http_request":[{"actions":[{"type":"rate-limit"}]}]}`))
	if !strings.HasPrefix(limited.Unenforced, "traffic_policy (") || !strings.Contains(limited.Unenforced, "rate-limit") {
		t.Errorf("an unapplied action: %q", limited.Unenforced)
	}
	// On TLS and TCP edges, on_tcp_connect is applied by the edge's connection policy; an HTTP
	// phase there fails the edge closed.
	tp := &ep.EndpointTrafficPolicy{Enabled: true, Value: `{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}`}
	http := &ep.EndpointTrafficPolicy{Enabled: true, Value: `{"on_http_request":[{"actions":[{"type":"deny"}]}]}`}
	a := Build(&Snapshot{Account: "acct_1",
		TLSEdges: []*ep.TLSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_1"}}, TrafficPolicy: tp}},
		TCPEdges: []*ep.TCPEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtcp_1"}}, TrafficPolicy: tp}, {Edge: ep.Edge{Meta: ep.Meta{ID: "edgtcp_2"}}, TrafficPolicy: http}},
	}, nil)
	for _, e := range []Edge{a.TLS[0].Edge, a.TCP[0].Edge} {
		if e.Unenforced != "" || e.Policy == nil {
			t.Errorf("%s: %q %v", e.ID, e.Unenforced, e.Policy)
		}
	}
	if e := a.TCP[1].Edge; !strings.Contains(e.Unenforced, "traffic_policy (on_http_request does not apply") {
		t.Errorf("an HTTP phase on a TCP edge: %q", e.Unenforced)
	}
	if a.TLS[0].Policy != a.TCP[0].Policy {
		t.Error("the same edge document was compiled twice")
	}
	// The cache forgets past its byte bound rather than grow.
	c := &policyCache{m: map[policyKey]policyBuilt{}}
	big := `{"on_tcp_connect":[]}` + strings.Repeat(" ", maxCachedPolicyBytes/2)
	c.get(true, big)
	c.get(true, big+" ")
	c.get(true, big+"  ")
	if len(c.m) != 1 || c.bytes > maxCachedPolicyBytes {
		t.Errorf("the cache holds %d documents, %d bytes", len(c.m), c.bytes)
	}
}
