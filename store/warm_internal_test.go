package store

import (
	"context"
	"errors"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// TestWarmPool: on PostgreSQL WarmPool opens the whole pool and leaves it idle for the first
// writes (a handover's successor's agents); SQLite has no pool to warm.
func TestWarmPool(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine, dsn string) {
		s, err := OpenWith(context.Background(), dsn, Options{MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		n, err := s.WarmPool(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if engine != "postgres" {
			if n != 0 {
				t.Errorf("WarmPool opened %d connections on %s, want none", n, engine)
			}
			return
		}
		if st := s.w.Stats(); n != 4 || st.OpenConnections != 4 || st.Idle != 4 {
			t.Errorf("WarmPool opened %d; the pool has %d open, %d idle; want 4 of 4, all idle", n, st.OpenConnections, st.Idle)
		}
	})
}

// TestWarmPoolDatabaseDown: a pool that cannot be opened (the database went away) is reported,
// as the store's unavailable error (503), without blocking; the store opens connections on demand
// once the database is back.
func TestWarmPoolDatabaseDown(t *testing.T) {
	dsn := testdb.Postgres(t)
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	s, err := OpenWith(context.Background(), proxy.Redirect(dsn), Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	proxy.Down()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = s.WarmPool(ctx)
	var e *ep.Error
	if !errors.As(err, &e) || e.Status != 503 || e.Code != ep.CodeUnavailable {
		t.Fatalf("WarmPool with the database down: %v, want 503 code %d", err, ep.CodeUnavailable)
	}
	proxy.Up()
	deadline := time.Now().Add(20 * time.Second)
	for s.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the store does not reach the database again once it is back")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
