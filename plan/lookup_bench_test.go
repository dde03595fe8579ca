package plan

import (
	"fmt"
	"testing"
)

// benchPlan is a plan of one account with edges HTTPS edges (edge<i>.example.com, plus a
// wildcard *.wild.example.com) of routes routes each: one exact path and prefixes of growing
// length, the root prefix last, as a route table of a real application might have.
func benchPlan(edges, routes int) *Plan {
	a := &Account{ID: "acct_bench"}
	for i := range edges {
		e := &HTTPSEdge{Edge: Edge{ID: fmt.Sprintf("edghts_%d", i), Hosts: []string{fmt.Sprintf("edge%d.example.com", i)}}}
		if i == 0 {
			e.Hosts = append(e.Hosts, "*.wild.example.com")
		}
		for r := range routes {
			rt := &Route{ID: fmt.Sprintf("edghtsrt_%d_%d", i, r), Match: fmt.Sprintf("/api/v%d/items", r)}
			switch r {
			case 0:
				rt.Match = "/"
			case 1:
				rt.Exact, rt.Match = true, "/healthz"
			}
			e.Routes = append(e.Routes, rt)
		}
		sortRoutes(e.Routes)
		a.HTTPS = append(a.HTTPS, e)
	}
	return Merge(map[string]*Account{a.ID: a})
}

// BenchmarkRouteLookup is the lookup of every public HTTPS request: the edge by host
// (Plan.HTTPS), then the route by path (HTTPSEdge.Route). The path matches only the root prefix,
// the worst case of the route scan; "wildcard" finds the edge through its wildcard hostport.
func BenchmarkRouteLookup(b *testing.B) {
	for _, tc := range []struct{ edges, routes int }{{1, 1}, {1, 10}, {1, 100}, {1, 1000}, {10000, 10}} {
		p := benchPlan(tc.edges, tc.routes)
		host := fmt.Sprintf("edge%d.example.com", tc.edges-1)
		for _, h := range []struct{ name, host string }{{"exact", host}, {"wildcard", "app.wild.example.com"}} {
			b.Run(fmt.Sprintf("edges=%d/routes=%d/%s", tc.edges, tc.routes, h.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					e := p.HTTPS(h.host)
					if e == nil {
						b.Fatal("no edge")
					}
					if r := e.Route("/static/app.js"); r == nil || r.Match != "/" {
						b.Fatal("not the root route")
					}
				}
			})
		}
	}
}
