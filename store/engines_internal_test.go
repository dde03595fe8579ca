package store

import (
	"context"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// eachEngine runs fn once per engine this run has (a subtest named after it), with the DSN of
// a fresh database on it, so that every internal test runs on SQLite and PostgreSQL alike.
func eachEngine(t *testing.T, fn func(t *testing.T, engine, dsn string)) {
	t.Helper()
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) { fn(t, engine, testdb.Fresh(t, engine)) })
	}
}

// openStore opens the store at dsn and closes it when the test ends; a test that closes it
// itself, to open the database again as a restart would, may (Close is idempotent).
func openStore(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ensureAccount returns the admin caller of the account named name, made if it is missing.
func ensureAccount(t *testing.T, s *Store, name string) ep.Caller {
	t.Helper()
	c, _, err := s.EnsureAccount(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
