package store

import "context"

// An agent that reconnects with its session id takes its session over on the replica it
// reached (PutAgentSession), the rows of its named binds with it.

// Takeover is what a session's write took over from the connection that held its id before.
type Takeover struct {
	// Tunnels are the named binds whose rows the session keeps for its agent to bind again.
	Tunnels []KeptTunnel
	// Gen is the generation the kept rows were given: DropKeptTunnels deletes only rows still
	// at it, so that a bind written again since is never taken with them.
	Gen int64
}

// KeptTunnel is a tunnel row a session took over: its id, protocol and name (lowercase).
type KeptTunnel struct{ ID, Proto, Name string }

// keepTunnels lists the tunnel rows the session r took over and gives them a new generation of
// r's replica, which now lists them: the other replicas read them from there.
func (s *Store) keepTunnels(ctx context.Context, tx *wtx, r AgentSessionRow) (Takeover, error) {
	rows, err := tx.QueryContext(ctx, s.d.rebind(`SELECT id, proto, name FROM agent_tunnels WHERE session_id = ?`), r.ID)
	if err != nil {
		return Takeover{}, s.classify(err)
	}
	var took Takeover
	for rows.Next() {
		var k KeptTunnel
		if err := rows.Scan(&k.ID, &k.Proto, &k.Name); err != nil {
			rows.Close()
			return Takeover{}, s.classify(err)
		}
		took.Tunnels = append(took.Tunnels, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(took.Tunnels) == 0 {
		return Takeover{}, s.classify(err)
	}
	if took.Gen, err = s.bumpSessionReplica(ctx, tx, r.ID); err != nil {
		return Takeover{}, err
	}
	_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_tunnels SET gen = ? WHERE session_id = ?`), took.Gen, r.ID)
	return took, s.classify(err)
}

// DropKeptTunnels deletes the rows a session took over (PutAgentSession) that its agent has not
// bound again: those still at the takeover's generation, if the session row is still the
// connection's.
func (s *Store) DropKeptTunnels(ctx context.Context, sessionID, conn string, gen int64) error {
	return s.deleteConnTunnels(ctx, "gen", gen, sessionID, conn)
}
