package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// BenchmarkSnapshot reads a snapshot of an account with 1,000 edges of 10 routes after one
// route changed: "cached" as the data plane does it, with the account's documents kept since
// its last snapshot, and "full" on a store without them, as every snapshot was read before
// the snapshot cache.
func BenchmarkSnapshot(b *testing.B) {
	ctx := context.Background()
	dsn := filepath.Join(b.TempDir(), "edgeplane.db")
	s, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c, _, err := s.EnsureAccount(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	var route ep.Document
	for e := range 1000 {
		edge, err := s.Create(ctx, c, ep.HTTPSEdges, "", ep.HTTPSEdges.NewCreate())
		if err != nil {
			b.Fatal(err)
		}
		for r := range 10 {
			cr := ep.HTTPSEdgeRoutes.NewCreate()
			body := fmt.Sprintf(`{"match_type": "path_prefix", "match": "/e%d/r%d", "compression": {"enabled": true}}`, e, r)
			if err := json.Unmarshal([]byte(body), cr); err != nil {
				b.Fatal(err)
			}
			if route, err = s.Create(ctx, c, ep.HTTPSEdgeRoutes, edge.Base().ID, cr); err != nil {
				b.Fatal(err)
			}
		}
	}
	change := func(i int) {
		r := route.(*ep.HTTPSEdgeRoute)
		if _, err := s.Update(ctx, c, ep.HTTPSEdgeRoutes, r.EdgeID, r.ID, func(op *ep.Op, d ep.Document) error {
			d.(*ep.HTTPSEdgeRoute).Compression = &ep.EndpointToggle{Enabled: i%2 == 0}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cached", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			change(i)
			b.StartTimer()
			if _, err := s.Snapshot(ctx, c.AccountID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			change(i)
			s.ResetSnapshotCache()
			b.StartTimer()
			if _, err := s.Snapshot(ctx, c.AccountID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
