package store

import (
	"context"
	"database/sql"
	"errors"
)

// Prepared statements. database/sql prepares the SQL of every call that is given as a string
// again, and the SQLite driver then parses it on every call; a statement prepared once per pool
// is parsed once per connection and reused (for SQLite this was about a third of the CPU time of
// a GET). PostgreSQL's driver keeps a statement cache of its own, so there the plain calls are
// used.

// stmtSet holds the statements of one pool, prepared when the store opens. It is never changed
// afterwards, so it needs no lock; a query not in it runs unprepared.
type stmtSet map[string]*sql.Stmt

// preparer is a pool (*sql.DB) or one connection of it (*sql.Conn).
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// prepareAll prepares every query on db. Preparing at open, not on first use, means no request
// ever waits for a connection just to prepare.
func prepareAll(ctx context.Context, db preparer, queries []string) (stmtSet, error) {
	set := stmtSet{}
	for _, q := range queries {
		if _, ok := set[q]; ok {
			continue
		}
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			set.close()
			return nil, err
		}
		set[q] = st
	}
	return set, nil
}

func (set stmtSet) close() error {
	var errs []error
	for _, st := range set {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// querier is what the object code reads and writes through: the read pool (reader) or a write
// transaction (wtx).
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// reader runs queries on the read pool through its prepared statements.
//
// On SQLite, reads run without their context's cancellation (but with its values): a read is an
// indexed lookup or a page of at most 101 rows and never waits for a writer in WAL mode, so
// there is nothing to interrupt, and a cancellable context costs every query two goroutines (the
// driver's interrupt watcher and database/sql's) and a progress handler, a sizeable share of a
// GET. A request that times out still gets its 503 from the layers that wait on its context.
type reader struct {
	db       *sql.DB
	stmts    stmtSet
	noCancel bool
}

func (r *reader) ctx(ctx context.Context) context.Context {
	if r.noCancel {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (r *reader) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := r.stmts[q]; st != nil {
		return st.QueryRowContext(r.ctx(ctx), args...)
	}
	return r.db.QueryRowContext(r.ctx(ctx), q, args...)
}

func (r *reader) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := r.stmts[q]; st != nil {
		return st.QueryContext(r.ctx(ctx), args...)
	}
	return r.db.QueryContext(r.ctx(ctx), q, args...)
}

func (r *reader) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := r.stmts[q]; st != nil {
		return st.ExecContext(ctx, args...)
	}
	return r.db.ExecContext(ctx, q, args...)
}

// wtx is a write transaction as the store's code sees it: its connection's queries, through the
// statements prepared on that connection where there are any. Every statement that writes must
// go through ExecContext (or PrepareContext): inside a group commit batch, the first one opens
// the member's savepoint (see writer.go).
type wtx struct {
	// db is the transaction's connection: a *sql.Tx on PostgreSQL, the committer's *sql.Conn
	// inside its BEGIN IMMEDIATE on SQLite. stmts are prepared on that same connection (SQLite)
	// or nil.
	db interface {
		querier
		preparer
	}
	stmts stmtSet
	// member is set while a member of a batch runs; saved once its savepoint is open; bare once
	// it has written without one (ExecLast).
	member, saved, bare bool
	// ws records what the transaction writes, for the read cache (nil without one).
	ws *writeSet
}

func (t *wtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := t.stmts[q]; st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.db.QueryRowContext(ctx, q, args...)
}

func (t *wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := t.stmts[q]; st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.db.QueryContext(ctx, q, args...)
}

func (t *wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := t.save(ctx); err != nil {
		return nil, err
	}
	t.ws.note(q, args)
	res, err := t.exec(ctx, q, args...)
	if err == nil {
		t.ws.done(q, args)
	}
	return res, err
}

// save opens a batch member's savepoint before its first write.
func (t *wtx) save(ctx context.Context) error {
	if t.member && !t.saved {
		if _, err := t.exec(ctx, spBegin); err != nil {
			return err
		}
		t.saved = true
	}
	return nil
}

// PrepareContext prepares a write statement for a function that runs it many times (an import).
// Preparing counts as the transaction's first write: a batch member's savepoint opens here, and
// the read cache is told that anything may change.
func (t *wtx) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	if err := t.save(ctx); err != nil {
		return nil, err
	}
	t.ws.anything()
	return t.db.PrepareContext(ctx, q)
}

// ExecLast runs the last write statement of the transaction's function, after which nothing in
// it can fail. When it is also the first, a batch member needs no savepoint: a statement that
// fails leaves nothing behind (SQLite undoes it), and one that succeeds is kept. That saves two
// statements on the committer's serial path for the commonest write, a create of a plain object.
// Should the function fail after all, the committer cannot undo the write alone and runs the
// batch again, each member in a transaction of its own (see together).
func (t *wtx) ExecLast(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if !t.member || t.saved {
		return t.ExecContext(ctx, q, args...)
	}
	t.ws.note(q, args)
	res, err := t.exec(ctx, q, args...)
	if err == nil {
		t.bare = true
		t.ws.done(q, args)
	}
	return res, err
}

func (t *wtx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := t.stmts[q]; st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.db.ExecContext(ctx, q, args...)
}
