package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// What the agent gateway reads and writes: credentials presented by agents, the claims a bind
// must hold, deployment-wide secrets (edgeplane's CA), and the rows of online sessions and
// tunnels. None of it runs on the path of a public request.

// ErrUnknownCredential is the answer for a token that is well formed but names no live credential
// (never issued, deleted, or with a wrong secret).
var ErrUnknownCredential = errors.New("store: unknown credential")

// AgentCredential is a credential as the agent gateway needs it.
type AgentCredential struct {
	ID, AccountID, OwnerID string
	ACL                    []string
	// Active is false when the credential's owner is a deactivated bot user.
	Active bool
}

// AuthenticateAgent finds the credential of a presented token (split by ep.ParseToken) and checks
// its secret in constant time.
func (s *Store) AuthenticateAgent(ctx context.Context, selector, secret string) (AgentCredential, error) {
	var k keyRow
	if !storable(selector) {
		return AgentCredential{}, ErrUnknownCredential
	}
	err := s.rd.QueryRowContext(ctx, s.q.auth, selector, ep.Credentials.Kind).Scan(k.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return AgentCredential{}, ErrUnknownCredential
	}
	if err != nil {
		return AgentCredential{}, s.classify(err)
	}
	stored, err := hex.DecodeString(k.hash)
	if err != nil || !ep.SecretMatches(secret, stored) {
		return AgentCredential{}, ErrUnknownCredential
	}
	doc, err := s.Get(ctx, k.c.AccountID, ep.Credentials, "", k.c.KeyID)
	if ep.IsNotFound(err) {
		return AgentCredential{}, ErrUnknownCredential
	}
	if err != nil {
		return AgentCredential{}, err
	}
	cr := doc.(*ep.Credential)
	return AgentCredential{ID: cr.ID, AccountID: k.c.AccountID, OwnerID: cr.OwnerID, ACL: cr.ACL, Active: k.active != 0}, nil
}

// ClaimHolder returns the account and object holding a claim (a reserved domain name, a reserved
// TCP address, an edge hostport); found is false when nothing holds it.
func (s *Store) ClaimHolder(ctx context.Context, namespace, value string) (account, objectID string, found bool, err error) {
	if !storable(value) {
		return "", "", false, nil
	}
	err = s.rd.QueryRowContext(ctx, s.q.claimGet, namespace, value).Scan(&account, &objectID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, s.classify(err)
	}
	return account, objectID, true, nil
}

// LiveObjects reports which of the ids name objects that still exist, with one query: the agent
// gateway asks it for the credentials and reservations its online sessions depend on, so a
// delete through any replica's API takes them offline.
func (s *Store) LiveObjects(ctx context.Context, ids []string) (map[string]bool, error) {
	live := make(map[string]bool, len(ids))
	err := inChunks(ids, func(chunk []any) error {
		q := `SELECT id FROM objects WHERE id IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		rows, err := s.r.QueryContext(ctx, s.d.rebind(q), chunk...)
		if err != nil {
			return s.classify(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return s.classify(err)
			}
			live[id] = true
		}
		return s.classify(rows.Err())
	})
	return live, err
}

// AgentSessionRow is an online agent session as stored: Doc is its API document (without uri).
type AgentSessionRow struct {
	ID, AccountID, CredentialID, Replica string
	// Conn names the agent's connection: only it may delete the row.
	Conn string
	Doc  json.RawMessage
}

// AgentTunnelRow is an online tunnel as stored: Doc is its API document (without uri). Name is
// the public name it serves, lowercase: the hostname of an http, https or tls bind, the address
// host:port of a tcp bind, "" for a labeled tunnel. The rest is what another replica needs to
// carry the tunnel's public traffic (agent_routes.go).
type AgentTunnelRow struct {
	ID, SessionID, AccountID string
	Name                     string
	Doc                      json.RawMessage
	// Proto is the bind's protocol (http, https, tcp, tls; "" for a labeled tunnel), Labels a
	// labeled tunnel's labels.
	Proto  string
	Labels map[string]string
	// Pooled and TLSDigest are the bind's pooling and the digest of what it asks of its
	// clients' TLS ("" for nothing): every bind of an endpoint must agree on them, on any
	// replica.
	Pooled    bool
	TLSDigest string
	// Opts are the bind's options as the agent sent them (the modules it asked for), stored
	// encrypted: they hold passwords, client secrets and private keys.
	Opts json.RawMessage
}

// ErrIDTaken is returned when a session or tunnel id presented again by an agent belongs to
// another credential or account: the caller takes a new id.
var ErrIDTaken = errors.New("store: the id belongs to another agent")

// PutAgentSession records a session that came online on this replica. An agent reconnecting
// after its replica died, or moving away from one that is draining, keeps its session id: the
// old replica's row gives way, but only to the same credential.
//
// The session's named tunnel rows stay, now this replica's (Takeover lists them): the agent binds
// them again by their ids within moments (Takeover.Gen), and until it has, the rows say where
// its endpoints are coming back, so that requests for them wait rather than fail, and no other
// account takes their names in between. A labeled tunnel's row stays too: its agent binds it
// again without the id, and the new bind takes the row by its labels. Only the rows of neither
// kind (a bind without a name that can be stored) go.
func (s *Store) PutAgentSession(ctx context.Context, r AgentSessionRow) (Takeover, error) {
	var took Takeover
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		took = Takeover{}
		// The replica that held the session (one that died, or the agent left) learns that its
		// tunnels are gone: its generation moves, last, so that its row, which every agent
		// leaving that replica updates, is locked only for this transaction's commit (a rolling
		// restart moves all its agents at once).
		// This replica's row is written late too (keepTunnels), in one statement: every agent
		// arriving here writes it, and all of a handover's arrive within moments.
		held, err := s.sessionReplica(ctx, tx, `SELECT replica FROM agent_sessions WHERE id = ? AND credential_id = ?`, r.ID, r.CredentialID)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_tunnels WHERE name = '' AND (proto <> '' OR labels = '') AND session_id IN
			(SELECT id FROM agent_sessions WHERE id = ? AND credential_id = ?)`), r.ID, r.CredentialID); err != nil {
			return s.classify(err)
		}
		res, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO agent_sessions (id, account_id, credential_id, replica, conn, seen_at, doc)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET replica = excluded.replica, conn = excluded.conn,
			seen_at = excluded.seen_at, doc = excluded.doc WHERE agent_sessions.credential_id = excluded.credential_id`),
			r.ID, r.AccountID, r.CredentialID, r.Replica, r.Conn, ep.FormatTime(time.Now()), string(r.Doc))
		if err := affectedOne(s, res, err); err != nil {
			return err
		}
		if took, err = s.keepTunnels(ctx, tx, r, held != ""); err != nil {
			return err
		}
		return s.bumpReplica(ctx, tx, held)
	})
	return took, err
}

// sessionReplica returns the replica the query (with args) finds for a session, "" for none,
// with the session's row locked on PostgreSQL until the transaction ends: the replica read is
// the one whose generation the transaction moves.
func (s *Store) sessionReplica(ctx context.Context, tx *wtx, query string, args ...any) (string, error) {
	var replica string
	err := tx.QueryRowContext(ctx, s.d.rebind(query+s.d.forUpdate()), args...).Scan(&replica)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return replica, s.classify(err)
}

// bumpReplica moves the generation of replica ("" for none): its tunnel rows changed.
func (s *Store) bumpReplica(ctx context.Context, tx *wtx, replica string) error {
	if replica == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_replicas SET gen = gen + 1 WHERE replica = ?`), replica)
	return s.classify(err)
}

// RestoreAgentSession writes again the row of a session this replica still holds, after the
// other replicas may have forgotten it (this replica could not refresh its row for
// LiveTolerance): the row is inserted when it is missing, and left alone when it is there. ours
// reports whether the row is this connection's now: false when the agent has reconnected to
// another connection meanwhile, which then holds the session id.
func (s *Store) RestoreAgentSession(ctx context.Context, r AgentSessionRow) (ours bool, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		if err := s.touchReplica(ctx, tx, r.Replica); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO agent_sessions (id, account_id, credential_id, replica, conn, seen_at, doc)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
			r.ID, r.AccountID, r.CredentialID, r.Replica, r.Conn, ep.FormatTime(time.Now()), string(r.Doc)); err != nil {
			return s.classify(err)
		}
		var conn string
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT conn FROM agent_sessions WHERE id = ?`), r.ID).Scan(&conn); err != nil {
			return s.classify(err)
		}
		ours = conn == r.Conn
		return nil
	})
	return ours, err
}

// affectedOne is nil when an upsert wrote its row, ErrIDTaken when its condition kept it out.
func affectedOne(s *Store, res sql.Result, err error) error {
	if err != nil {
		return s.classify(err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return ErrIDTaken
	}
	return nil
}

// ReplicaSessions returns the ids of the sessions whose rows name replica: its own, less those
// an agent that reconnected elsewhere has taken over (PutAgentSession moves the row). A drain
// polls it to see its agents' rows taken over; it reads the replica index, not the rows' docs.
func (s *Store) ReplicaSessions(ctx context.Context, replica string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT id FROM agent_sessions WHERE replica = ?`), replica)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.classify(err)
		}
		out = append(out, id)
	}
	return out, s.classify(rows.Err())
}

// DeleteAgentSession removes a session and its tunnels, if the row is still the connection's
// (an agent that reconnected to a replica has taken it over).
func (s *Store) DeleteAgentSession(ctx context.Context, id, conn string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		// The replica's generation moves last, as in PutAgentSession: its row is the one every
		// session of that replica updates.
		held, err := s.sessionReplica(ctx, tx, `SELECT replica FROM agent_sessions WHERE id = ? AND conn = ?`, id, conn)
		if err != nil || held == "" {
			return err // not this connection's any more (or gone): nothing to delete
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_tunnels WHERE session_id IN
			(SELECT id FROM agent_sessions WHERE id = ? AND conn = ?)`), id, conn); err != nil {
			return s.classify(err)
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_sessions WHERE id = ? AND conn = ?`), id, conn); err != nil {
			return s.classify(err)
		}
		return s.bumpReplica(ctx, tx, held)
	})
}

// PutAgentTunnel records a tunnel bound on a session of this replica; a tunnel id presented
// again by a reconnecting agent is reused only within its account. A tunnel with a name is
// recorded only while its account may hold the name (holds.go): ErrNameReserved when another
// account's reservation covers it, ErrNameOnline when another account's agent is online on it;
// and only while no bind of the same endpoint on any replica refuses it (ErrEndpointOnline,
// ErrPoolMix, ErrPoolTLS). The session's replica's generation moves with the row.
func (s *Store) PutAgentTunnel(ctx context.Context, r AgentTunnelRow) error {
	name := strings.ToLower(r.Name)
	if !storable(name) {
		name = ""
	}
	routes, err := s.tunnelRoutes(r)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		if name != "" {
			if err := s.holdName(ctx, tx, r.AccountID, name); err != nil {
				return err
			}
			if err := s.holdEndpoint(ctx, tx, r, name); err != nil {
				return err
			}
		}
		// The row is written at generation 0 and given its replica's next one last (stampTunnel):
		// the replica's row, which every bind on the replica writes, is locked only for that
		// statement and the commit. No one sees the 0: the row is not committed before.
		res, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO agent_tunnels (id, session_id, account_id, name, zone, doc,
			proto, labels, pooled, tls_digest, opts, gen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, name = excluded.name, zone = excluded.zone, doc = excluded.doc,
			proto = excluded.proto, labels = excluded.labels, pooled = excluded.pooled, tls_digest = excluded.tls_digest,
			opts = excluded.opts, gen = excluded.gen
			WHERE agent_tunnels.account_id = excluded.account_id`),
			r.ID, r.SessionID, r.AccountID, name, zoneOf(name), string(r.Doc),
			r.Proto, routes.labels, routes.pooled, r.TLSDigest, routes.opts, 0)
		if err := affectedOne(s, res, err); err != nil {
			return err
		}
		return s.stampTunnel(ctx, tx, r.SessionID, r.ID)
	})
}

// DeleteAgentTunnel removes a tunnel row, if its session row is still the connection's.
func (s *Store) DeleteAgentTunnel(ctx context.Context, id, sessionID, conn string) error {
	return s.deleteConnTunnels(ctx, "id", id, sessionID, conn)
}

// deleteConnTunnels deletes the session's tunnel rows whose column (a name from this package,
// never a caller's) holds value, if the session row is still the connection's, and moves its
// replica's generation when any went.
func (s *Store) deleteConnTunnels(ctx context.Context, column string, value any, sessionID, conn string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_tunnels WHERE `+column+` = ? AND session_id IN
			(SELECT id FROM agent_sessions WHERE id = ? AND conn = ?)`), value, sessionID, conn)
		if err != nil {
			return s.classify(err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return nil
		}
		_, err = s.bumpSessionReplica(ctx, tx, sessionID)
		return err
	})
}

// TouchAgentSessions marks the replica, and so every session it holds, as seen now, and forgets
// the sessions of replicas not seen since staleBefore (a replica that died without cleaning up).
// It writes one row, however many sessions the replica holds (migration 0012), and finds the
// dead replicas' sessions through the replica index, so that at rest it reads no session row.
// With orphans it also forgets the sessions of replicas that have no row at all (written before
// migration 0012): that reads every session row, so the gateway asks for it once, on its first
// refresh.
func (s *Store) TouchAgentSessions(ctx context.Context, replica string, staleBefore time.Time, orphans bool) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		if err := s.touchReplica(ctx, tx, replica); err != nil {
			return err
		}
		stale := ep.FormatTime(staleBefore)
		gone := deadReplicaSessions
		if orphans {
			gone = deadOrOrphanSessions
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_tunnels WHERE session_id IN (`+gone+`)`), stale); err != nil {
			return s.classify(err)
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_sessions WHERE id IN (`+gone+`)`), stale); err != nil {
			return s.classify(err)
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_replicas WHERE seen_at < ?`), stale); err != nil {
			return s.classify(err)
		}
		return s.expireAgentCommands(ctx, tx)
	})
}

// The sessions TouchAgentSessions forgets, given the time before which a replica is dead: those
// of dead replicas (through the replica index), and also those of replicas with no row.
const (
	deadReplicaSessions  = `SELECT id FROM agent_sessions WHERE replica IN (SELECT replica FROM agent_replicas WHERE seen_at < ?)`
	deadOrOrphanSessions = `SELECT id FROM agent_sessions WHERE replica NOT IN (SELECT replica FROM agent_replicas WHERE seen_at >= ?)`
)

// touchReplica marks the replica alive now: its sessions count as online for LiveTolerance. A
// new row carries the replica's link address and starts its generation at the time in
// microseconds, so that a row made again after the others forgot it (a replica cut off from the
// store) never shows a generation it showed before.
func (s *Store) touchReplica(ctx context.Context, tx *wtx, replica string) error {
	addr, _ := s.peerAddrs.Load(replica)
	peer, _ := addr.(string)
	now := time.Now()
	_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO agent_replicas (replica, seen_at, peer_addr, gen) VALUES (?, ?, ?, ?)
		ON CONFLICT (replica) DO UPDATE SET seen_at = excluded.seen_at, peer_addr = excluded.peer_addr`),
		replica, ep.FormatTime(now), peer, now.UnixMicro())
	return s.classify(err)
}

// LiveTolerance is how long a session row counts as online after its replica last refreshed
// it: a replica that dies without cleaning up stops showing its agents within it.
const LiveTolerance = 15 * time.Second

// liveTable is the table of a live collection's rows.
func liveTable(res *ep.Resource) (string, error) {
	switch res {
	case ep.TunnelSessions:
		return "agent_sessions", nil
	case ep.Tunnels:
		return "agent_tunnels", nil
	}
	return "", errors.New("store: " + res.Kind + " is not a live collection")
}

// ListLive returns a page of the account's objects of a live collection (online agent
// sessions or tunnels), newest first, decoded; more reports whether another page follows.
func (s *Store) ListLive(ctx context.Context, res *ep.Resource, account, beforeID string, limit int) (docs []ep.Document, more bool, err error) {
	table, err := liveTable(res)
	if err != nil {
		return nil, false, err
	}
	if beforeID == "" {
		beforeID = "\x7f"
	}
	q := `SELECT s.doc FROM agent_sessions s JOIN agent_replicas r ON r.replica = s.replica
		WHERE s.account_id = ? AND s.id < ? AND r.seen_at >= ? ORDER BY s.id DESC LIMIT ?`
	if table == "agent_tunnels" {
		q = `SELECT t.doc FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id JOIN agent_replicas r ON r.replica = s.replica
			WHERE t.account_id = ? AND t.id < ? AND r.seen_at >= ? ORDER BY t.id DESC LIMIT ?`
	}
	fresh := ep.FormatTime(time.Now().Add(-LiveTolerance))
	rows, err := s.r.QueryContext(ctx, s.d.rebind(q), account, beforeID, fresh, limit+1)
	if err != nil {
		return nil, false, s.classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, false, s.classify(err)
		}
		d, err := decode(res, body)
		if err != nil {
			return nil, false, err
		}
		docs = append(docs, d)
	}
	if err := rows.Err(); err != nil {
		return nil, false, s.classify(err)
	}
	if len(docs) > limit {
		docs, more = docs[:limit], true
	}
	return docs, more, s.complete(ctx, account, res, docs...)
}

// GetLive returns one online object of a live collection of the account, and the replica
// holding it; ep.NotFound when there is none.
func (s *Store) GetLive(ctx context.Context, res *ep.Resource, account, id string) (doc ep.Document, replica string, err error) {
	table, err := liveTable(res)
	if err != nil {
		return nil, "", err
	}
	if !storable(id) {
		return nil, "", ep.NotFound()
	}
	q := `SELECT s.doc, s.replica FROM agent_sessions s JOIN agent_replicas r ON r.replica = s.replica
		WHERE s.id = ? AND s.account_id = ? AND r.seen_at >= ?`
	if table == "agent_tunnels" {
		q = `SELECT t.doc, s.replica FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id JOIN agent_replicas r ON r.replica = s.replica
			WHERE t.id = ? AND t.account_id = ? AND r.seen_at >= ?`
	}
	var body []byte
	fresh := ep.FormatTime(time.Now().Add(-LiveTolerance))
	err = s.r.QueryRowContext(ctx, s.d.rebind(q), id, account, fresh).Scan(&body, &replica)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", ep.NotFound()
	}
	if err != nil {
		return nil, "", s.classify(err)
	}
	if doc, err = decode(res, body); err != nil {
		return nil, "", err
	}
	return doc, replica, s.complete(ctx, account, res, doc)
}
