package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// Who holds a public name. A hostname (or a TCP address) is held by at most one account at a
// time, across every replica:
//
//   - the account whose reservation covers it (the exact name's, else the wildcard's one level
//     up; for an address, its reserved address), whatever is online;
//   - else the account whose agents are online on it, on any replica (a name under a service
//     domain, or a random TCP port): the tunnel rows of replicas alive within LiveTolerance.
//
// A bind records its tunnel row only when no other account holds its name (PutAgentTunnel), and
// a reservation is refused while another account's agent is online on a name it would cover
// (txView.OnlineElsewhere). Both take the name's lock first (the wildcard's too, for a
// hostname), so on PostgreSQL a bind and a reservation of one name racing on two replicas take
// turns and the second sees the first: exactly one of them wins. SQLite has one writer.

// ErrNameReserved is returned when a bind's name or address is covered by another account's
// reservation.
var ErrNameReserved = errors.New("store: the name is reserved by another account")

// ErrNameOnline is returned when an agent of another account is online on a bind's name or
// address, on this replica or another.
var ErrNameOnline = errors.New("store: the name is online for another account")

// isAddr reports whether a held name is a TCP address (host:port) rather than a hostname.
func isAddr(name string) bool { return strings.Contains(name, ":") }

// zoneOf is the domain a wildcard one level above the hostname covers ("" for an address or a
// name of one label).
func zoneOf(name string) string {
	if isAddr(name) {
		return ""
	}
	_, parent, _ := strings.Cut(name, ".")
	return parent
}

// lockName takes a name's lock until the transaction ends (PostgreSQL; SQLite's single writer
// needs none), shared or exclusive.
func (s *Store) lockName(ctx context.Context, tx *wtx, name string, shared bool) error {
	q := s.d.nameLock()
	if shared {
		q = s.d.nameLockShared()
	}
	if q == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(q), name)
	return s.classify(err)
}

// holdName checks, under the name's locks, that the account may record a tunnel online on
// name: no other account's reservation covers it, and, when none does, no other account's
// agent is online on it.
func (s *Store) holdName(ctx context.Context, tx *wtx, account, name string) error {
	namespace, claims := ep.ClaimAddr, []string{name}
	if !isAddr(name) {
		namespace, claims = ep.ClaimDomain, ep.DomainClaimsFor(name)
	}
	// The name before its wildcard, always in this order: no two binds wait on each other. The
	// name's lock is exclusive: a bind or a reservation of the same name takes turns with this
	// one. The wildcard's is shared: a reservation of the wildcard (or a bind of it), which
	// takes it exclusive, still takes turns with every bind under it, but binds of different
	// names under one zone (every agent's name under a service domain, of every account) do not
	// wait for each other: neither reads what the other writes.
	for i, c := range claims {
		if err := s.lockName(ctx, tx, c, i > 0); err != nil {
			return err
		}
	}
	for _, c := range claims {
		var holder, object string
		err := tx.QueryRowContext(ctx, s.q.claimGet, namespace, c).Scan(&holder, &object)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return s.classify(err)
		}
		if holder == account {
			return nil // the account's own reservation: it holds the name
		}
		return ErrNameReserved
	}
	online, err := s.onlineElsewhere(ctx, tx, account, name)
	if err != nil {
		return err
	}
	if online {
		return ErrNameOnline
	}
	return nil
}

// The online tunnels of other accounts on a name, and under a zone where no exact reservation
// covers the name (a wildcard reservation of the zone would cover it). Online: the session's
// replica refreshed its row within LiveTolerance.
const (
	onlineOnName = `SELECT 1 FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id
		JOIN agent_replicas r ON r.replica = s.replica
		WHERE t.name = ? AND t.account_id <> ? AND r.seen_at >= ? LIMIT 1`
	onlineInZone = `SELECT 1 FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id
		JOIN agent_replicas r ON r.replica = s.replica
		WHERE t.zone = ? AND t.account_id <> ? AND r.seen_at >= ?
		AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.namespace = ? AND c.value = t.name) LIMIT 1`
)

// onlineElsewhere reports whether an agent of an account other than account is online on name,
// or, for a wildcard "*.zone", on a name directly under zone that no exact reservation covers.
func (s *Store) onlineElsewhere(ctx context.Context, tx *wtx, account, name string) (bool, error) {
	fresh := ep.FormatTime(time.Now().Add(-LiveTolerance))
	var one int
	var err error
	if zone, ok := strings.CutPrefix(name, "*."); ok {
		err = tx.QueryRowContext(ctx, s.d.rebind(onlineInZone), zone, account, fresh, ep.ClaimDomain).Scan(&one)
	} else {
		err = tx.QueryRowContext(ctx, s.d.rebind(onlineOnName), name, account, fresh).Scan(&one)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, s.classify(err)
	}
	return true, nil
}

// OnlineElsewhere reports whether an agent of another account is online, on any replica, on
// name (a hostname or a TCP address), or for "*.zone" on a name directly under zone that no
// exact reservation covers. It takes the name's lock first and holds it until the transaction
// ends, so a bind of the name on another replica either committed before (and is seen here) or
// waits and then sees this transaction's reservation.
func (v *txView) OnlineElsewhere(name string) (bool, error) {
	name = strings.ToLower(name)
	if !storable(name) {
		return false, nil
	}
	if err := v.s.lockName(v.ctx, v.tx, name, false); err != nil {
		return false, err
	}
	return v.s.onlineElsewhere(v.ctx, v.tx, v.account, name)
}
