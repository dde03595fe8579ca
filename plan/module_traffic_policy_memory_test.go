package plan

import (
	"runtime"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/memtest"
)

// TestPolicyCacheKeepsOnlyLiveStages: an account replacing a TLS edge's traffic policy again
// and again leaves nothing behind once its plan no longer uses the old documents' stages (the
// cache used to keep every stage until it held 32 MiB of documents: some 600 MiB of compiled
// stages), while a stage a plan holds is still shared by the next build.
func TestPolicyCacheKeepsOnlyLiveStages(t *testing.T) {
	const replaced = 20
	edge := func(doc string) *Snapshot {
		return &Snapshot{Account: "acct_churn", TLSEdges: []*ep.TLSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_churn"}},
			TrafficPolicy: &ep.EndpointTrafficPolicy{Enabled: true, Value: doc}}}}
	}
	live := testLive.Build(edge(memtest.DenseConnPolicy(0, ep.MaxTrafficPolicyBytes)), nil)
	if live.TLS[0].Unenforced != "" || live.TLS[0].Policy == nil {
		t.Fatalf("edge: %+v", live.TLS[0])
	}
	before := memtest.LiveHeap()
	for i := 1; i <= replaced; i++ {
		if a := testLive.Build(edge(memtest.DenseConnPolicy(i, ep.MaxTrafficPolicyBytes)), nil); a.TLS[0].Policy == nil {
			t.Fatalf("document %d: %q", i, a.TLS[0].Unenforced)
		}
	}
	kept := int64(memtest.LiveHeap()) - int64(before)
	t.Logf("%d replaced 64 KiB documents left %d KiB behind", replaced, kept>>10)
	if kept > 2<<20 {
		t.Errorf("%d documents no plan uses kept %d KiB alive; at most 2 MiB expected", replaced, kept>>10)
	}
	if again := testLive.Build(edge(memtest.DenseConnPolicy(0, ep.MaxTrafficPolicyBytes)), nil); again.TLS[0].Policy != live.TLS[0].Policy {
		t.Error("a document a live plan uses was compiled again")
	}
	runtime.KeepAlive(live)
}
