package plan

import (
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestBreakerSurvivesRebuilds: a route's breaker is the same across rebuilds of an unchanged
// configuration (its window and state survive the periodic rebuild), and a new one when the
// module's configuration changes.
func TestBreakerSurvivesRebuilds(t *testing.T) {
	snap := func(volume uint32) *Snapshot {
		return &Snapshot{Account: "acct_cb", HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_cb"}, Hostports: []string{"cb.example.com:443"}},
			Routes: []*ep.HTTPSEdgeRoute{{Meta: ep.Meta{ID: "edghtsrt_cb"}, MatchType: ep.MatchPathPrefix, Match: "/",
				CircuitBreaker: &ep.EndpointCircuitBreaker{Enabled: true, TrippedDuration: 1, RollingWindow: 10, NumBuckets: 10,
					VolumeThreshold: volume, ErrorThresholdPercentage: 0.5}}}}}}
	}
	stage := func(s *Snapshot) any {
		a := testLive.Build(s, nil)
		rt := a.HTTPS[0].Routes[0]
		if rt.Unenforced != "" || rt.Chain == nil || len(rt.Chain.HTTP) != 1 {
			t.Fatalf("route: %+v", rt)
		}
		return rt.Chain.HTTP[0]
	}
	first := stage(snap(5))
	if again := stage(snap(5)); again != first {
		t.Errorf("a rebuild with the same configuration made a new breaker")
	}
	if changed := stage(snap(6)); changed == first {
		t.Errorf("a changed configuration kept the old breaker")
	}
}
