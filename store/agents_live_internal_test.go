package store

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// A session is online while its replica refreshes its one row; refreshing writes that row and
// none of the session rows; a replica that stops refreshing loses its sessions from the lists at
// once and from the table at another replica's next refresh.
func TestSessionsLiveWithTheirReplica(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		acct := ensureAccount(t, s, "a")
		put := func(id, replica string) {
			t.Helper()
			body, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: id, CreatedAt: ep.FormatTime(time.Now())}, Credential: ep.NewRef("cr_x")})
			if _, err := s.PutAgentSession(ctx, AgentSessionRow{ID: id, AccountID: acct.AccountID, CredentialID: "cr_x",
				Replica: replica, Conn: "conn_" + id, Doc: body}); err != nil {
				t.Fatal(err)
			}
		}
		listed := func() int {
			t.Helper()
			docs, _, err := s.ListLive(ctx, ep.TunnelSessions, acct.AccountID, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			return len(docs)
		}
		exec := func(q string, args ...any) {
			t.Helper()
			if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
				_, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		count := func(q string, args ...any) int {
			t.Helper()
			var n int
			if err := s.r.QueryRowContext(ctx, s.d.rebind(q), args...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		put("ts_a1", "rep_a")
		put("ts_a2", "rep_a")
		put("ts_b1", "rep_b")
		if n := listed(); n != 3 {
			t.Fatalf("%d sessions listed, want 3 (online as soon as written)", n)
		}
		// A refresh writes the replica's row, not its sessions'.
		const mark = "2000-01-01T00:00:00Z"
		exec(`UPDATE agent_sessions SET seen_at = ?`, mark)
		if err := s.TouchAgentSessions(ctx, "rep_a", time.Now().Add(-LiveTolerance), false); err != nil {
			t.Fatal(err)
		}
		if n := count(`SELECT count(*) FROM agent_sessions WHERE seen_at = ?`, mark); n != 3 {
			t.Errorf("a refresh rewrote %d session rows, want none", 3-n)
		}
		if n := listed(); n != 3 {
			t.Errorf("%d sessions listed after a refresh, want 3", n)
		}
		// Replica A stops refreshing: its sessions leave the list, then the table.
		old := ep.FormatTime(time.Now().Add(-2 * LiveTolerance))
		exec(`UPDATE agent_replicas SET seen_at = ? WHERE replica = ?`, old, "rep_a")
		if n := listed(); n != 1 {
			t.Errorf("%d sessions listed once replica A went quiet, want B's 1", n)
		}
		if _, _, err := s.GetLive(ctx, ep.TunnelSessions, acct.AccountID, "ts_a1"); !ep.IsNotFound(err) {
			t.Errorf("a dead replica's session is still found: %v", err)
		}
		if err := s.TouchAgentSessions(ctx, "rep_b", time.Now().Add(-LiveTolerance), false); err != nil {
			t.Fatal(err)
		}
		if n := count(`SELECT count(*) FROM agent_sessions WHERE replica = ?`, "rep_a"); n != 0 {
			t.Errorf("%d of the dead replica's session rows kept", n)
		}
		if n := count(`SELECT count(*) FROM agent_replicas WHERE replica = ?`, "rep_a"); n != 0 {
			t.Errorf("the dead replica's row kept")
		}
		if n := listed(); n != 1 {
			t.Errorf("%d sessions listed, want B's 1", n)
		}
		// A session of a replica with no row (written before migration 0012) is not listed,
		// and goes from the table at a refresh that asks for orphans.
		put("ts_c1", "rep_c")
		exec(`DELETE FROM agent_replicas WHERE replica = ?`, "rep_c")
		if err := s.TouchAgentSessions(ctx, "rep_b", time.Now().Add(-LiveTolerance), false); err != nil {
			t.Fatal(err)
		}
		if n := count(`SELECT count(*) FROM agent_sessions WHERE replica = ?`, "rep_c"); n != 1 {
			t.Errorf("%d orphan session rows after a refresh without orphans, want 1 (kept)", n)
		}
		if err := s.TouchAgentSessions(ctx, "rep_b", time.Now().Add(-LiveTolerance), true); err != nil {
			t.Fatal(err)
		}
		if n := count(`SELECT count(*) FROM agent_sessions WHERE replica = ?`, "rep_c"); n != 0 {
			t.Errorf("%d orphan session rows kept after a refresh with orphans", n)
		}
		if n := listed(); n != 1 {
			t.Errorf("%d sessions listed, want B's 1", n)
		}
		// At rest a refresh finds the dead replicas' sessions through the replica index, not
		// by reading every session row.
		if engine == "sqlite" {
			rows, err := s.r.QueryContext(ctx, `EXPLAIN QUERY PLAN `+deadReplicaSessions, "x")
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			rows.Close()
			if p := strings.Join(plan, "; "); !strings.Contains(p, "INDEX agent_sessions_replica") || strings.Contains(p, "SCAN agent_sessions") {
				t.Errorf("the refresh's query plan reads agent_sessions without its replica index: %q", plan)
			}
		}
	})
}
