package plan

import (
	"crypto/tls"
	"reflect"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestEveryModuleFailsClosedOrIsEnforced walks the module table: a module enabled on an edge or
// route is either applied (Enforced) or refuses the traffic naming it; a disabled one does
// neither. A module added to the table without a decision here fails this test.
func TestEveryModuleFailsClosedOrIsEnforced(t *testing.T) {
	docs := map[*ep.Resource]func() ep.Document{
		ep.HTTPSEdges:      func() ep.Document { return &ep.HTTPSEdge{} },
		ep.TLSEdges:        func() ep.Document { return &ep.TLSEdge{} },
		ep.TCPEdges:        func() ep.Document { return &ep.TCPEdge{} },
		ep.HTTPSEdgeRoutes: func() ep.Document { return &ep.HTTPSEdgeRoute{} },
	}
	seen := 0
	for _, m := range ep.Modules {
		newDoc, ok := docs[m.Parent]
		if !ok || m.Response == nil {
			continue // modules of other collections (a reserved domain's certificate) carry no traffic
		}
		seen++
		for _, on := range []bool{true, false} {
			doc := newDoc()
			v := reflect.New(m.Response)
			if f := v.Elem().FieldByName("Enabled"); f.IsValid() && f.Kind() == reflect.Bool {
				f.SetBool(on)
			} else if !on {
				continue // a module without an enabled switch is always on
			}
			m.Set(doc, v.Interface())
			got := unenforced(m.Parent, doc)
			switch {
			case !on && got != "":
				t.Errorf("%s/%s disabled is refused (%q)", m.Parent.Kind, m.Name, got)
			case on && EnforcedOn(m.Parent, m.Name) && got != "":
				t.Errorf("%s/%s is enforced but refused (%q)", m.Parent.Kind, m.Name, got)
			case on && !EnforcedOn(m.Parent, m.Name) && got != m.Name:
				t.Errorf("%s/%s is not enforced and not refused (%q)", m.Parent.Kind, m.Name, got)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("walked only %d modules", seen)
	}
}

// TestRoutePrecedence: exact paths beat prefixes, and the longest prefix wins.
func TestRoutePrecedence(t *testing.T) {
	e := &HTTPSEdge{Routes: []*Route{
		{ID: "root", Match: "/"}, {ID: "api", Match: "/api"}, {ID: "v2", Match: "/api/v2"}, {ID: "ping", Exact: true, Match: "/api/v2/ping"},
	}}
	sortRoutes(e.Routes)
	for path, want := range map[string]string{"/": "root", "/x": "root", "/api": "api", "/apix": "api", "/api/v2/": "v2",
		"/api/v2/ping": "ping", "/api/v2/ping/": "v2"} {
		if r := e.Route(path); r == nil || r.ID != want {
			t.Errorf("%s routed to %+v, want %s", path, r, want)
		}
	}
	if r := (&HTTPSEdge{Routes: []*Route{{ID: "a", Match: "/a"}}}).Route("/b"); r != nil {
		t.Errorf("an unmatched path routed to %s", r.ID)
	}
}

// TestBuild resolves hosts, wildcards, TLS policies and nested backends, and finds edges by host.
func TestBuild(t *testing.T) {
	v13 := "1.3"
	s := &Snapshot{Account: "acct_1", Backends: map[string]ep.Document{
		"bkdtg_1": &ep.TunnelGroupBackend{Meta: ep.Meta{ID: "bkdtg_1"}, Labels: map[string]string{"edge": "x"}},
		"bkdfo_1": &ep.FailoverBackend{Meta: ep.Meta{ID: "bkdfo_1"}, Backends: []string{"bkdtg_1", "bkdhr_gone"}},
		"bkdwd_1": &ep.WeightedBackend{Meta: ep.Meta{ID: "bkdwd_1"}, Backends: map[string]int64{"bkdfo_1": 2, "bkdtg_1": 0}},
	}}
	s.HTTPSEdges = []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_1"}, Hostports: []string{"*.Example.com:443"}},
		TLSTermination: &ep.EndpointTLSTermination{Enabled: true, TerminateAt: "edge", MinVersion: &v13},
		Routes: []*ep.HTTPSEdgeRoute{{Meta: ep.Meta{ID: "edghtsrt_1"}, MatchType: ep.MatchPathPrefix, Match: "/",
			Backend: &ep.EndpointBackend{Enabled: true, Backend: ep.NewRef("bkdwd_1")}}}}}
	s.TCPEdges = []*ep.TCPEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtcp_1"}, Hostports: []string{"1.tcp.example.com:12345"}}}}
	p := Merge(map[string]*Account{"acct_1": testLive.Build(s, nil)})
	e := p.HTTPS("app.example.com")
	if e == nil || e.ID != "edghts_1" || e.TLS.MinVersion != tls.VersionTLS13 || p.HTTPS("example.com") != nil ||
		p.HTTPS("a.b.example.com") != e || p.HTTPS("example.org") != nil {
		t.Fatalf("wildcard edge: %+v", e)
	}
	b := e.Route("/x").Backend
	if b.Kind != Weighted || len(b.Children) != 2 || b.Children[0].Kind != Failover || b.Weights[0] != 2 ||
		!b.Children[0].Children[1].Missing || b.Children[0].Children[0].Labels["edge"] != "x" {
		t.Errorf("backend tree: %+v", b)
	}
	if p.TCP("1.tcp.example.com:12345") == nil || len(p.TCPAddrs()) != 1 {
		t.Errorf("TCP edge by address: %v", p.TCPAddrs())
	}
	if (*Plan)(nil).HTTPS("x") != nil {
		t.Errorf("a nil plan serves something")
	}
}
