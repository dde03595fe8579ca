package store

import (
	"context"
	"encoding/json"
)

// An agent that reconnects with its session id takes its session over on the replica it
// reached (PutAgentSession), the rows of its named binds and labeled tunnels with it.

// Takeover is what a session's write took over from the connection that held its id before.
type Takeover struct {
	// Tunnels are the named binds and labeled tunnels whose rows the session keeps for its
	// agent to bind again.
	Tunnels []KeptTunnel
	// Gen is the generation the kept rows were given: DropKeptTunnels deletes only rows still
	// at it, so that a bind written again since is never taken with them.
	Gen int64
}

// KeptTunnel is a tunnel row a session took over: its id, protocol and name (lowercase), and a
// labeled tunnel's labels (its proto and name are ""): a labeled tunnel's agent binds it again
// without its id, and the new bind is known for the row's by its session and labels.
type KeptTunnel struct {
	ID, Proto, Name string
	Labels          map[string]string
}

// keepTunnels lists the tunnel rows the session r took over (held: its row was another
// connection's) and gives them a new generation of r's replica, which now lists them: the other
// replicas read them from there. It marks r's replica alive (touchReplica) in any case, with the
// same statement that moves its generation when rows were kept, after reading them: the replica's
// row is the one every agent arriving there writes, held from here to the commit.
func (s *Store) keepTunnels(ctx context.Context, tx *wtx, r AgentSessionRow, held bool) (Takeover, error) {
	var took Takeover
	if held {
		rows, err := tx.QueryContext(ctx, s.d.rebind(`SELECT id, proto, name, labels FROM agent_tunnels WHERE session_id = ?`), r.ID)
		if err != nil {
			return Takeover{}, s.classify(err)
		}
		for rows.Next() {
			var k KeptTunnel
			var labels string
			if err := rows.Scan(&k.ID, &k.Proto, &k.Name, &labels); err != nil {
				rows.Close()
				return Takeover{}, s.classify(err)
			}
			if labels != "" && json.Unmarshal([]byte(labels), &k.Labels) != nil {
				k.Labels = nil // not this package's JSON: listed without labels, so no bind takes it
			}
			took.Tunnels = append(took.Tunnels, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return Takeover{}, s.classify(err)
		}
	}
	if len(took.Tunnels) == 0 {
		return Takeover{}, s.touchReplica(ctx, tx, r.Replica)
	}
	var err error
	if took.Gen, err = s.touchBumpReplica(ctx, tx, r.Replica); err != nil {
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
