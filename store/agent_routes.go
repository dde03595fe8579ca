package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// What one replica reads of the others to carry public traffic to their agents (the directory
// of remote tunnels, package tunnel): the replicas table, small enough to poll several times a
// second, with each replica's link address and a generation that moves in the same transaction
// as any change to its tunnel rows; and the tunnel rows of one replica, with what a bind needs
// beyond its name: protocol, labels, pooling, the digest of its TLS settings and its options.

// Refusals of a bind whose endpoint is online already for its own account, on this replica or
// another: the same as one server gives (an endpoint is online once, unless every bind of it
// asks for pooling with the same TLS settings).
var (
	// ErrEndpointOnline: a bind of the endpoint is online and neither asks for pooling.
	ErrEndpointOnline = errors.New("store: the endpoint is online already")
	// ErrPoolMix: one of the two binds asks for pooling and the other does not.
	ErrPoolMix = errors.New("store: the endpoint is online with the other pooling")
	// ErrPoolTLS: both ask for pooling, with different TLS settings.
	ErrPoolTLS = errors.New("store: the endpoint is online with other TLS settings")
)

// tunnelAD is the additional data a tunnel row's options are sealed with.
func tunnelAD(id string) string { return "tunnel:" + id }

// routeColumns are a tunnel row's routing columns as stored.
type routeColumns struct {
	labels string
	pooled int
	opts   string
}

// tunnelRoutes encodes a row's labels and pooling and seals its options.
func (s *Store) tunnelRoutes(r AgentTunnelRow) (routeColumns, error) {
	var c routeColumns
	if len(r.Labels) > 0 {
		b, err := json.Marshal(r.Labels)
		if err != nil {
			return c, err
		}
		c.labels = string(b)
	}
	if r.Pooled {
		c.pooled = 1
	}
	if len(r.Opts) > 0 {
		sealed, err := s.seal.seal(tunnelAD(r.ID), string(r.Opts))
		if err != nil {
			return c, err
		}
		c.opts = sealed
	}
	return c, nil
}

// bumpReplicas moves the generation of the replicas the query (with args) names: their tunnel
// rows are about to change.
func (s *Store) bumpReplicas(ctx context.Context, tx *wtx, query string, args ...any) error {
	_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_replicas SET gen = gen + 1 WHERE replica IN (`+query+`)`), args...)
	return s.classify(err)
}

// bumpSessionReplica moves the generation of the replica holding the session and returns it.
// A session of a replica without a row (forgotten while it could not reach the store) gives 0:
// the row the replica writes again starts past every generation it had.
func (s *Store) bumpSessionReplica(ctx context.Context, tx *wtx, sessionID string) (int64, error) {
	var gen int64
	err := tx.QueryRowContext(ctx, s.d.rebind(`UPDATE agent_replicas SET gen = gen + 1
		WHERE replica = (SELECT replica FROM agent_sessions WHERE id = ?) RETURNING gen`), sessionID).Scan(&gen)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return gen, s.classify(err)
}

// stampTunnel gives the tunnel row id, written in this transaction, the next generation of the
// replica holding the session. On PostgreSQL it is one statement, so that the replica's row,
// which every bind and session of the replica writes, stays locked only for it and the commit
// rather than across round trips; SQLite runs one writer at a time anyway. A session of a
// replica without a row leaves the row at 0, as bumpSessionReplica gives.
func (s *Store) stampTunnel(ctx context.Context, tx *wtx, sessionID, id string) error {
	if !s.d.remote() {
		gen, err := s.bumpSessionReplica(ctx, tx, sessionID)
		if err != nil || gen == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_tunnels SET gen = ? WHERE id = ?`), gen, id)
		return s.classify(err)
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(`WITH g AS (UPDATE agent_replicas SET gen = gen + 1
		WHERE replica = (SELECT replica FROM agent_sessions WHERE id = ?) RETURNING gen)
		UPDATE agent_tunnels SET gen = g.gen FROM g WHERE agent_tunnels.id = ?`), sessionID, id)
	return s.classify(err)
}

// touchBumpReplica is touchReplica that also moves the generation of an existing row, in one
// statement, and returns the generation: the replica's rows are about to change.
func (s *Store) touchBumpReplica(ctx context.Context, tx *wtx, replica string) (int64, error) {
	addr, _ := s.peerAddrs.Load(replica)
	peer, _ := addr.(string)
	now := time.Now()
	var gen int64
	err := tx.QueryRowContext(ctx, s.d.rebind(`INSERT INTO agent_replicas (replica, seen_at, peer_addr, gen) VALUES (?, ?, ?, ?)
		ON CONFLICT (replica) DO UPDATE SET seen_at = excluded.seen_at, peer_addr = excluded.peer_addr, gen = agent_replicas.gen + 1
		RETURNING gen`), replica, ep.FormatTime(now), peer, now.UnixMicro()).Scan(&gen)
	return gen, s.classify(err)
}

// onlineEndpoint is the first online bind of the account's endpoint (name and protocol) other
// than the row id, on any replica alive within LiveTolerance.
const onlineEndpoint = `SELECT t.pooled, t.tls_digest FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id
	JOIN agent_replicas r ON r.replica = s.replica
	WHERE t.name = ? AND t.proto = ? AND t.account_id = ? AND t.id <> ? AND r.seen_at >= ? LIMIT 1`

// holdEndpoint checks, under the name's lock (holdName took it), that no online bind of the
// same endpoint of the account refuses r: one that does not pool, or pools while r does not,
// or pools with other TLS settings. Every bind already online agrees with every other, so one
// is enough. A row of another protocol ("" for rows written before the column) is not checked.
// The row itself (a reconnecting agent presents its row id again) is not in the way, and the
// row it moves from, if any, gives its replica's generation a turn.
func (s *Store) holdEndpoint(ctx context.Context, tx *wtx, r AgentTunnelRow, name string) error {
	if err := s.bumpReplicas(ctx, tx, `SELECT s.replica FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id
		WHERE t.id = ? AND t.session_id <> ?`, r.ID, r.SessionID); err != nil {
		return err
	}
	if r.Proto == "" {
		return nil
	}
	var pooled int
	var digest string
	fresh := ep.FormatTime(time.Now().Add(-LiveTolerance))
	err := tx.QueryRowContext(ctx, s.d.rebind(onlineEndpoint), name, r.Proto, r.AccountID, r.ID, fresh).Scan(&pooled, &digest)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return s.classify(err)
	case pooled == 1 && r.Pooled && digest != r.TLSDigest:
		return ErrPoolTLS
	case pooled == 1 && r.Pooled:
		return nil
	case (pooled == 1) != r.Pooled:
		return ErrPoolMix
	}
	return ErrEndpointOnline
}

// AnnounceReplica records replica's link address (host:port other replicas dial; "" for a
// replica without a link) in its row now and whenever the row is written again.
func (s *Store) AnnounceReplica(ctx context.Context, replica, peerAddr string) error {
	s.peerAddrs.Store(replica, peerAddr)
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		return s.touchReplica(ctx, tx, replica)
	})
}

// AgentReplica is a replica's row as the directory reads it.
type AgentReplica struct {
	Replica string
	// PeerAddr is where its link listens ("" without a link).
	PeerAddr string
	// Gen moves with every change to the replica's tunnel rows.
	Gen int64
	// Fresh reports that the replica refreshed its row within LiveTolerance: its rows count.
	Fresh bool
	// Draining reports that the replica handed over to a successor and is draining
	// (DrainReplica): its agents are about to move.
	Draining bool
}

// DrainReplica marks replica's row draining: it handed its sockets over to a successor, and its
// agents reconnect there as soon as their sessions have no stream open. The other replicas then
// stop keeping the streams they forward to those agents open between requests (tunnel's
// directory), which would otherwise hold the sessions, and the agents, on the draining replica
// until its drain timeout. The mark stays until the row goes: a draining replica never serves
// again.
func (s *Store) DrainReplica(ctx context.Context, replica string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_replicas SET draining = 1 WHERE replica = ?`), replica)
		return s.classify(err)
	})
}

// AgentReplicas returns every replica's row: one short query on a table of one row per
// replica, for a directory to poll.
func (s *Store) AgentReplicas(ctx context.Context) ([]AgentReplica, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT replica, peer_addr, gen, CASE WHEN seen_at >= ? THEN 1 ELSE 0 END, draining
		FROM agent_replicas`), ep.FormatTime(time.Now().Add(-LiveTolerance)))
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []AgentReplica
	for rows.Next() {
		var r AgentReplica
		var fresh, draining int
		if err := rows.Scan(&r.Replica, &r.PeerAddr, &r.Gen, &fresh, &draining); err != nil {
			return nil, s.classify(err)
		}
		r.Fresh, r.Draining = fresh == 1, draining == 1
		out = append(out, r)
	}
	return out, s.classify(rows.Err())
}

// ReplicaTunnel is a tunnel row of a replica as the directory reads it.
type ReplicaTunnel struct {
	ID, SessionID, AccountID string
	// Name is the hostname or the tcp address ("" for a labeled tunnel).
	Name, Proto string
	Labels      map[string]string
	Pooled      bool
	TLSDigest   string
	// Gen is the replica's generation when the row was last written.
	Gen int64
	// Opts are the bind's options, opened; nil when the row has not changed since the
	// generation the caller asked from (it has them already) or when it has none. OptsErr says
	// why they could not be opened (then the row must not be routed as if it had none).
	Opts    json.RawMessage
	OptsErr error
}

// ReplicaTunnels returns the tunnel rows of the replica's sessions. The options of the rows last
// written at a generation above since are opened and returned; the others' are left out (the
// caller read them before), so a replica's small changes cost little to follow whatever it
// holds.
func (s *Store) ReplicaTunnels(ctx context.Context, replica string, since int64) ([]ReplicaTunnel, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT t.id, t.session_id, t.account_id, t.name, t.proto, t.labels, t.pooled,
		t.tls_digest, t.gen, CASE WHEN t.gen > ? THEN t.opts ELSE '' END
		FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id WHERE s.replica = ?`), since, replica)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []ReplicaTunnel
	for rows.Next() {
		var t ReplicaTunnel
		var labels, opts string
		var pooled int
		if err := rows.Scan(&t.ID, &t.SessionID, &t.AccountID, &t.Name, &t.Proto, &labels, &pooled, &t.TLSDigest, &t.Gen, &opts); err != nil {
			return nil, s.classify(err)
		}
		t.Pooled = pooled == 1
		if labels != "" {
			if err := json.Unmarshal([]byte(labels), &t.Labels); err != nil {
				t.OptsErr = fmt.Errorf("store: the labels of tunnel %s are not a JSON object", t.ID)
			}
		}
		if opts != "" {
			plain, err := s.seal.open(tunnelAD(t.ID), opts)
			if err != nil {
				t.OptsErr = err
			} else {
				t.Opts = json.RawMessage(plain)
			}
		}
		out = append(out, t)
	}
	return out, s.classify(rows.Err())
}
