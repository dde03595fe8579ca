package store

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// TestConnClosedMidQuery: PostgreSQL goes away while a statement of a transaction is running.
// The statement fails with the broken connection's error, and whatever the transaction does
// next (here its COMMIT) fails with pgx's "conn closed"; both are outages, 503 ERR_NGROK_9000,
// not internal errors (a crash mid-request once answered 500 "conn closed").
func TestConnClosedMidQuery(t *testing.T) {
	dsn := testdb.Postgres(t)
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	cut, err := sql.Open("pgx", proxy.Redirect(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	if _, err := direct.ExecContext(ctx, `CREATE TABLE crash (x int)`); err != nil {
		t.Fatal(err)
	}
	// The statement through the proxy waits for this lock, so it is certainly running when the
	// connection breaks.
	lock, err := direct.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `LOCK TABLE crash IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	tx, err := cut.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	stmt := make(chan error, 1)
	go func() {
		_, err := tx.ExecContext(ctx, `INSERT INTO crash VALUES (1)`)
		stmt <- err
	}()
	for waiting := false; !waiting; {
		// wait_event_type is NULL while the backend is running rather than waiting: not yet.
		err := direct.QueryRowContext(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	proxy.Down()
	midQuery := <-stmt
	commit := tx.Commit()
	if midQuery == nil || !errors.Is(commit, pgconn.ErrConnClosed) {
		t.Fatalf("the cut did not break the transaction as expected: statement %v, commit %v", midQuery, commit)
	}
	s := &Store{d: pgDialect{}}
	for what, err := range map[string]error{"the statement cut mid-query": midQuery, "the commit after it": commit} {
		var e *ep.Error
		if got := s.classify(err); !errors.As(got, &e) || e.Status != http.StatusServiceUnavailable || e.Code != ep.CodeUnavailable {
			t.Errorf("%s: %v classified as %v, want 503 ERR_NGROK_%d", what, err, got, ep.CodeUnavailable)
		}
	}
}
