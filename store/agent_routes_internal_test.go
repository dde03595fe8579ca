package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// endpoint records a bind of an endpoint (name and proto) on the session, with pooling and a TLS
// digest.
func (w *holdsWorld) endpoint(c ep.Caller, session, id, proto, name string, pooled bool, digest string) error {
	body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: id}})
	return w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: id, SessionID: session, AccountID: c.AccountID, Name: name,
		Doc: body, Proto: proto, Pooled: pooled, TLSDigest: digest, Opts: json.RawMessage(`{"Domain":"` + name + `"}`)})
}

// replicaGen returns the replica's generation, -1 when it has no row.
func (w *holdsWorld) replicaGen(replica string) int64 {
	w.t.Helper()
	reps, err := w.s.AgentReplicas(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, r := range reps {
		if r.Replica == replica {
			return r.Gen
		}
	}
	return -1
}

// TestEndpointHoldsAcrossReplicas: a bind of an endpoint that is online for its own account on
// another replica gets the refusal one server gives: online (neither pooled), pool-mix (one
// pooled), pool-tls (both pooled, other TLS settings); pooled binds with the same settings, and
// the endpoint's other protocol, are taken; the row's own id presented again (a reconnect) is
// not in its own way; a dead replica's rows do not count.
func TestEndpointHoldsAcrossReplicas(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		a := w.a
		w.session(a, "ts_a2", "rep_c") // A's second agent, on another replica
		const name = "ep.edgeplane.app"
		w.must(w.endpoint(a, "ts_a", "tn_1", "https", name, false, ""), "first bind")
		for _, c := range []struct {
			proto  string
			pooled bool
			digest string
			want   error
		}{
			{"https", false, "", ErrEndpointOnline},
			{"https", true, "", ErrPoolMix},
		} {
			if err := w.endpoint(a, "ts_a2", "tn_x", c.proto, name, c.pooled, c.digest); !errors.Is(err, c.want) {
				t.Errorf("bind %s pooled=%v on another replica: %v, want %v", c.proto, c.pooled, err, c.want)
			}
		}
		w.must(w.endpoint(a, "ts_a2", "tn_2", "http", name, false, ""), "the endpoint's other protocol")
		w.must(w.endpoint(a, "ts_a", "tn_1", "https", name, false, ""), "the same row again")

		const pooled = "pool.edgeplane.app"
		w.must(w.endpoint(a, "ts_a", "tn_p1", "tls", pooled, true, "d1"), "pooled bind")
		w.must(w.endpoint(a, "ts_a2", "tn_p2", "tls", pooled, true, "d1"), "pooled bind on another replica")
		if err := w.endpoint(a, "ts_a2", "tn_p3", "tls", pooled, true, "d2"); !errors.Is(err, ErrPoolTLS) {
			t.Errorf("pooled bind with other TLS settings: %v, want ErrPoolTLS", err)
		}
		if err := w.endpoint(a, "ts_a2", "tn_p4", "tls", pooled, false, "d1"); !errors.Is(err, ErrPoolMix) {
			t.Errorf("unpooled bind of a pooled endpoint: %v, want ErrPoolMix", err)
		}
		// TCP addresses likewise.
		w.must(w.endpoint(a, "ts_a", "tn_t1", "tcp", "127.0.0.1:20100", false, ""), "tcp bind")
		if err := w.endpoint(a, "ts_a2", "tn_t2", "tcp", "127.0.0.1:20100", false, ""); !errors.Is(err, ErrEndpointOnline) {
			t.Errorf("second tcp bind of an address: %v, want ErrEndpointOnline", err)
		}

		// Replica A dies: its rows no longer hold the endpoint.
		old := ep.FormatTime(time.Now().Add(-2 * LiveTolerance))
		w.must(w.s.inTx(w.ctx, func(ctx context.Context, tx *wtx) error {
			_, err := tx.ExecContext(ctx, w.s.d.rebind(`UPDATE agent_replicas SET seen_at = ? WHERE replica = ?`), old, "rep_a")
			return err
		}), "age replica A")
		w.must(w.endpoint(a, "ts_a2", "tn_3", "https", name, false, ""), "bind once the other replica is dead")
	})
}

// TestReplicaGenerations: a replica's generation moves in the transaction of every change to its
// tunnel rows (a bind, an unbind, its session's end, and another replica taking its session
// over, which moves the old replica's); the replicas table shows each replica's link address and
// freshness; a replica's rows come with their options opened (sealed at rest) when written after
// the generation asked from, without them otherwise; a replica row made again starts past every
// generation it showed.
func TestReplicaGenerations(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		a := w.a
		w.must(w.s.AnnounceReplica(w.ctx, "rep_a", "127.0.0.2:7443"), "announce")
		reps, err := w.s.AgentReplicas(w.ctx)
		w.must(err, "replicas")
		found := false
		for _, r := range reps {
			if r.Replica == "rep_a" {
				found = r.PeerAddr == "127.0.0.2:7443" && r.Fresh
			}
		}
		if !found {
			t.Fatalf("replica rows %+v: rep_a without its link address or not fresh", reps)
		}
		moved := func(what string, replica string, f func()) int64 {
			t.Helper()
			before := w.replicaGen(replica)
			f()
			after := w.replicaGen(replica)
			if after <= before {
				t.Errorf("%s: the generation of %s did not move (%d, %d)", what, replica, before, after)
			}
			return after
		}
		g0 := w.replicaGen("rep_a")
		body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: "tn_s"}})
		secret := `{"BasicAuth":{"credentials":[{"username":"u","cleartext_password":"very-secret-pw"}]}}`
		g1 := moved("bind", "rep_a", func() {
			w.must(w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: "tn_s", SessionID: "ts_a", AccountID: a.AccountID, Name: "s.edgeplane.app",
				Doc: body, Proto: "https", Pooled: true, TLSDigest: "abc", Opts: json.RawMessage(secret)}), "bind")
		})
		moved("labeled bind", "rep_a", func() {
			w.must(w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: "tn_l", SessionID: "ts_a", AccountID: a.AccountID,
				Doc: body, Labels: map[string]string{"app": "x"}}), "labeled")
		})
		var raw string
		w.must(w.s.r.QueryRowContext(w.ctx, w.s.d.rebind(`SELECT opts FROM agent_tunnels WHERE id = ?`), "tn_s").Scan(&raw), "raw opts")
		if strings.Contains(raw, "very-secret-pw") || !strings.HasPrefix(raw, sealPrefix) {
			t.Errorf("the options are stored in the clear: %q", raw)
		}
		rows, err := w.s.ReplicaTunnels(w.ctx, "rep_a", g0)
		w.must(err, "tunnels")
		byID := map[string]ReplicaTunnel{}
		for _, r := range rows {
			byID[r.ID] = r
		}
		s, l := byID["tn_s"], byID["tn_l"]
		if len(rows) != 2 || string(s.Opts) != secret || s.OptsErr != nil || !s.Pooled || s.TLSDigest != "abc" || s.Proto != "https" ||
			s.Name != "s.edgeplane.app" || s.AccountID != a.AccountID || s.SessionID != "ts_a" || l.Labels["app"] != "x" {
			t.Fatalf("the replica's rows since %d: %+v", g0, rows)
		}
		rows, err = w.s.ReplicaTunnels(w.ctx, "rep_a", w.replicaGen("rep_a"))
		w.must(err, "tunnels")
		if len(rows) != 2 || rows[0].Opts != nil || rows[1].Opts != nil {
			t.Errorf("rows unchanged since the generation asked from come with their options: %+v", rows)
		}
		if rows[0].Gen < g1 && rows[1].Gen < g1 {
			t.Errorf("rows' generations %d, %d before the bind's %d", rows[0].Gen, rows[1].Gen, g1)
		}
		gb := w.replicaGen("rep_b")
		moved("unbind", "rep_a", func() { w.must(w.s.DeleteAgentTunnel(w.ctx, "tn_l", "ts_a", "conn_ts_a"), "unbind") })
		if w.replicaGen("rep_b") != gb {
			t.Errorf("another replica's generation moved with A's change")
		}
		// The agent of ts_a reconnects to replica C: A's tunnels are gone, A's generation
		// moves.
		moved("session taken over", "rep_a", func() {
			_, err := w.s.PutAgentSession(w.ctx, AgentSessionRow{ID: "ts_a", AccountID: a.AccountID, CredentialID: "cr_ts_a",
				Replica: "rep_c", Conn: "conn_c", Doc: body})
			w.must(err, "takeover")
		})
		if rows, _ := w.s.ReplicaTunnels(w.ctx, "rep_a", 0); len(rows) != 0 {
			t.Errorf("replica A still has %d rows after its session moved", len(rows))
		}
		w.must(w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: "tn_c", SessionID: "ts_a", AccountID: a.AccountID, Name: "c.edgeplane.app",
			Doc: body, Proto: "http"}), "bind on C")
		moved("session ended", "rep_c", func() { w.must(w.s.DeleteAgentSession(w.ctx, "ts_a", "conn_c"), "end") })

		// Replica A's row forgotten (it could not reach the store) and written again.
		last := w.replicaGen("rep_a")
		w.must(w.s.inTx(w.ctx, func(ctx context.Context, tx *wtx) error {
			_, err := tx.ExecContext(ctx, w.s.d.rebind(`DELETE FROM agent_replicas WHERE replica = ?`), "rep_a")
			return err
		}), "forget A")
		time.Sleep(time.Millisecond) // the new row's generation is the time in microseconds
		w.must(w.s.AnnounceReplica(w.ctx, "rep_a", "127.0.0.2:7443"), "announce again")
		if g := w.replicaGen("rep_a"); g <= last {
			t.Errorf("the row made again starts at generation %d, not past %d", g, last)
		}
	})
}

// TestEndpointHoldRace: two binds of one endpoint of one account through two replicas at once,
// neither pooled, never both succeed (the name's lock orders them on PostgreSQL).
func TestEndpointHoldRace(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		other := openStore(t, dsn)
		w.session(w.a, "ts_a2", "rep_c")
		wc := &holdsWorld{t: t, s: other, a: w.a, b: w.b, ctx: w.ctx}
		for i := range 20 {
			name := "race" + string(rune('a'+i)) + ".edgeplane.app"
			var e1, e2 error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Add(2)
			go func() { defer wg.Done(); <-start; e1 = w.endpoint(w.a, "ts_a", "tn_r1"+name, "https", name, false, "") }()
			go func() {
				defer wg.Done()
				<-start
				e2 = wc.endpoint(w.a, "ts_a2", "tn_r2"+name, "https", name, false, "")
			}()
			close(start)
			wg.Wait()
			if (e1 == nil) == (e2 == nil) {
				t.Fatalf("round %d: %v; %v: want exactly one bind", i, e1, e2)
			}
			if err := errors.Join(e1, e2); !errors.Is(err, ErrEndpointOnline) {
				t.Fatalf("round %d: the loser's error %v, want ErrEndpointOnline", i, err)
			}
		}
	})
}
