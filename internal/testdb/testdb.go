// Package testdb gives tests a fresh database on either engine. SQLite is always available; a
// PostgreSQL test runs when EDGEPLANE_TEST_POSTGRES holds a DSN, in a schema of its own that is
// dropped afterwards, so test runs and parallel packages never see each other's data.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/ksuid"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver
)

// PostgresEnv names the variable holding the DSN of a PostgreSQL server tests may use.
const PostgresEnv = "EDGEPLANE_TEST_POSTGRES"

// EngineEnv selects the engine of the API test suites: "sqlite" (default) or "postgres".
const EngineEnv = "EDGEPLANE_TEST_ENGINE"

// Engines lists the engines available to this test run: sqlite always, postgres when configured.
func Engines() []string {
	if os.Getenv(PostgresEnv) != "" {
		return []string{"sqlite", "postgres"}
	}
	return []string{"sqlite"}
}

// Engine is the engine the API suites run on, from EDGEPLANE_TEST_ENGINE.
func Engine() string {
	if e := os.Getenv(EngineEnv); e != "" {
		return e
	}
	return "sqlite"
}

// Fresh returns the DSN of a new, empty database on the engine for the test.
func Fresh(t testing.TB, engine string) string {
	t.Helper()
	switch engine {
	case "sqlite":
		return filepath.Join(t.TempDir(), "edgeplane.db")
	case "postgres":
		return Postgres(t)
	}
	t.Fatalf("unknown test engine %q (want sqlite or postgres)", engine)
	return ""
}

// Postgres returns the DSN of a new empty schema on the configured PostgreSQL server, or skips the
// test with a visible message when none is configured.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL tests skipped: set %s to a DSN (e.g. postgres://postgres@127.0.0.1:5432/test) to run them", PostgresEnv)
	}
	EnsureSecretKey()
	schema := "ep_test_" + strings.ToLower(ksuid.New().String())
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		t.Fatalf("create test schema on %s: %v", PostgresEnv, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Logf("drop test schema %s: %v", schema, err)
		}
		admin.Close()
	})
	return WithSearchPath(base, schema)
}

// SecretKeyEnv is store.SecretKeyEnv (not imported, to keep this package free of the store).
const SecretKeyEnv = "EDGEPLANE_SECRET_KEY"

var secretKeyOnce sync.Once

// EnsureSecretKey gives this test process a secret key in EDGEPLANE_SECRET_KEY when it has none:
// PostgreSQL stores need one (their replicas share it), and processes started by tests can be
// given the same with SecretKeyEnvVar.
func EnsureSecretKey() {
	secretKeyOnce.Do(func() {
		if os.Getenv(SecretKeyEnv) == "" {
			k := make([]byte, 32)
			if _, err := rand.Read(k); err != nil {
				panic(err)
			}
			os.Setenv(SecretKeyEnv, base64.StdEncoding.EncodeToString(k))
		}
	})
}

// SecretKeyEnvVar is "EDGEPLANE_SECRET_KEY=<this process's key>", for processes a test starts.
func SecretKeyEnvVar() string {
	EnsureSecretKey()
	return SecretKeyEnv + "=" + os.Getenv(SecretKeyEnv)
}

// WithSearchPath returns dsn with its search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(fmt.Sprintf("testdb: bad DSN: %v", err))
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
