package store_test

import (
	"context"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// TestReadCacheByteBudget fills the read cache with large documents — TLS edges with traffic
// policies of 60 KiB, as a hostile account once did with 1 MB ones — and requires what
// the cache holds, in bytes, to stay within its budget while it goes on answering from memory.
func TestReadCacheByteBudget(t *testing.T) {
	w := newCacheWorld(t)
	ctx := context.Background()
	const edges, policy = 100, 60 << 10
	ids := make([]string, edges)
	for i := range ids {
		v := "on_http_request: []\n#" + strings.Repeat("a", policy)
		d, err := w.a.Create(ctx, w.admin, ep.TLSEdges, "", &ep.TLSEdgeBody{TrafficPolicy: &ep.EndpointTrafficPolicyMutate{Value: &v}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = d.Base().ID
	}
	// read GETs every edge twice, keeping a rendered body as the server does, and checks the
	// cache's byte count after every read.
	read := func(budget int64) store.ReadCacheStats {
		t.Helper()
		for _, id := range ids {
			for range 2 {
				_, doc, rendered, err := w.a.AuthenticateGet(ctx, w.selector, w.secret, ep.TLSEdges, "", id, "k")
				if err != nil {
					t.Fatal(err)
				}
				if rendered != nil && doc != nil {
					rendered.Store("k", make([]byte, policy+1024))
				}
				if s := w.a.ReadCacheStats(); s.Bytes > budget {
					t.Fatalf("the read cache holds %d bytes in %d entries, over its budget of %d", s.Bytes, s.Entries, budget)
				}
			}
		}
		return w.a.ReadCacheStats()
	}

	// With the default budget all of them fit, and each is counted at least at its size.
	s := read(store.DefaultReadCacheBytes)
	if s.Entries < edges || s.Bytes < edges*policy {
		t.Fatalf("with the default budget: %d entries counted as %d bytes, want %d edges of over %d bytes", s.Entries, s.Bytes, edges, policy)
	}

	// With a budget of 2 MiB, a tenth of them: the cache evicts, stays under it, and still hits.
	const budget = 2 << 20
	store.SetReadCacheBudget(w.a, budget)
	if s := w.a.ReadCacheStats(); s.Bytes > budget {
		t.Fatalf("a smaller budget evicted nothing: %d bytes", s.Bytes)
	}
	before := w.a.ReadCacheStats()
	s = read(budget)
	if s.Entries >= edges || s.Bytes < budget/2 {
		t.Fatalf("with a budget of %d: %d entries counted as %d bytes", budget, s.Entries, s.Bytes)
	}
	if hits := s.Hits - before.Hits; hits < edges {
		t.Fatalf("the second read of each edge came from the cache %d times of %d", hits, edges)
	}
}
