package plan

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// denseConnPolicy is an on_tcp_connect document of about size bytes made of rules with one CEL
// expression each, distinct per seed: the shape that compiles to the most memory per byte.
func denseConnPolicy(seed, size int) string {
	var b strings.Builder
	b.WriteString("on_tcp_connect:\n")
	for j := 0; ; j++ {
		rule := fmt.Sprintf("  - expressions: [\"conn.client_port == %d && conn.server_port != %d\"]\n    actions: [{type: deny}]\n", seed*10000+j, j)
		if b.Len()+len(rule) > size {
			return b.String()
		}
		b.WriteString(rule)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

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
	live := testLive.Build(edge(denseConnPolicy(0, ep.MaxTrafficPolicyBytes)), nil)
	if live.TLS[0].Unenforced != "" || live.TLS[0].Policy == nil {
		t.Fatalf("edge: %+v", live.TLS[0])
	}
	before := liveHeap()
	for i := 1; i <= replaced; i++ {
		if a := testLive.Build(edge(denseConnPolicy(i, ep.MaxTrafficPolicyBytes)), nil); a.TLS[0].Policy == nil {
			t.Fatalf("document %d: %q", i, a.TLS[0].Unenforced)
		}
	}
	kept := int64(liveHeap()) - int64(before)
	t.Logf("%d replaced 64 KiB documents left %d KiB behind", replaced, kept>>10)
	if kept > 2<<20 {
		t.Errorf("%d documents no plan uses kept %d KiB alive; at most 2 MiB expected", replaced, kept>>10)
	}
	if again := testLive.Build(edge(denseConnPolicy(0, ep.MaxTrafficPolicyBytes)), nil); again.TLS[0].Policy != live.TLS[0].Policy {
		t.Error("a document a live plan uses was compiled again")
	}
	runtime.KeepAlive(live)
}
