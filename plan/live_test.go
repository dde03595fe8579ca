package plan

import (
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// testLive is the live state the package's tests build their plans with.
var testLive = NewLive()

// TestLiveStateIsTheInstances: a route's breaker lives as long as the live state that built it:
// a rebuild with the same state gets it back, another data plane's state (a second Live) has
// its own, so two planners in one process never share a breaker.
func TestLiveStateIsTheInstances(t *testing.T) {
	cb := &ep.EndpointCircuitBreaker{Enabled: true, ErrorThresholdPercentage: 0.5, TrippedDuration: 10,
		RollingWindow: 10, NumBuckets: 10, VolumeThreshold: 20}
	snap := func() *Snapshot {
		return &Snapshot{Account: "acct_1", HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_1"}},
			Routes: []*ep.HTTPSEdgeRoute{{Meta: ep.Meta{ID: "edghtsrt_1"}, MatchType: ep.MatchPathPrefix, Match: "/", CircuitBreaker: cb}}}}}
	}
	stageOf := func(a *Account) any {
		r := a.HTTPS[0].Routes[0]
		if r.Unenforced != "" || r.Chain == nil || len(r.Chain.HTTP) != 1 {
			t.Fatalf("route: %+v", r)
		}
		return r.Chain.HTTP[0]
	}
	one, two := NewLive(), NewLive()
	first := one.Build(snap(), nil)
	if stageOf(one.Build(snap(), nil)) != stageOf(first) {
		t.Error("a rebuild with the same live state made a new breaker")
	}
	if stageOf(two.Build(snap(), nil)) == stageOf(first) {
		t.Error("two live states share a breaker")
	}
}
