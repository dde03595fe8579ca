package ingress

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
)

// edgeAnswer is the status, error code and body a request to path of the edge gets.
func edgeAnswer(s *Server, e *plan.HTTPSEdge, path string) (int, string, string) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "https://"+e.Hosts[0]+path, nil)
	s.proxy.serveEdge(w, r, e, nil)
	return w.Code, w.Header().Get("ngrok-error-code"), w.Body.String()
}

// TestServeEdge: a request of an HTTPS edge is routed by path to its route's backend, here an
// HTTP response backend of the edge's own account; a path no route matches is 404 (3200); a
// route whose module cannot be applied fails closed with 503 (3210) naming it; a route without
// an available backend is 503 (6515). Account B's edge, built in the same plan, answers with B's
// backend, never A's.
func TestServeEdge(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	account := func(id, host, body string) *plan.Account {
		route := func(rid, match string) *ep.HTTPSEdgeRoute {
			return &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: rid}, MatchType: ep.MatchPathPrefix, Match: match}
		}
		ok := route("edghtsrt_"+id+"_ok", "/app")
		ok.Backend = &ep.EndpointBackend{Enabled: true, Backend: ep.NewRef("bkdhr_" + id)}
		broken := route("edghtsrt_"+id+"_broken", "/broken")
		broken.UserAgentFilter = &ep.EndpointUserAgentFilter{Enabled: true, Deny: []string{"("}}
		empty := route("edghtsrt_"+id+"_empty", "/empty")
		snap := &plan.Snapshot{Account: id,
			HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_" + id}, Hostports: []string{host + ":443"}},
				Routes: []*ep.HTTPSEdgeRoute{ok, broken, empty}}},
			Backends: map[string]ep.Document{"bkdhr_" + id: &ep.HTTPResponseBackend{Meta: ep.Meta{ID: "bkdhr_" + id}, Body: body, StatusCode: 200}}}
		return plan.NewLive().Build(snap, s.EdgeHandler())
	}
	pl := plan.Merge(map[string]*plan.Account{"acct_a": account("acct_a", "a.example.test", "from A"),
		"acct_b": account("acct_b", "b.example.test", "from B")})
	for _, c := range []struct {
		host, path string
		status     int
		code, body string
	}{
		{"a.example.test", "/app/x", 200, "", "from A"},
		{"b.example.test", "/app/x", 200, "", "from B"},
		{"a.example.test", "/elsewhere", 404, "ERR_NGROK_3200", "No route of edge edghts_acct_a matches"},
		{"a.example.test", "/broken", 503, "ERR_NGROK_3210", "user_agent_filter"},
		{"b.example.test", "/empty", 503, "ERR_NGROK_6515", "edghtsrt_acct_b_empty"},
	} {
		e := pl.HTTPS(c.host)
		if e == nil {
			t.Fatalf("%s is not in the plan", c.host)
		}
		status, code, body := edgeAnswer(s, e, c.path)
		if status != c.status || code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s%s: %d %q %q; want %d %q containing %q", c.host, c.path, status, code, body, c.status, c.code, c.body)
		}
	}
	// An edge with a module the data plane does not apply refuses every path, naming it.
	e := &plan.HTTPSEdge{Edge: plan.Edge{ID: "edghts_x", Account: "acct_a", Hosts: []string{"x.example.test"}, Unenforced: "some_module"}}
	if status, code, body := edgeAnswer(s, e, "/"); status != 503 || code != "ERR_NGROK_3210" || !strings.Contains(body, "some_module") {
		t.Errorf("unenforced edge: %d %q %q", status, code, body)
	}
}
