package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// Values used once (migration 0013): the saml module records the id of every assertion it
// accepts here, so that a captured answer cannot sign anyone in again, on this replica or any
// other, while it could still pass every other check.

const (
	// onceSweepEvery is how often at most UseOnce deletes expired rows, so the table holds about
	// the values of the last validity period and cannot grow without bound.
	onceSweepEvery = time.Minute
	// onceSweepBatch bounds the rows one sweep deletes, so a sweep is a short transaction
	// whatever the backlog; a full batch lets the next call sweep again at once.
	onceSweepBatch = 1000
)

// sweeper paces the deletion of one table's expired rows by one store: UseOnce and
// RevokeSessions sweep their table as they write, at most once every onceSweepEvery (sooner
// while a backlog remains), so the table holds about the rows of the last validity period.
type sweeper struct {
	// last is when the last sweep began (Unix nanoseconds); 0 lets the next call sweep.
	last atomic.Int64
}

// The tables swept, each with its primary key's columns.
const (
	usedOnceTable    = "used_once"
	usedOnceKey      = "scope, id"
	revocationsTable = "session_revocations"
	revocationsKey   = "scope, subject"
)

// sweepMaybe deletes a batch of table's rows expired at now when w says a sweep is due (key is
// the table's primary key). Its failure is not the caller's: the rows stay for the next sweep.
func (s *Store) sweepMaybe(ctx context.Context, w *sweeper, table, key string, now time.Time) {
	last := w.last.Load()
	if now.UnixNano()-last < int64(onceSweepEvery) || !w.last.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	if n, err := s.sweepExpired(ctx, table, key, now); err == nil && n >= onceSweepBatch {
		w.last.Store(0) // a backlog: the next call sweeps again
	}
}

// sweepExpired deletes at most onceSweepBatch of table's rows expired at now, oldest first, and
// says how many.
func (s *Store) sweepExpired(ctx context.Context, table, key string, now time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM `+table+` WHERE (`+key+`) IN
			(SELECT `+key+` FROM `+table+` WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`),
			ep.FormatTime(now), onceSweepBatch)
		if err != nil {
			return s.classify(err)
		}
		n, err = res.RowsAffected()
		return s.classify(err)
	})
	return n, err
}

// UseOnce records that id is used in scope until expires, atomically on every replica: fresh is
// true for the one call that finds it unused (never recorded, or recorded with an expiry now
// past), false for every other call until expires. The id is stored as hex(sha256(id)), so an id
// of any length (one chosen by an identity provider) makes a short key. An error means nothing is
// known: the caller must not take the value as unused.
func (s *Store) UseOnce(ctx context.Context, scope, id string, expires time.Time) (fresh bool, err error) {
	sum := sha256.Sum256([]byte(id))
	key := hex.EncodeToString(sum[:])
	now := time.Now()
	// Times are kept to the second: the expiry is rounded up so a value is never forgotten early.
	until := ep.FormatTime(expires.Add(time.Second - time.Nanosecond))
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		// An existing row counts as absent once expired: the upsert takes its place then, and
		// leaves it (no row affected) while it is still in force. Concurrent calls serialise on
		// the primary key, so exactly one of them affects a row.
		res, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO used_once (scope, id, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (scope, id) DO UPDATE SET expires_at = excluded.expires_at WHERE used_once.expires_at <= ?`),
			scope, key, until, ep.FormatTime(now))
		if err != nil {
			return s.classify(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return s.classify(err)
		}
		fresh = n == 1
		return nil
	})
	if err != nil {
		return false, err
	}
	s.sweepMaybe(ctx, &s.onceSweep, usedOnceTable, usedOnceKey, now)
	return fresh, nil
}
