package plan

import (
	"fmt"
	"net/http"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// benchSnapshot is an account of edges HTTPS edges of routes path_prefix routes each, every
// route to one of the account's http_response backends, as edgeplane-bench scale builds it.
func benchSnapshot(edges, routes int) *Snapshot {
	s := &Snapshot{Account: "acct_bench", Backends: map[string]ep.Document{}, CAs: map[string]*ep.CertificateAuthority{}}
	for i := range edges {
		e := &ep.HTTPSEdge{}
		e.ID, e.Hostports = fmt.Sprintf("edghts_%d", i), []string{fmt.Sprintf("e%d.many.example.net:443", i)}
		for r := range routes {
			bid := fmt.Sprintf("bkdhr_%d_%d", i, r)
			be := &ep.HTTPResponseBackend{Body: "ok", StatusCode: 200}
			be.ID = bid
			s.Backends[bid] = be
			rt := &ep.HTTPSEdgeRoute{EdgeID: e.ID, MatchType: "path_prefix", Match: fmt.Sprintf("/r%d", r),
				Backend: &ep.EndpointBackend{Enabled: true, Backend: &ep.Ref{ID: bid}}}
			rt.ID = fmt.Sprintf("edghtsrt_%d_%d", i, r)
			e.Routes = append(e.Routes, rt)
		}
		s.HTTPSEdges = append(s.HTTPSEdges, e)
	}
	return s
}

// BenchmarkBuild is an account's rebuild after a change, the part of "a change reaches traffic"
// that is edgeplane's own work once the snapshot is read: 10,000 edges of 10 routes is the scale
// benchmark's account of 100,000 routes.
func BenchmarkBuild(b *testing.B) {
	final := http.NotFoundHandler()
	for _, tc := range []struct{ edges, routes int }{{1, 10}, {1000, 10}, {10000, 10}} {
		s := benchSnapshot(tc.edges, tc.routes)
		b.Run(fmt.Sprintf("edges=%d/routes=%d", tc.edges, tc.routes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if a := testLive.Build(s, final); len(a.HTTPS) != tc.edges {
					b.Fatalf("%d edges built", len(a.HTTPS))
				}
			}
		})
	}
}
