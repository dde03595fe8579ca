// Package store persists edgeplane's documents with database/sql. There is one implementation;
// the SQLite and PostgreSQL differences live behind a small dialect seam (placeholders, error
// classification, connection setup), so every query is written once.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// dialect is what differs between database engines.
type dialect interface {
	name() string
	// remote reports whether the engine is a server reached over the network (PostgreSQL), where
	// each query costs a round trip and concurrent key lookups are worth combining into one;
	// otherwise it is a SQLite file in this process, written through one connection by the
	// committer, checkpointed by the checkpointer, with a read cache on its wal-index.
	remote() bool
	// rebind rewrites the ? placeholders of a query into the engine's syntax.
	rebind(q string) string
	// uniqueViolation reports whether err is a unique or primary key constraint failure.
	uniqueViolation(err error) bool
	// fkViolation reports whether err is a foreign key failure (a parent deleted concurrently).
	fkViolation(err error) bool
	// transient reports whether the engine aborted the transaction for a reason a retry cures
	// (a deadlock, a serialization failure).
	transient(err error) bool
	// unavailable reports whether err means the database cannot be reached at all.
	unavailable(err error) bool
	// ddl adapts a statement of the shared migrations to the engine.
	ddl(stmt string) string
	// forShare and forUpdate are the row-locking suffixes of a SELECT inside a write transaction;
	// empty where the engine serialises writers anyway.
	forShare() string
	forUpdate() string
	// serialLock is a statement that waits for, and holds until the transaction ends, a lock
	// named by one argument (an account id); empty where the engine serialises writers anyway.
	serialLock() string
	// nameLock is serialLock for a public name (a hostname, a wildcard, a TCP address): a bind
	// and a reservation of one name take turns on it (holds.go).
	nameLock() string
	// nameLockShared is nameLock in shared mode: it waits only for, and holds off only, those
	// who hold or wait for the name's lock in nameLock's (exclusive) mode.
	nameLockShared() string
	// lockMigrations serialises migrations across processes starting at once.
	lockMigrations(ctx context.Context, conn *sql.Conn) (unlock func(), err error)
}

// Options tune a store beyond what the DSN says.
type Options struct {
	// SecretKeys, when set, are the keys that encrypt secrets at rest (as EDGEPLANE_SECRET_KEY
	// would give them); otherwise that variable, else a key file next to a SQLite database.
	SecretKeys string
	// MaxConns caps the PostgreSQL connection pool of this process (default DefaultPGMaxConns).
	MaxConns int
	// Durability says what an acknowledged write survives (see Durability); the zero value is
	// DurabilityNormal.
	Durability Durability
	// MaxBatch caps how many write transactions SQLite commits together (group commit); 0 means
	// DefaultMaxBatch and 1 turns group commit off. PostgreSQL ignores it.
	MaxBatch int
	// NoReadCache turns the SQLite read cache off (readcache.go), for comparisons.
	NoReadCache bool
	// MustExist refuses a SQLite database file that does not exist yet instead of creating it
	// (and its key file): for the commands that only make sense on an existing database, where a
	// mistyped path would otherwise succeed on a new, empty one. PostgreSQL ignores it.
	MustExist bool
	// RestoreKeys are keys (in the format of a key file) that decrypt the secrets of a backup
	// given to Import besides the store's own keys: Import then encrypts every restored secret
	// again under the store's first key, in the same transaction, so the database needs only its
	// own key afterwards. Nothing else uses them.
	RestoreKeys string
}

// Durability is what an acknowledged write survives on SQLite.
type Durability int

const (
	// DurabilityNormal (WAL with synchronous=NORMAL): every acknowledged write survives a crash
	// of the process; a power loss or an operating system crash may lose the writes of the last
	// moments before it (never the database's consistency).
	DurabilityNormal Durability = iota
	// DurabilityFull (WAL with synchronous=FULL): every acknowledged write has been flushed to
	// the disk (fsync) and survives a power loss too, as far as the disk honours the flush.
	DurabilityFull
)

// String is the name of the durability, as the command line spells it.
func (d Durability) String() string {
	if d == DurabilityFull {
		return "full"
	}
	return "normal"
}

// ParseDurability reads "normal" or "full".
func ParseDurability(s string) (Durability, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "normal":
		return DurabilityNormal, nil
	case "full":
		return DurabilityFull, nil
	}
	return 0, fmt.Errorf("durability must be normal or full, got %q", s)
}

// Store is the database behind one edgeplane process. It is safe for concurrent use.
type Store struct {
	d dialect
	// w serves every write transaction; r serves reads. On SQLite w has a single connection (one
	// writer, no lock upgrades) and r is a read-only pool; on engines with real concurrency both
	// may be the same pool.
	w, r *sql.DB
	q    queries
	// rd runs the object code's reads. (The writer's prepared statements belong to the
	// committer, which holds the writer's connection.)
	rd *reader
	// commit runs the write transactions of a SQLite store with group commit; nil on PostgreSQL,
	// where every write transaction runs on its own connection of the pool.
	commit *committer
	// combine combines the key lookups of concurrent requests into one query on PostgreSQL
	// (combine.go); nil on SQLite.
	combine *combiner
	// ckpt runs the WAL checkpoints of a SQLite store (checkpoint.go); nil on PostgreSQL, and
	// where the database is not in WAL mode.
	ckpt *checkpointer
	// settings are the deployment settings handed to rules (SetSettings); nil means defaults.
	settings atomic.Pointer[ep.Settings]
	// seal encrypts secrets at rest (store/secrets.go).
	seal *sealer
	// resealImport says Import encrypts the secrets it restores again under the first key (the
	// store was opened with Options.RestoreKeys).
	resealImport bool
	// cache answers authentication and reads by id while the database is unchanged (SQLite;
	// nil on PostgreSQL and when Options.NoReadCache is set): readcache.go.
	cache *readCache
	// feed announces committed configuration changes to the data plane (feed.go); notify
	// carries them to other replicas on PostgreSQL (notify.go), nil on SQLite.
	feed   feed
	notify *notifier
	// sqlitePath and readDSN are where a SQLite store's database is and how its readers open it.
	sqlitePath, readDSN string
	// deletes counts delete transactions (cascade.go).
	deletes deleteCounters
	// peerAddrs holds the link address each replica of this process announced
	// (AnnounceReplica), written with its row whenever the row is made again.
	peerAddrs sync.Map
	// onceSweep and revocationSweep pace the deletion of expired used_once and
	// session_revocations rows (once.go).
	onceSweep, revocationSweep sweeper
	// closeOnce and closeErr make Close safe to call again: a test, or a process shutting down
	// on two paths at once, may close a store that is already closed, and the second call
	// returns the first one's result instead of closing the checkpointer's channel twice.
	closeOnce sync.Once
	closeErr  error
}

// Open connects to the database named by dsn and applies pending migrations. dsn is a file path,
// "sqlite:PATH", or a postgres:// URL.
func Open(ctx context.Context, dsn string) (*Store, error) {
	return OpenWith(ctx, dsn, Options{})
}

// IsPostgres reports whether dsn names a PostgreSQL database.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dsn string, opts Options) (*Store, error) {
	var (
		s   *Store
		err error
	)
	if !IsPostgres(dsn) {
		// Before the key file is looked for: a missing directory or database is reported as
		// such, and nothing is created for a database that is refused.
		if err := checkSQLitePath(strings.TrimPrefix(dsn, "sqlite:"), opts.MustExist); err != nil {
			return nil, err
		}
	}
	if opts.RestoreKeys != "" {
		// Checked before anything is opened or created.
		if err := (&sealer{}).withRestoreKeys(opts.RestoreKeys); err != nil {
			return nil, err
		}
	}
	seal, err := openSealer(dsn, opts)
	noKeyFile := errors.Is(err, errNoKeyFile)
	if err != nil && !noKeyFile {
		return nil, err
	}
	switch {
	case IsPostgres(dsn):
		s, err = openPostgres(ctx, dsn, opts)
	default:
		s, err = openSQLite(strings.TrimPrefix(dsn, "sqlite:"), opts.Durability)
	}
	if err != nil {
		return nil, err
	}
	s.seal = seal
	s.rd = &reader{db: s.r}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if noKeyFile {
		if s.seal, err = s.newKeyFile(ctx, dsn); err != nil {
			s.Close()
			return nil, err
		}
	}
	if opts.RestoreKeys != "" {
		if err := s.seal.withRestoreKeys(opts.RestoreKeys); err != nil {
			s.Close()
			return nil, err
		}
		s.resealImport = true
	}
	s.q = prepare(s.d)
	if s.d.remote() {
		s.combine = newCombiner(s.rd, &s.q)
	} else {
		// Without a wal-index (the database could not switch to WAL) there is nothing to
		// checkpoint, and the writer keeps SQLite's own checkpoints.
		s.ckpt, _ = openCheckpointer(ctx, s.sqlitePath, sqliteDSN(s.sqlitePath, opts.Durability, nil))
		if !opts.NoReadCache {
			// Without a wal-index to ask (the database could not switch to WAL), every read
			// goes to the database, as it always may.
			s.cache, _ = openReadCache(ctx, s.sqlitePath, s.readDSN)
		}
		if s.rd.stmts, err = prepareAll(ctx, s.r, s.q.reads()); err == nil {
			s.commit, err = newCommitter(committerEnv{w: s.w, q: &s.q, ckpt: s.ckpt, cache: s.cache, classify: s.classify}, opts.MaxBatch)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("store: prepare statements: %w", err)
		}
		s.rd.noCancel = true
	}
	// What the migrations left for code with the keys (docsecrets.go) or the estimates
	// (policy_costs.go).
	if err := s.runPendingTasks(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	// Deletes that a stopped process began but did not finish (cascade.go).
	if err := s.finishPendingDeletes(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: finish pending deletes: %w", err)
	}
	return s, nil
}

// Close closes the database cleanly, after the write transactions in progress. Calling it again
// does nothing and returns the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	if s.commit != nil {
		s.commit.stop()
	}
	s.ckpt.close()
	s.cache.close()
	s.combine.close()
	s.notify.close()
	if s.rd != nil {
		_ = s.rd.stmts.close()
	}
	errW := s.w.Close()
	if s.r != s.w {
		if err := s.r.Close(); err != nil {
			return err
		}
	}
	return errW
}

// PoolStats returns the statistics of the store's connection pools, by name, for metrics.
func (s *Store) PoolStats() map[string]sql.DBStats {
	if s.r == s.w {
		return map[string]sql.DBStats{"pool": s.w.Stats()}
	}
	return map[string]sql.DBStats{"writer": s.w.Stats(), "reader": s.r.Stats()}
}

// ConnLimit is how many requests may use the database at once without waiting inside
// database/sql for a connection: the pool size on PostgreSQL, where every request holds a pooled
// connection while it queries; 0 on SQLite, where writes queue in the committer and reads of
// unchanged data are answered from memory. database/sql hands a freed connection to a random
// waiter, so under more concurrent requests than connections some wait far longer than others;
// the server queues requests beyond this limit in arrival order instead (server.Server.gate).
func (s *Store) ConnLimit() int {
	if s.commit != nil {
		return 0
	}
	return s.w.Stats().MaxOpenConnections
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.classify(s.r.PingContext(ctx))
}

// errRetry makes inTx run the function again: a compare-and-swap lost, or a unique claim raced.
var errRetry = errors.New("store: retry")

const maxAttempts = 12

// inTx runs fn in a write transaction, committing when it returns nil and retrying when it
// returns errRetry. fn must do its database work with the context it is given: on SQLite it runs
// in the committer's batch (see writer.go), where ctx has the request's values but not its
// cancellation.
func (s *Store) inTx(ctx context.Context, fn txFunc) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			// Jittered backoff, so racing writers do not collide again in lockstep.
			select {
			case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(5*time.Millisecond)))):
			case <-ctx.Done():
				return s.classify(ctx.Err())
			}
		}
		if err = s.runTx(ctx, fn); !errors.Is(err, errRetry) {
			return err
		}
	}
	return fmt.Errorf("store: gave up after %d conflicting attempts", maxAttempts)
}

// takeTurns makes an update of a collection whose documents are ep.SerialUpdater wait for the
// other such updates of the account that are in progress, and hold them off until it ends. It
// runs first in the transaction, before any row lock, so the turns cannot deadlock with row
// locks; every statement after it sees what the previous turns committed (PostgreSQL runs each
// statement of a READ COMMITTED transaction on a fresh snapshot).
func (s *Store) takeTurns(ctx context.Context, tx *wtx, account string, res *ep.Resource) error {
	q := s.d.serialLock()
	if q == "" {
		return nil
	}
	if _, ok := res.New().(ep.SerialUpdater); !ok {
		return nil
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(q), account)
	return s.classify(err)
}

// runTx runs fn in one write transaction: through the committer on SQLite, on a connection of
// the pool otherwise.
func (s *Store) runTx(ctx context.Context, fn txFunc) error {
	if s.commit != nil {
		return s.commit.do(ctx, fn)
	}
	return s.tryTx(ctx, func(tx *sql.Tx) error { return fn(ctx, &wtx{db: tx}) })
}

// connTx runs fn in one transaction on a given connection.
func (s *Store) connTx(ctx context.Context, conn *sql.Conn, fn func(tx *sql.Tx) error) (err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err = fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s *Store) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.classify(err)
	}
	// Rolled back on every way out but a commit, a panic of fn included (after a commit the
	// rollback is a no-op).
	defer func() { _ = tx.Rollback() }()
	if err = fn(tx); err != nil {
		return err
	}
	return s.classify(tx.Commit())
}

// classify turns driver errors that the caller should see into *ep.Error: an unreachable database
// is a 503 that says so; everything else stays internal.
func (s *Store) classify(err error) error {
	if err == nil {
		return nil
	}
	var e *ep.Error
	if errors.As(err, &e) || errors.Is(err, errRetry) {
		return err
	}
	if s.d.fkViolation(err) {
		return errRetry // a parent or owner was deleted concurrently: the retry reports it properly
	}
	if s.d.transient(err) {
		return errRetry // a deadlock or serialization failure: the engine rolled back; start over
	}
	if s.d.unavailable(err) || errors.Is(err, context.DeadlineExceeded) {
		return ep.Unavailable()
	}
	return err
}
