package store

import (
	"testing"
)

// TestDrainReplica: a replica marked draining shows so in the replicas table, and stays so when
// its row is refreshed; the other replicas' rows are not touched, and marking a replica without
// a row makes none.
func TestDrainReplica(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		w.must(w.s.AnnounceReplica(w.ctx, "rep_a", "127.0.0.2:7443"), "announce a")
		w.must(w.s.AnnounceReplica(w.ctx, "rep_b", "127.0.0.3:7443"), "announce b")
		draining := func() map[string]bool {
			t.Helper()
			reps, err := w.s.AgentReplicas(w.ctx)
			w.must(err, "replicas")
			out := map[string]bool{}
			for _, r := range reps {
				out[r.Replica] = r.Draining
			}
			return out
		}
		if got := draining(); got["rep_a"] || got["rep_b"] {
			t.Fatalf("before any drain: %v", got)
		}
		w.must(w.s.DrainReplica(w.ctx, "rep_a"), "drain a")
		w.must(w.s.DrainReplica(w.ctx, "rep_gone"), "drain a replica without a row")
		w.must(w.s.AnnounceReplica(w.ctx, "rep_a", "127.0.0.2:7443"), "refresh a")
		got := draining()
		if !got["rep_a"] || got["rep_b"] {
			t.Errorf("after rep_a's drain and refresh: %v, want rep_a only draining", got)
		}
		if _, ok := got["rep_gone"]; ok {
			t.Errorf("marking a replica without a row made one: %v", got)
		}
	})
}
