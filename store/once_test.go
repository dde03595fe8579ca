package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// TestUseOnce: a value is fresh once per scope until it expires, whatever its length, and of
// concurrent calls exactly one finds it fresh.
func TestUseOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		use := func(scope, id string, expires time.Time, want bool) {
			t.Helper()
			fresh, err := s.UseOnce(ctx, scope, id, expires)
			if err != nil {
				t.Fatal(err)
			}
			if fresh != want {
				t.Fatalf("UseOnce(%q, %.20q): fresh %v, want %v", scope, id, fresh, want)
			}
		}
		later := time.Now().Add(time.Hour)
		use("saml:rt_1", "_a1", later, true)
		use("saml:rt_1", "_a1", later, false)
		use("saml:rt_1", "_a1", later.Add(time.Hour), false)
		use("saml:rt_2", "_a1", later, true)
		use("saml:rt_1", "_a2", later, true)

		// An expired row counts as absent, and the call that takes its place renews it.
		use("saml:rt_1", "_old", time.Now().Add(-2*time.Second), true)
		use("saml:rt_1", "_old", later, true)
		use("saml:rt_1", "_old", later, false)

		long := strings.Repeat("x", 10<<10)
		use("saml:rt_1", long, later, true)
		use("saml:rt_1", long, later, false)
		use("saml:rt_1", long[:len(long)-1], later, true)

		var wg sync.WaitGroup
		var mu sync.Mutex
		fresh, errs := 0, 0
		for range 16 {
			wg.Go(func() {
				ok, err := s.UseOnce(ctx, "saml:rt_1", "_raced", later)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs++
					t.Error(err)
				}
				if ok {
					fresh++
				}
			})
		}
		wg.Wait()
		if fresh != 1 || errs != 0 {
			t.Fatalf("16 concurrent uses: %d fresh, %d errors; want exactly 1 fresh", fresh, errs)
		}
	})
}

// TestUseOnceSweep: expired rows are deleted a bounded batch at a time, rows in force never, and
// UseOnce sweeps at most once a minute.
func TestUseOnceSweep(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		count := func() int {
			t.Helper()
			var n int
			if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM used_once`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		past := time.Now().Add(-time.Hour)
		s.onceSweep.last.Store(time.Now().UnixNano()) // no sweep by UseOnce until the gate's part below
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			for i := range onceSweepBatch + 5 {
				if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO used_once (scope, id, expires_at) VALUES (?, ?, ?)`),
					"test", fmt.Sprintf("%064x", i), ep.FormatTime(past)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UseOnce(ctx, "test", "kept", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		before := count()
		n, err := s.sweepExpired(ctx, usedOnceTable, usedOnceKey, time.Now())
		if err != nil || n != onceSweepBatch {
			t.Fatalf("first sweep: %d rows, %v; want %d", n, err, onceSweepBatch)
		}
		if got := count(); got != before-onceSweepBatch {
			t.Fatalf("%d rows after the first sweep, want %d", got, before-onceSweepBatch)
		}
		for {
			n, err := s.sweepExpired(ctx, usedOnceTable, usedOnceKey, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		if got := count(); got != 1 {
			t.Fatalf("%d rows after sweeping, want the 1 in force", got)
		}
		if fresh, err := s.UseOnce(ctx, "test", "kept", time.Now().Add(time.Hour)); err != nil || fresh {
			t.Fatalf("the row in force was swept: fresh %v, %v", fresh, err)
		}

		// The gate: a sweep a minute ago holds the next one off; an older one lets it run.
		s.onceSweep.last.Store(time.Now().UnixNano())
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO used_once (scope, id, expires_at) VALUES (?, ?, ?)`),
				"test", "stale", ep.FormatTime(past))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UseOnce(ctx, "test", "other", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != 3 {
			t.Fatalf("%d rows: swept within the minute", got)
		}
		s.onceSweep.last.Store(time.Now().Add(-2 * onceSweepEvery).UnixNano())
		if _, err := s.UseOnce(ctx, "test", "third", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != 3 {
			t.Fatalf("%d rows: the stale row was not swept after a minute (want kept, other, third)", got)
		}
	})
}

// TestRevocationSweep: RevokeSessions sweeps the expired revocations the way UseOnce sweeps its
// rows, at most once a minute per store, keeping those in force; another store's sweeps do not
// hold this one's off.
func TestRevocationSweep(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		subjects := func() []string {
			t.Helper()
			var out []string
			rows, err := s.r.QueryContext(ctx, `SELECT subject FROM session_revocations ORDER BY subject`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var sub string
				_ = rows.Scan(&sub)
				out = append(out, sub)
			}
			return out
		}
		now := time.Now()
		revoke := func(subject string, until time.Time) {
			t.Helper()
			if err := s.RevokeSessions(ctx, "saml-logout:rt_1", subject, now.Add(-2*time.Hour), until); err != nil {
				t.Fatal(err)
			}
		}
		s.revocationSweep.last.Store(now.UnixNano()) // a sweep just now: the next waits a minute
		revoke("gone", now.Add(-time.Hour))
		revoke("kept", now.Add(time.Hour))
		if got := fmt.Sprint(subjects()); got != "[gone kept]" {
			t.Fatalf("swept within the minute: %s", got)
		}
		// Another store sweeping now does not hold this one's next sweep off.
		other := openStore(t, dsn)
		other.revocationSweep.last.Store(time.Now().UnixNano())
		s.revocationSweep.last.Store(now.Add(-2 * onceSweepEvery).UnixNano())
		revoke("third", now.Add(time.Hour))
		if got := fmt.Sprint(subjects()); got != "[kept third]" {
			t.Fatalf("after a minute: %s, want the expired revocation swept", got)
		}
	})
}
