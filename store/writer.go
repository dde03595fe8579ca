package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Group commit (SQLite).
//
// SQLite has one writer at a time, and under synchronous=FULL every commit waits for an fsync.
// Committing each request's transaction on its own makes the fsync the ceiling of the write
// rate. Instead, the write transactions of concurrent requests are handed to one goroutine, the
// committer, which runs the requests that are waiting in one SQLite transaction, each inside a
// savepoint of its own, and commits them together: one commit, one fsync, for the whole batch.
// Nobody waits on purpose: while one batch commits, the next one gathers, so a lone request is
// committed at once and a busy server commits in larger batches.
//
// What each request sees is what it would see committing alone, in the order the committer runs
// them: every member reads what earlier members of its batch wrote, and the database's
// constraints apply exactly as they would one transaction at a time.
//
// Error isolation: a member whose function fails is rolled back to its savepoint and answered
// with its own error; the others go on. If the batch cannot continue at all (the rollback to a
// savepoint fails, which happens when SQLite has rolled back the whole transaction itself, as it
// does on a full disk or an I/O error) or the commit fails, nothing of the batch was written,
// and every member not yet answered runs again alone, in a transaction of its own, and gets the
// answer of that transaction. So one failing request never fails another.
//
// Durability: a request is answered only after the commit of its batch has returned, which under
// synchronous=FULL means after the fsync; nothing is acknowledged that a crash (or, under FULL, a
// power loss) could take back.
//
// Member functions run with their request's values but without its cancellation: interrupting a
// statement would make SQLite roll back the whole batch. A request whose context has ended
// before its turn is answered with that and not run; a started member finishes (its statements
// are short, indexed reads and writes).

// DefaultMaxBatch is the default Options.MaxBatch: enough for every request of a busy server,
// small enough that one batch holds the write lock only briefly.
const DefaultMaxBatch = 128

// errStoreClosed answers writes that arrive after Close.
var errStoreClosed = errors.New("store: closed")

// Transaction statements of the committer's connection, and the savepoint statements of a batch
// member.
const (
	txBegin    = `BEGIN IMMEDIATE`
	txCommit   = `COMMIT`
	txRollback = `ROLLBACK`
	spBegin    = `SAVEPOINT member`
	spRelease  = `RELEASE member`
	spRollback = `ROLLBACK TO member`
)

type txFunc func(ctx context.Context, tx *wtx) error

// txRequest is one write transaction waiting for the committer.
type txRequest struct {
	ctx  context.Context
	fn   txFunc
	done chan error // buffered: the committer never blocks on an answer
}

// panicError carries a panic of a member function back to its request's goroutine, which
// panics again there (and the HTTP layer turns it into a 500 as before).
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic in a write transaction: %v", p.value) }

// committer runs the write transactions of a SQLite store.
type committer struct {
	env      committerEnv
	max      int
	queue    chan *txRequest // unbuffered: a request is either taken by the committer or not sent
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// batches and requests count what the loop took, for CommitStats.
	batches, requests atomic.Uint64
	// conn is the writer pool's one connection, which the committer holds for as long as it
	// runs, and stmts are the statements prepared on it, BEGIN IMMEDIATE and COMMIT included.
	// The committer runs those two itself instead of through a *sql.Tx, which has the driver
	// prepare both again for every transaction and starts a goroutine per transaction to watch
	// its context: ~4 µs per row of a batch of six creates (about an eighth of the committer's
	// serial time). Only the committer's goroutine uses them (and tests, while it is idle).
	conn  *sql.Conn
	stmts stmtSet
}

// committerEnv is what the committer needs of its store: the writer pool, the prepared
// queries, the checkpointer to nudge and the read cache to carry across commits (each may be
// nil where the store has none), and how the store classifies an engine's errors.
type committerEnv struct {
	w        *sql.DB
	q        *queries
	ckpt     *checkpointer
	cache    *readCache
	classify func(error) error
}

// CommitStats counts the write transactions of a SQLite store and the batches the committer ran
// them in: Requests / Batches is the average batch size. Both are zero on PostgreSQL.
type CommitStats struct {
	Batches, Requests uint64
}

// CommitStats returns the group commit counters since the store opened.
func (s *Store) CommitStats() CommitStats {
	if s.commit == nil {
		return CommitStats{}
	}
	return CommitStats{Batches: s.commit.batches.Load(), Requests: s.commit.requests.Load()}
}

func newCommitter(env committerEnv, maxBatch int) (*committer, error) {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	c := &committer{env: env, max: maxBatch, queue: make(chan *txRequest), quit: make(chan struct{}), done: make(chan struct{})}
	if err := c.connect(); err != nil {
		return nil, err
	}
	go c.loop()
	return c, nil
}

// connect takes the writer pool's connection and prepares the write statements on it.
func (c *committer) connect() error {
	ctx := context.Background()
	conn, err := c.env.w.Conn(ctx)
	if err != nil {
		return err
	}
	// The checkpointer copies the WAL back beside the committer; the committer's own checkpoint
	// is only its backstop (checkpoint.go).
	auto := syncPages // SQLite's default
	if c.env.ckpt != nil {
		auto = backstopPages
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA wal_autocheckpoint = %d`, auto)); err != nil {
		_ = conn.Close()
		return err
	}
	stmts, err := prepareAll(ctx, conn, append(c.env.q.writes(), txBegin, txCommit, txRollback, spBegin, spRelease, spRollback))
	if err != nil {
		_ = conn.Close()
		return err
	}
	c.conn, c.stmts = conn, stmts
	return nil
}

// disconnect closes the statements and hands the connection back to the pool, when the
// committer stops.
func (c *committer) disconnect() {
	if c.conn != nil {
		_ = c.stmts.close()
		_ = c.conn.Close()
		c.conn, c.stmts = nil, nil
	}
}

// drop forgets a connection that database/sql has closed already. Its statements are not closed:
// the driver's connection is gone, and closing a statement of it crashes the SQLite driver.
func (c *committer) drop() {
	c.conn, c.stmts = nil, nil
}

// lost reports whether err says the connection itself is gone; the next transaction then takes
// a new one.
func lost(err error) bool {
	return errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn)
}

// begin starts a write transaction (BEGIN IMMEDIATE: it holds the write lock from its start, so
// no statement of it waits for a lock upgrade). It tries twice: a connection that database/sql
// has given up on is replaced, and a transaction left open (by a ROLLBACK that failed) is ended,
// so that one failure does not fail every later write.
func (c *committer) begin() (*wtx, error) {
	err := errors.New("store: no writer connection")
	for attempt := 0; attempt < 2 && err != nil; attempt++ {
		if c.conn == nil {
			if err = c.connect(); err != nil {
				continue
			}
		}
		if _, err = c.stmts[txBegin].Exec(); err != nil {
			if lost(err) {
				c.drop()
			} else {
				c.rollback()
			}
		}
	}
	if err != nil {
		return nil, c.env.classify(err)
	}
	return &wtx{db: c.conn, stmts: c.stmts, ws: c.env.cache.beginWrite(c.env.q)}, nil
}

// rollback ends the transaction on the committer's connection without writing anything of it.
// Where none is open (SQLite can end one itself on an I/O error) it fails, harmlessly.
func (c *committer) rollback() {
	if c.conn == nil {
		return // dropped: nothing is open on a connection the pool has closed
	}
	if _, err := c.stmts[txRollback].Exec(); lost(err) {
		c.drop()
	}
}

// stop ends the committer after the batch in progress; later writes get errStoreClosed. It may be
// called more than once.
func (c *committer) stop() {
	c.stopOnce.Do(func() { close(c.quit) })
	<-c.done
}

// do runs fn in a write transaction and returns once that transaction has committed (nil) or
// has been rolled back (fn's error, or the error that prevented the commit).
func (c *committer) do(ctx context.Context, fn txFunc) error {
	if err := ctx.Err(); err != nil {
		return c.env.classify(err)
	}
	r := &txRequest{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case c.queue <- r:
	case <-c.quit:
		return errStoreClosed
	case <-ctx.Done():
		return c.env.classify(ctx.Err()) // never handed over: nothing was written
	}
	// Once handed over, the committer always answers, and its answer is the truth about the
	// write, so it is awaited even if ctx ends meanwhile.
	err := <-r.done
	var p *panicError
	if errors.As(err, &p) {
		panic(fmt.Sprintf("%v\n\nstack of the write transaction:\n%s", p.value, p.stack))
	}
	return err
}

func (c *committer) loop() {
	defer close(c.done)
	defer c.disconnect()
	batch := make([]*txRequest, 0, c.max)
	for {
		var ok bool
		if batch, ok = gather(batch, c.queue, c.quit, c.max, true); !ok {
			return
		}
		c.batches.Add(1)
		c.requests.Add(uint64(len(batch)))
		if len(batch) == 1 {
			batch[0].done <- c.alone(batch[0])
		} else {
			c.together(batch)
		}
		clear(batch)
	}
}

// alone runs one request in a transaction of its own.
func (c *committer) alone(r *txRequest) error {
	if err := r.ctx.Err(); err != nil {
		return c.env.classify(err)
	}
	t, err := c.begin()
	if err != nil {
		return err
	}
	if err := c.call(r, t); err != nil {
		c.rollback()
		return err
	}
	return c.commit(t.ws)
}

// commit commits the transaction, carrying the read cache across it (readcache.go).
func (c *committer) commit(ws *writeSet) error {
	ws.committing()
	_, err := c.stmts[txCommit].Exec()
	if err != nil {
		// A COMMIT that fails can leave the transaction open (SQLite keeps it on SQLITE_BUSY):
		// end it, so that the next BEGIN starts clean and nothing of it is written later.
		c.rollback()
	}
	ws.settle(err == nil)
	if err == nil {
		c.env.ckpt.nudge()
	}
	return c.env.classify(err)
}

// together runs the requests in one transaction, each in a savepoint, and commits them at once.
//
// A member's savepoint is opened lazily, by its first write (wtx.ExecContext): a member that
// fails before writing anything (a lookup that finds nothing, a validation rule) needs none, and
// neither does one whose only write is its last (wtx.ExecLast), like a create of a plain object.
// A member that succeeds releases it (leaving savepoints open made every later page write check
// them all, which cost more than the RELEASE).
func (c *committer) together(batch []*txRequest) {
	ctx := context.Background()
	tx, err := c.begin()
	if err != nil {
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	ok := make([]*txRequest, 0, len(batch))
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- c.env.classify(err)
			continue
		}
		t := &wtx{db: tx.db, stmts: tx.stmts, member: true, ws: tx.ws}
		mark := tx.ws.mark()
		if err := c.call(r, t); err != nil {
			tx.ws.forget(mark) // none of its inserts will be committed
			if t.bare {
				// It wrote without a savepoint (ExecLast) and failed afterwards: its write
				// cannot be taken back alone.
				c.abandon(append(ok, batch[i:]...))
				return
			}
			if t.saved {
				if _, rbErr := t.exec(ctx, spRollback); rbErr != nil {
					// SQLite rolled the whole transaction back itself (a full disk, an I/O
					// error): start over without the batch.
					c.abandon(append(ok, batch[i:]...))
					return
				}
			}
			r.done <- err // nothing of it will be written
			continue
		}
		if t.saved {
			if _, err := t.exec(ctx, spRelease); err != nil {
				c.abandon(append(ok, batch[i:]...))
				return
			}
		}
		ok = append(ok, r)
	}
	if err := c.commit(tx.ws); err != nil {
		// Nothing of the batch was written: each member gets the answer of its own transaction.
		for _, r := range ok {
			r.done <- c.alone(r)
		}
		return
	}
	for _, r := range ok {
		r.done <- nil
	}
}

// abandon rolls the batch back and runs every request that has no answer yet alone.
func (c *committer) abandon(pending []*txRequest) {
	c.rollback()
	for _, r := range pending {
		r.done <- c.alone(r)
	}
}

// call runs a member's function with its request's values but not its cancellation, turning a
// panic into a panicError for the request's goroutine.
func (c *committer) call(r *txRequest, t *wtx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return r.fn(context.WithoutCancel(r.ctx), t)
}
