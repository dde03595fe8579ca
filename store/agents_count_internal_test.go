package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// TestCountAgentTunnels: an account's online tunnels are counted on every live replica, and
// neither another account's nor those of a replica that stopped refreshing.
func TestCountAgentTunnels(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		a := ensureAccount(t, s, "a")
		b := ensureAccount(t, s, "b")
		session := func(id, account, replica string) {
			t.Helper()
			body, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: id}})
			if _, err := s.PutAgentSession(ctx, AgentSessionRow{ID: id, AccountID: account, CredentialID: "cr_" + id,
				Replica: replica, Conn: "conn_" + id, Doc: body}); err != nil {
				t.Fatal(err)
			}
		}
		tunnels := func(session, account string, n int) {
			t.Helper()
			for i := range n {
				id, _ := ep.NewID("tn")
				body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: id}})
				if err := s.PutAgentTunnel(ctx, AgentTunnelRow{ID: id, SessionID: session, AccountID: account, Doc: body}); err != nil {
					t.Fatalf("tunnel %d: %v", i, err)
				}
			}
		}
		count := func(account string) int {
			t.Helper()
			n, err := s.CountAgentTunnels(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		session("ts_a1", a.AccountID, "rep_1")
		session("ts_a2", a.AccountID, "rep_2")
		session("ts_b1", b.AccountID, "rep_1")
		tunnels("ts_a1", a.AccountID, 3)
		tunnels("ts_a2", a.AccountID, 2)
		tunnels("ts_b1", b.AccountID, 1)
		if na, nb := count(a.AccountID), count(b.AccountID); na != 5 || nb != 1 {
			t.Fatalf("A counts %d tunnels (want 5, on two replicas), B %d (want 1)", na, nb)
		}
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_replicas SET seen_at = ? WHERE replica = ?`),
				ep.FormatTime(time.Now().Add(-2*LiveTolerance)), "rep_2")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n := count(a.AccountID); n != 3 {
			t.Errorf("A counts %d tunnels once replica 2 stopped refreshing, want 3", n)
		}
		if n := count("ac_nobody"); n != 0 {
			t.Errorf("an account without tunnels counts %d", n)
		}
	})
}
