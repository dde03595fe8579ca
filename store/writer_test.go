package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// White-box tests of group commit (writer.go): batches are built by hand and run with together,
// so what each member sees and gets is deterministic.

func openCommitTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "commit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.inTx(context.Background(), func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE scratch (k TEXT PRIMARY KEY)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func insertKey(k string) txFunc {
	return func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO scratch (k) VALUES (?)`, k)
		return err
	}
}

func keys(t *testing.T, s *Store) string {
	t.Helper()
	rows, err := s.r.Query(`SELECT k FROM scratch ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return strings.Join(out, ",")
}

// wantRows requires the scratch table to hold exactly the keys want, comma-separated in order.
func wantRows(t *testing.T, s *Store, want string) {
	t.Helper()
	if got := keys(t, s); got != want {
		t.Fatalf("rows %q, want %s", got, want)
	}
}

// runBatch runs the functions as one batch and returns each one's answer.
func runBatch(s *Store, fns ...txFunc) []error {
	batch := make([]*txRequest, len(fns))
	for i, fn := range fns {
		batch[i] = &txRequest{ctx: context.Background(), fn: fn, done: make(chan error, 1)}
	}
	s.commit.together(batch)
	out := make([]error, len(fns))
	for i, r := range batch {
		out[i] = <-r.done
	}
	return out
}

var errRule = errors.New("a rule said no")

// A member that fails after writing is rolled back to its savepoint; the members before and
// after it commit, and each gets its own answer.
func TestBatchMemberFailsAfterWriting(t *testing.T) {
	s := openCommitTest(t)
	errs := runBatch(s,
		insertKey("a"),
		func(ctx context.Context, tx *wtx) error {
			if err := insertKey("b")(ctx, tx); err != nil {
				return err
			}
			return errRule
		},
		insertKey("c"),
	)
	if errs[0] != nil || !errors.Is(errs[1], errRule) || errs[2] != nil {
		t.Fatalf("answers %v", errs)
	}
	wantRows(t, s, "a,c")
}

// A constraint violation of one member (here a duplicate key, from an earlier member of the same
// batch) fails that member only: later members see what earlier ones wrote, as they would one
// transaction at a time.
func TestBatchConstraintIsolation(t *testing.T) {
	s := openCommitTest(t)
	errs := runBatch(s, insertKey("a"), insertKey("a"), insertKey("b"), func(ctx context.Context, tx *wtx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM scratch`).Scan(&n); err != nil {
			return err
		}
		return insertKey(fmt.Sprintf("seen-%d", n))(ctx, tx)
	})
	if errs[0] != nil || errs[1] == nil || !s.d.uniqueViolation(errs[1]) || errs[2] != nil || errs[3] != nil {
		t.Fatalf("answers %v", errs)
	}
	wantRows(t, s, "a,b,seen-2")
}

// When SQLite abandons the whole transaction (simulated by a member that rolls it back), the
// savepoint cannot be restored; every member without an answer runs again alone, so the others
// still commit exactly once.
func TestBatchTransactionLost(t *testing.T) {
	s := openCommitTest(t)
	errs := runBatch(s,
		insertKey("a"),
		func(ctx context.Context, tx *wtx) error {
			if err := insertKey("b")(ctx, tx); err != nil {
				return err
			}
			if _, err := tx.db.ExecContext(ctx, `ROLLBACK`); err != nil {
				return err
			}
			return errRule
		},
		insertKey("c"),
	)
	// Alone, the second member rolls back its own transaction; its answer is then an error
	// (its own, or the failed commit's), and it wrote nothing.
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("answers %v", errs)
	}
	wantRows(t, s, "a,c")
	// The writer connection is usable afterwards.
	if err := s.inTx(context.Background(), insertKey("d")); err != nil {
		t.Fatal(err)
	}
}

func insertLast(k string, calls *int) txFunc {
	return func(ctx context.Context, tx *wtx) error {
		*calls++
		_, err := tx.ExecLast(ctx, `INSERT INTO scratch (k) VALUES (?)`, k)
		return err
	}
}

// A member whose only write (ExecLast, no savepoint) fails leaves nothing behind, because SQLite
// undoes the failed statement: only it fails, and the batch is not run again.
func TestBatchLastWriteFails(t *testing.T) {
	s := openCommitTest(t)
	calls := make([]int, 3)
	errs := runBatch(s, insertLast("a", &calls[0]), insertLast("a", &calls[1]), insertLast("b", &calls[2]))
	if errs[0] != nil || errs[1] == nil || !s.d.uniqueViolation(errs[1]) || errs[2] != nil {
		t.Fatalf("answers %v", errs)
	}
	wantRows(t, s, "a,b")
	if calls[0] != 1 || calls[1] != 1 || calls[2] != 1 {
		t.Fatalf("calls %v, want each member run once", calls)
	}
}

// A member that fails after a write without a savepoint cannot be undone alone: the batch is
// rolled back and every member runs again in a transaction of its own, so the failing one writes
// nothing and the others commit exactly once. The same holds when it writes again after its
// "last" write.
func TestBatchFailsAfterBareWrite(t *testing.T) {
	for name, failing := range map[string]txFunc{
		"fails after its last write": func(ctx context.Context, tx *wtx) error {
			if _, err := tx.ExecLast(ctx, `INSERT INTO scratch (k) VALUES ('b')`); err != nil {
				return err
			}
			return errRule
		},
		"writes after its last write": func(ctx context.Context, tx *wtx) error {
			if _, err := tx.ExecLast(ctx, `INSERT INTO scratch (k) VALUES ('b')`); err != nil {
				return err
			}
			if err := insertKey("b2")(ctx, tx); err != nil {
				return err
			}
			return errRule
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := openCommitTest(t)
			calls := make([]int, 2)
			errs := runBatch(s, insertLast("a", &calls[0]), failing, insertLast("c", &calls[1]))
			if errs[0] != nil || !errors.Is(errs[1], errRule) || errs[2] != nil {
				t.Fatalf("answers %v", errs)
			}
			wantRows(t, s, "a,c")
			if calls[0] != 2 || calls[1] != 1 {
				t.Fatalf("calls %v, want the first member run again alone and the last run once", calls)
			}
		})
	}
}

// A member that fails before writing needs no savepoint and does not disturb the others.
func TestBatchMemberFailsBeforeWriting(t *testing.T) {
	s := openCommitTest(t)
	errs := runBatch(s, insertKey("a"), func(context.Context, *wtx) error { return errRule }, insertKey("b"))
	if errs[0] != nil || !errors.Is(errs[1], errRule) || errs[2] != nil {
		t.Fatalf("answers %v", errs)
	}
	wantRows(t, s, "a,b")
}

// A panicking member is rolled back; its caller panics (so the HTTP layer answers 500 as before)
// and the others commit.
func TestBatchMemberPanics(t *testing.T) {
	s := openCommitTest(t)
	errs := runBatch(s, insertKey("a"), func(ctx context.Context, tx *wtx) error {
		if err := insertKey("b")(ctx, tx); err != nil {
			return err
		}
		panic("boom")
	}, insertKey("c"))
	var p *panicError
	if errs[0] != nil || !errors.As(errs[1], &p) || errs[2] != nil {
		t.Fatalf("answers %v", errs)
	}
	wantRows(t, s, "a,c")
	func() {
		defer func() {
			if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "boom") {
				t.Fatalf("recovered %v, want the member's panic", v)
			}
		}()
		_ = s.inTx(context.Background(), func(context.Context, *wtx) error { panic("boom") })
	}()
	if err := s.inTx(context.Background(), insertKey("d")); err != nil {
		t.Fatal(err)
	}
}

// A request whose context ended before its turn is answered with that and not run.
func TestBatchCanceledMember(t *testing.T) {
	s := openCommitTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	batch := []*txRequest{
		{ctx: context.Background(), fn: insertKey("a"), done: make(chan error, 1)},
		{ctx: ctx, fn: insertKey("b"), done: make(chan error, 1)},
	}
	s.commit.together(batch)
	if err := <-batch[0].done; err != nil {
		t.Fatal(err)
	}
	if err := <-batch[1].done; err == nil {
		t.Fatal("a canceled request was run")
	}
	wantRows(t, s, "a")
}

// Concurrent writers through the committer: every acknowledged write is there, every refused one
// is not, and the writes were grouped.
func TestGroupCommitConcurrent(t *testing.T) {
	s := openCommitTest(t)
	const n = 400
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("k%03d", i/2) // pairs collide: one of each pair must fail
			errs[i] = s.inTx(context.Background(), insertKey(k))
		}()
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			if !s.d.uniqueViolation(err) {
				t.Fatalf("unexpected error %v", err)
			}
			failed++
		}
	}
	var rows int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM scratch`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if failed != n/2 || rows != n/2 {
		t.Fatalf("%d failed, %d rows; want %d and %d", failed, rows, n/2, n/2)
	}
	st := s.CommitStats()
	t.Logf("%d write transactions in %d batches", st.Requests, st.Batches)
	if st.Requests < n {
		t.Fatalf("stats count %d requests, want at least %d", st.Requests, n)
	}
}

// Writes after Close are refused, not lost in a queue.
func TestCommitterClosed(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "closed.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.commit.stop()
	if err := s.commit.do(context.Background(), insertKey("a")); !errors.Is(err, errStoreClosed) {
		t.Fatalf("write after close: %v", err)
	}
	s.Close()
}

// When database/sql gives up on the writer's connection (as it does when a driver reports it
// broken), the next write takes a new connection instead of failing forever.
func TestCommitterReplacesLostConnection(t *testing.T) {
	s := openCommitTest(t)
	// The committer is idle: this goroutine may use its connection.
	if err := s.commit.conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("Raw: %v", err)
	}
	if err := s.inTx(context.Background(), insertKey("a")); err != nil {
		t.Fatalf("write after the connection was lost: %v", err)
	}
	wantRows(t, s, "a")
}

// A transaction left open on the writer's connection (by a ROLLBACK that failed) is ended by the
// next write's BEGIN, which then succeeds; nothing of the stale transaction is committed.
func TestCommitterEndsStaleTransaction(t *testing.T) {
	s := openCommitTest(t)
	ctx := context.Background()
	if _, err := s.commit.conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.commit.conn.ExecContext(ctx, `INSERT INTO scratch (k) VALUES ('stale')`); err != nil {
		t.Fatal(err)
	}
	if err := s.inTx(ctx, insertKey("a")); err != nil {
		t.Fatalf("write after a stale transaction: %v", err)
	}
	wantRows(t, s, "a")
}
