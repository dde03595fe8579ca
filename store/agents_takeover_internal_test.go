package store

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestTakeoverKeepsNamedBinds: an agent that reconnects to another replica with its session id
// takes its named binds' rows and its labeled tunnels' rows over with the session (they are
// listed, a labeled one with its labels, and now the new replica's, at a generation of it);
// until it binds again, the kept row holds its name against another account. DropKeptTunnels
// then deletes only the kept rows not written again since, and only for the session's
// connection. Account b's session on another replica, and its labeled tunnel with the same
// labels, are untouched throughout.
func TestTakeoverKeepsNamedBinds(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn) // ts_a of account a on rep_a, ts_b of account b on rep_b
		bind := func(c ep.Caller, session, id, name string) error {
			body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: id}})
			return w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: id, SessionID: session, AccountID: c.AccountID, Name: name,
				Proto: "http", Doc: body})
		}
		w.must(bind(w.a, "ts_a", "tn_web", "web.edgeplane.app"), "bind web")
		w.must(bind(w.a, "ts_a", "tn_api", "api.edgeplane.app"), "bind api")
		body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: "tn_lab"}})
		w.must(w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: "tn_lab", SessionID: "ts_a", AccountID: w.a.AccountID,
			Doc: body, Labels: map[string]string{"edge": "x"}}), "labeled")
		w.must(bind(w.b, "ts_b", "tn_b", "b.edgeplane.app"), "bind b")
		body, _ = json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: "tn_lab_b"}})
		w.must(w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: "tn_lab_b", SessionID: "ts_b", AccountID: w.b.AccountID,
			Doc: body, Labels: map[string]string{"edge": "x"}}), "account b's labeled")
		genA, genC := w.replicaGen("rep_a"), int64(0)

		sess, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: "ts_a"}})
		took, err := w.s.PutAgentSession(w.ctx, AgentSessionRow{ID: "ts_a", AccountID: w.a.AccountID, CredentialID: "cr_ts_a",
			Replica: "rep_c", Conn: "conn_c", Doc: sess})
		w.must(err, "takeover")
		var ids []string
		for _, k := range took.Tunnels {
			ids = append(ids, k.ID+" "+k.Name+" "+k.Labels["edge"])
		}
		slices.Sort(ids)
		if want := []string{"tn_api api.edgeplane.app ", "tn_lab  x", "tn_web web.edgeplane.app "}; !slices.Equal(ids, want) {
			t.Errorf("the takeover kept %q, want %q (the named binds and the labeled tunnel with its labels)", ids, want)
		}
		if genC = w.replicaGen("rep_c"); took.Gen != genC {
			t.Errorf("the kept rows' generation %d, want rep_c's %d", took.Gen, genC)
		}
		if g := w.replicaGen("rep_a"); g <= genA {
			t.Errorf("rep_a's generation %d after its session moved, was %d", g, genA)
		}
		rows, err := w.s.ReplicaTunnels(w.ctx, "rep_c", 0)
		w.must(err, "rep_c's rows")
		if len(rows) != 3 || rows[0].Gen != took.Gen || rows[1].Gen != took.Gen || rows[2].Gen != took.Gen {
			t.Errorf("rep_c's rows after the takeover: %+v, want the two named binds and the labeled tunnel at generation %d", rows, took.Gen)
		}
		if rows, _ := w.s.ReplicaTunnels(w.ctx, "rep_a", 0); len(rows) != 0 {
			t.Errorf("rep_a still lists %d rows", len(rows))
		}
		if err := bind(w.b, "ts_b", "tn_steal", "web.edgeplane.app"); err == nil {
			t.Error("account b bound a name whose agent of account a is on its way back")
		}

		// The agent binds web again (same row id); api it never binds again.
		w.must(bind(w.a, "ts_a", "tn_web", "web.edgeplane.app"), "bind web again")
		w.must(w.s.DropKeptTunnels(w.ctx, "ts_a", "conn_a_old", took.Gen), "drop by another connection")
		if rows, _ := w.s.ReplicaTunnels(w.ctx, "rep_c", 0); len(rows) != 3 {
			t.Errorf("a drop by a connection the session no longer has deleted rows: %d left", len(rows))
		}
		before := w.replicaGen("rep_c")
		w.must(w.s.DropKeptTunnels(w.ctx, "ts_a", "conn_c", took.Gen), "drop")
		rows, err = w.s.ReplicaTunnels(w.ctx, "rep_c", 0)
		w.must(err, "rep_c's rows")
		if len(rows) != 1 || rows[0].ID != "tn_web" {
			t.Errorf("rep_c's rows after the drop: %+v, want tn_web (bound again) alone, not api nor the labeled tunnel", rows)
		}
		if g := w.replicaGen("rep_c"); g <= before {
			t.Errorf("rep_c's generation %d after the drop, was %d", g, before)
		}
		w.must(bind(w.b, "ts_b", "tn_api_b", "api.edgeplane.app"), "account b binds the name given up")
		if rows, _ := w.s.ReplicaTunnels(w.ctx, "rep_b", 0); len(rows) != 3 {
			t.Errorf("account b's replica lists %d rows, want its three", len(rows))
		}
	})
}

// TestTakeoverLabeledRowsEdgeCases: a labeled row whose labels cannot be read is still listed,
// without labels (so that no bind takes it, and the takeover's deadline deletes it), and the
// takeover does not fail; a bind's row without a storable name, of neither kind, goes with
// the takeover as before. Account b's labeled row with the same labels stays, unlisted.
func TestTakeoverLabeledRowsEdgeCases(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn) // ts_a of account a on rep_a, ts_b of account b on rep_b
		put := func(c ep.Caller, session, id, proto, name string, labels map[string]string) {
			body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: id}})
			w.must(w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: id, SessionID: session, AccountID: c.AccountID,
				Proto: proto, Name: name, Doc: body, Labels: labels}), "put "+id)
		}
		put(w.a, "ts_a", "tn_bad", "", "", map[string]string{"edge": "x"})
		put(w.a, "ts_a", "tn_nameless", "http", "", nil)
		put(w.b, "ts_b", "tn_lab_b", "", "", map[string]string{"edge": "x"})
		w.must(w.s.inTx(w.ctx, func(ctx context.Context, tx *wtx) error {
			_, err := tx.ExecContext(ctx, w.s.d.rebind(`UPDATE agent_tunnels SET labels = ? WHERE id = ?`), "not json", "tn_bad")
			return err
		}), "spoil tn_bad's labels")

		sess, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: "ts_a"}})
		took, err := w.s.PutAgentSession(w.ctx, AgentSessionRow{ID: "ts_a", AccountID: w.a.AccountID, CredentialID: "cr_ts_a",
			Replica: "rep_c", Conn: "conn_c", Doc: sess})
		w.must(err, "takeover")
		if len(took.Tunnels) != 1 || took.Tunnels[0].ID != "tn_bad" || took.Tunnels[0].Labels != nil {
			t.Errorf("the takeover kept %+v, want tn_bad alone, without labels", took.Tunnels)
		}
		rows, err := w.s.ReplicaTunnels(w.ctx, "rep_c", 0)
		w.must(err, "rep_c's rows")
		if len(rows) != 1 || rows[0].ID != "tn_bad" {
			t.Errorf("rep_c's rows after the takeover: %+v, want tn_bad alone (the nameless bind's went)", rows)
		}
		if rows, _ := w.s.ReplicaTunnels(w.ctx, "rep_b", 0); len(rows) != 1 || rows[0].ID != "tn_lab_b" {
			t.Errorf("account b's rows: %+v, want its labeled row untouched", rows)
		}
	})
}
