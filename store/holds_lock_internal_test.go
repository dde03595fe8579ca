package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// TestBindsUnderOneZoneDoNotWait (PostgreSQL, whose name locks are advisory locks): binds of
// different names under one zone, of two accounts, go through while another transaction holds
// the zone's wildcard lock shared, as a bind under the zone does until it commits; so the agents
// of every account under a service domain do not take turns. A transaction holding it exclusive,
// as a reservation of the wildcard does, still holds a bind under it off until it ends, and the
// wildcard is then refused to the other account.
func TestBindsUnderOneZoneDoNotWait(t *testing.T) {
	dsn := testdb.Postgres(t)
	w := newHoldsWorld(t, dsn)
	// A zone of this test alone: advisory locks are the whole database's, shared with other
	// tests' schemas.
	zone := fmt.Sprintf("zone%d.example.com", time.Now().UnixNano())
	outside, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	ctx := context.Background()
	conn, err := outside.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lock := func(fn string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, `SELECT `+fn+`($1, hashtext($2))`, nameLockClass, "*."+zone); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
	}
	bind := func(c ep.Caller, session, id, name string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- w.bind(c, session, id, name) }()
		return done
	}
	wait := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: not done within 20s", what)
		}
	}

	lock("pg_advisory_lock_shared")
	a, b := bind(w.a, "ts_a", "tn_za", "a."+zone), bind(w.b, "ts_b", "tn_zb", "b."+zone)
	wait(a, "A's bind under the zone while its wildcard's lock is held shared")
	wait(b, "B's bind under the zone while its wildcard's lock is held shared")
	lock("pg_advisory_unlock_shared")

	lock("pg_advisory_lock")
	held := bind(w.b, "ts_b", "tn_zb2", "b2."+zone)
	// The bind waits for the wildcard's lock (PostgreSQL lists it as not granted).
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid = $1 AND objsubid = 2 AND objid::bigint = (hashtext($2)::bigint & 4294967295)`, nameLockClass, "*."+zone).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-held:
			t.Fatalf("B's bind under the zone went through while its wildcard's lock was held exclusive: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("B's bind under the zone never waited for its wildcard's lock held exclusive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	lock("pg_advisory_unlock")
	wait(held, "B's bind under the zone once its wildcard's lock is released")
	// B's agents are online under the zone: A cannot reserve its wildcard.
	w.wantOnline(w.reserve(w.a, "*."+zone), "*."+zone)
	if err := w.bind(w.a, "ts_a", "tn_za3", "b."+zone); !errors.Is(err, ErrNameOnline) {
		t.Errorf("A's bind of B's online name: %v, want ErrNameOnline", err)
	}
}
