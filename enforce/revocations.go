package enforce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// RevocationStore is where ended sessions are recorded for every replica (the store's
// session_revocations).
type RevocationStore interface {
	// RevokeSessions records that the sessions of subject in scope issued at or before at are
	// ended, until until.
	RevokeSessions(ctx context.Context, scope, subject string, at, until time.Time) error
	// SessionRevocations calls fn with each revocation recorded at or after since that has not
	// expired at now.
	SessionRevocations(ctx context.Context, since, now time.Time, fn func(scope, subject string, at, until time.Time)) error
}

// How the local view of revocations follows the store: it is read again at most every
// revocationRefresh, in the background, while sessions are checked (a revocation recorded by
// another replica takes effect here within about that); reads go back revocationOverlap before
// the latest revocation seen, so one recorded late or by a replica whose clock is behind is not
// missed; a view older than revocationStale (the store unreachable) is read again before a
// session is admitted, and a session is refused when that fails.
const (
	revocationRefresh = time.Second
	revocationOverlap = 2 * time.Minute
	revocationStale   = 30 * time.Second
	revocationPrune   = time.Minute
	// revocationWait bounds a read of the store that session checks wait for: a store that
	// does not answer refuses sessions after it rather than holding their requests.
	revocationWait = 5 * time.Second
)

// ErrRevocationsUnknown is returned when the revocations could not be read recently: a session
// is then refused rather than admitted unchecked.
var ErrRevocationsUnknown = errors.New("the ended sessions could not be read from the store")

// Revocations is a replica's view of the sessions ended by single logout: the store's records,
// in memory, so that checking a session costs two map lookups. One instance serves every route
// of the process, whatever the plans built since.
type Revocations struct {
	src  RevocationStore
	now  func() time.Time
	wait time.Duration // revocationWait; shorter in tests

	mu      sync.RWMutex
	m       map[string]revocation // scope + "\x00" + hashed subject
	loaded  time.Time             // when the view was last read whole from the store
	high    time.Time             // the latest revocation read
	pruned  time.Time
	reading sync.Mutex // one read of the store at a time
	pending atomic.Bool
}

type revocation struct{ at, until time.Time }

// NewRevocations returns a view of src's revocations, read when first needed.
func NewRevocations(src RevocationStore) *Revocations {
	return &Revocations{src: src, now: time.Now, wait: revocationWait, m: map[string]revocation{}}
}

// revocationKey is the map key of subject in scope; subjects are kept hashed, in the store too,
// so no NameID is stored in the clear.
func revocationKey(scope, hashed string) string { return scope + "\x00" + hashed }

func hashSubject(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return hex.EncodeToString(sum[:])
}

// Revoke ends the sessions of subject in scope issued up to now, until until, on every replica;
// this replica's view has it at once.
func (r *Revocations) Revoke(ctx context.Context, scope, subject string, until time.Time) error {
	at := r.now().Truncate(time.Second)
	hashed := hashSubject(subject)
	if err := r.src.RevokeSessions(ctx, scope, hashed, at, until); err != nil {
		return err
	}
	r.mu.Lock()
	r.merge(revocationKey(scope, hashed), revocation{at: at, until: until})
	r.mu.Unlock()
	return nil
}

// Revoked reports whether the session issued at issued, of any of subjects in scope, was ended.
// It fails with ErrRevocationsUnknown when the store could not be read recently.
func (r *Revocations) Revoked(ctx context.Context, scope string, issued time.Time, subjects ...string) (bool, error) {
	if err := r.fresh(ctx); err != nil {
		return false, err
	}
	now := r.now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, s := range subjects {
		if rev, ok := r.m[revocationKey(scope, hashSubject(s))]; ok && !issued.After(rev.at) && now.Before(rev.until) {
			return true, nil
		}
	}
	return false, nil
}

// fresh makes sure the view is recent enough: read at once when never read or stale (one read
// for all the checks waiting then; a check gives up after r.wait of its own), in the background
// when older than revocationRefresh.
func (r *Revocations) fresh(ctx context.Context) error {
	if r.stale() {
		ctx, cancel := context.WithTimeout(ctx, r.wait)
		defer cancel()
		if err := r.read(ctx, true); err != nil {
			return ErrRevocationsUnknown
		}
		return nil
	}
	r.mu.RLock()
	age := r.now().Sub(r.loaded)
	r.mu.RUnlock()
	if age > revocationRefresh && r.pending.CompareAndSwap(false, true) {
		go func() {
			defer r.pending.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), r.wait)
			defer cancel()
			_ = r.read(ctx, false)
		}()
	}
	return nil
}

// stale reports whether the view was never read, or not for revocationStale.
func (r *Revocations) stale() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.loaded.IsZero() || r.now().Sub(r.loaded) > revocationStale
}

// read merges the revocations recorded since the latest one seen (less the overlap) into the
// view, and drops the expired ones now and then. With ifStale it reads only when the view is
// still stale once it is this read's turn: the checks that waited for another's read of a stale
// view take that one.
func (r *Revocations) read(ctx context.Context, ifStale bool) error {
	r.reading.Lock()
	defer r.reading.Unlock()
	if ifStale && !r.stale() {
		return nil
	}
	r.mu.RLock()
	since := r.high
	r.mu.RUnlock()
	if !since.IsZero() {
		since = since.Add(-revocationOverlap)
	}
	start := r.now()
	type row struct {
		key string
		rev revocation
	}
	var rows []row
	err := r.src.SessionRevocations(ctx, since, start, func(scope, subject string, at, until time.Time) {
		rows = append(rows, row{revocationKey(scope, subject), revocation{at: at, until: until}})
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range rows {
		r.merge(x.key, x.rev)
		if x.rev.at.After(r.high) {
			r.high = x.rev.at
		}
	}
	r.loaded = start
	if start.Sub(r.pruned) > revocationPrune {
		for k, v := range r.m {
			if !start.Before(v.until) {
				delete(r.m, k)
			}
		}
		r.pruned = start
	}
	return nil
}

// merge keeps the later of each time of key; r.mu is held.
func (r *Revocations) merge(key string, rev revocation) {
	old, ok := r.m[key]
	if ok {
		if old.at.After(rev.at) {
			rev.at = old.at
		}
		if old.until.After(rev.until) {
			rev.until = old.until
		}
	}
	r.m[key] = rev
}
