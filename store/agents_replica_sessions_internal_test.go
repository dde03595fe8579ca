package store

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// TestReplicaSessions: a replica's sessions are the rows naming it, of every account; a session
// whose agent reconnected to another replica (the same id, written again there) is that one's,
// and the replica it left sees its generation move. A deletion by a connection the session no
// longer has changes nothing.
func TestReplicaSessions(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		a, b := ensureAccount(t, s, "a"), ensureAccount(t, s, "b")
		put := func(id, account, cred, replica, conn string) {
			t.Helper()
			body, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: id, CreatedAt: ep.FormatTime(time.Now())}, Credential: ep.NewRef(cred)})
			if _, err := s.PutAgentSession(ctx, AgentSessionRow{ID: id, AccountID: account, CredentialID: cred,
				Replica: replica, Conn: conn, Doc: body}); err != nil {
				t.Fatal(err)
			}
		}
		of := func(replica string) []string {
			t.Helper()
			ids, err := s.ReplicaSessions(ctx, replica)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(ids)
			return ids
		}
		put("ts_1", a.AccountID, "cr_a", "rep_a", "conn_1")
		put("ts_2", b.AccountID, "cr_b", "rep_a", "conn_2")
		put("ts_3", b.AccountID, "cr_b", "rep_b", "conn_3")
		if got := of("rep_a"); !slices.Equal(got, []string{"ts_1", "ts_2"}) {
			t.Errorf("rep_a's sessions: %v, want ts_1 and ts_2", got)
		}
		gen := func(replica string) int64 {
			t.Helper()
			reps, err := s.AgentReplicas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reps {
				if r.Replica == replica {
					return r.Gen
				}
			}
			t.Fatalf("no row for %s", replica)
			return 0
		}
		before := gen("rep_a")
		put("ts_1", a.AccountID, "cr_a", "rep_b", "conn_4") // its agent reconnected to rep_b
		if after := gen("rep_a"); after <= before {
			t.Errorf("rep_a's generation after its session moved: %d, was %d; want it moved (its tunnels are gone)", after, before)
		}
		// The old connection's deletion, late, leaves the session to its new connection; the
		// new connection's deletion takes it and moves rep_b's generation.
		before = gen("rep_b")
		if err := s.DeleteAgentSession(ctx, "ts_1", "conn_1"); err != nil {
			t.Fatal(err)
		}
		if got := of("rep_b"); !slices.Equal(got, []string{"ts_1", "ts_3"}) {
			t.Errorf("rep_b's sessions after the old connection's late deletion: %v, want ts_1 kept", got)
		}
		if err := s.DeleteAgentSession(ctx, "ts_1", "conn_4"); err != nil {
			t.Fatal(err)
		}
		if got := of("rep_b"); !slices.Equal(got, []string{"ts_3"}) {
			t.Errorf("rep_b's sessions after its connection's deletion: %v, want ts_3", got)
		}
		if after := gen("rep_b"); after <= before {
			t.Errorf("rep_b's generation after a session's deletion: %d, was %d; want it moved", after, before)
		}
		put("ts_1", a.AccountID, "cr_a", "rep_b", "conn_4")
		if got := of("rep_a"); !slices.Equal(got, []string{"ts_2"}) {
			t.Errorf("rep_a's sessions once ts_1 moved: %v, want ts_2", got)
		}
		if got := of("rep_b"); !slices.Equal(got, []string{"ts_1", "ts_3"}) {
			t.Errorf("rep_b's sessions: %v, want ts_1 and ts_3", got)
		}
		if got := of("rep_none"); len(got) != 0 {
			t.Errorf("a replica without sessions: %v", got)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.ReplicaSessions(cctx, "rep_a"); err == nil {
			t.Error("a cancelled read answered")
		}
	})
}
