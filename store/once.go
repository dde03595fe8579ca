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

// lastOnceSweep is when this process last swept expired rows (Unix nanoseconds). It is per
// process, not per store: a process has one store, and several stores in one process (tests)
// only sweep less often.
var lastOnceSweep atomic.Int64

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
	s.sweepOnceMaybe(ctx, now)
	return fresh, nil
}

// sweepOnceMaybe deletes expired rows when the last sweep of this process is onceSweepEvery
// old. Its failure is not the caller's: the rows stay for the next sweep.
func (s *Store) sweepOnceMaybe(ctx context.Context, now time.Time) {
	last := lastOnceSweep.Load()
	if now.UnixNano()-last < int64(onceSweepEvery) || !lastOnceSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	if n, err := s.sweepOnce(ctx, now); err == nil && n >= onceSweepBatch {
		lastOnceSweep.Store(0) // a backlog: the next call sweeps again
	}
}

// sweepOnce deletes at most onceSweepBatch rows expired at now, oldest first, and says how many.
func (s *Store) sweepOnce(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM used_once WHERE (scope, id) IN
			(SELECT scope, id FROM used_once WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`),
			ep.FormatTime(now), onceSweepBatch)
		if err != nil {
			return s.classify(err)
		}
		n, err = res.RowsAffected()
		return s.classify(err)
	})
	return n, err
}
