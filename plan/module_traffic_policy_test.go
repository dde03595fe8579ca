package plan

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
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
	b := &builder{live: testLive, s: &Snapshot{Account: "acct_1"}}
	doc := `{"on_http_request":[{"expressions":["req.method == 'POST'"],"actions":[{"type":"deny"}]}]}`
	one, two := b.route(&ep.HTTPSEdge{}, route(doc)), b.route(&ep.HTTPSEdge{}, route(doc))
	if one.Unenforced != "" || one.Chain == nil || len(one.Chain.HTTP) != 1 || one.Chain.HTTP[0].Name() != "traffic_policy" {
		t.Fatalf("route: %+v", one)
	}
	if one.Chain.HTTP[0] != two.Chain.HTTP[0] {
		t.Error("the same document was compiled twice")
	}
	limited := b.route(&ep.HTTPSEdge{}, route(`{"on_http_request":[{"actions":[{"type":"saml"}]}]}`))
	if !strings.HasPrefix(limited.Unenforced, "traffic_policy (") || !strings.Contains(limited.Unenforced, "saml") {
		t.Errorf("an unapplied action: %q", limited.Unenforced)
	}
	// On TLS and TCP edges, on_tcp_connect is applied by the edge's connection policy; an HTTP
	// phase there fails the edge closed.
	tp := &ep.EndpointTrafficPolicy{Enabled: true, Value: `{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}`}
	http := &ep.EndpointTrafficPolicy{Enabled: true, Value: `{"on_http_request":[{"actions":[{"type":"deny"}]}]}`}
	a := testLive.Build(&Snapshot{Account: "acct_1",
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
}

// TestPolicyLimitersSurviveRebuilds: a route's rate-limit action keeps its limiter (its counts)
// across rebuilds of the plan, even once the stage cache has forgotten the stage; another route
// with the same document, or a changed limit, gets a limiter of its own. jwt-validation is built
// with the outbound client, and fails the route closed without one.
func TestPolicyLimitersSurviveRebuilds(t *testing.T) {
	doc := func(capacity int) string {
		return `{"on_http_request":[{"actions":[{"type":"rate-limit","config":{"name":"rl","algorithm":"sliding_window","capacity":` +
			strconv.Itoa(capacity) + `,"rate":"60s","bucket_key":["conn.client_ip"]}}]}]}`
	}
	snap := func(capacity int) *Snapshot {
		route := func(id string) *ep.HTTPSEdgeRoute {
			return &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: id}, MatchType: ep.MatchPathPrefix, Match: "/" + id,
				TrafficPolicy: &ep.EndpointTrafficPolicy{Enabled: true, Value: doc(capacity)}}
		}
		return &Snapshot{Account: "acct_rl", HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_rl"}, Hostports: []string{"rl.example.com:443"}},
			Routes: []*ep.HTTPSEdgeRoute{route("edghtsrt_a"), route("edghtsrt_b")}}}}
	}
	// limited reports whether the route's next request is refused (the upstream answers 200).
	limited := func(a *Account, i int) bool {
		rt := a.HTTPS[0].Routes[i]
		if rt.Unenforced != "" || rt.Chain == nil {
			t.Fatalf("route: %+v", rt)
		}
		h := rt.Chain.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "https://rl.example.com/", nil)
		r.RemoteAddr = "192.0.2.1:1000"
		h.ServeHTTP(w, r)
		return w.Code == http.StatusTooManyRequests
	}
	first := testLive.Build(snap(1), nil)
	if limited(first, 0) || !limited(first, 0) {
		t.Fatal("a capacity of 1 did not limit the second request")
	}
	clear(testLive.policies.m) // the cache forgets; the live plan keeps the limiter
	again := testLive.Build(snap(1), nil)
	if !limited(again, 0) {
		t.Error("a rebuild with the same configuration reset the limiter")
	}
	if limited(again, 1) {
		t.Error("another route with the same document shares the limiter")
	}
	if changed := testLive.Build(snap(2), nil); limited(changed, 0) {
		t.Error("a changed configuration kept the old limiter")
	}
	runtime.KeepAlive(first)

	jwt := `{"on_http_request":[{"actions":[{"type":"jwt-validation","config":{"issuer":{"allow_list":[{"value":"https://idp.example.com/"}]},
	  "http":{"tokens":[{"type":"jwt","method":"header","name":"Authorization","prefix":"Bearer "}]},
	  "jws":{"allowed_algorithms":["RS256"],"keys":{"sources":{"additional_jkus":["https://idp.example.com/jwks"]}}}}}]}]}`
	rt := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_jwt"}, MatchType: ep.MatchPathPrefix, Match: "/",
		TrafficPolicy: &ep.EndpointTrafficPolicy{Enabled: true, Value: jwt}}
	without := (&builder{live: testLive, s: &Snapshot{Account: "acct_1"}}).route(&ep.HTTPSEdge{}, rt)
	if !strings.Contains(without.Unenforced, "outbound HTTP client") {
		t.Errorf("jwt-validation without an outbound client: %q", without.Unenforced)
	}
	with := (&builder{live: testLive, s: &Snapshot{Account: "acct_1", Env: &Env{Outbound: http.DefaultClient}}}).route(&ep.HTTPSEdge{}, rt)
	if with.Unenforced != "" || with.Chain == nil {
		t.Errorf("jwt-validation with an outbound client: %q", with.Unenforced)
	}
}
