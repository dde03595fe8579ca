package server_test

import (
	"bytes"
	"context"
	"database/sql"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// openEnv serves the store at dsn on a new HTTP server, as newEnvOn does, without an account;
// stop closes both (and runs at the end of the test if not called before).
func openEnv(t *testing.T, dsn string) (e *env, stop func()) {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	e = &env{t: t, st: st}
	h := &lateHandler{}
	e.srv = httptest.NewServer(h)
	e.base = e.srv.URL
	h.h = server.New(st, server.Config{BaseURL: e.base})
	stop = sync.OnceFunc(func() { e.srv.Close(); st.Close() })
	t.Cleanup(stop)
	return e, stop
}

// downgradeWeightedIDs puts a database migrated to schema 5 back into the form schema 4 left
// (weighted backends with bkdwt_ ids everywhere), by running migration 0005 with the two
// prefixes swapped, and forgets that 0005 ran.
func downgradeWeightedIDs(t *testing.T, engine, dsn string) {
	t.Helper()
	driver := map[string]string{"sqlite": "sqlite", "postgres": "pgx"}[engine]
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	body, err := os.ReadFile("../store/migrations/0005_weighted_backend_ids.sql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	swapped := strings.NewReplacer("bkdwt_", "bkdwd_", "bkdwd_", "bkdwt_").Replace(strings.Join(lines, "\n"))
	for _, stmt := range strings.Split(swapped, ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("downgrade %q: %v", stmt, err)
		}
	}
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE version = 5`); err != nil {
		t.Fatal(err)
	}
	var old int
	if err := db.QueryRow(`SELECT COUNT(*) FROM objects WHERE substr(id, 1, 6) = 'bkdwt_'`).Scan(&old); err != nil || old != 2 {
		t.Fatalf("after the downgrade: %d bkdwt_ objects (%v), want 2", old, err)
	}
}

// TestWeightedBackendIDs: weighted backends get ngrok's prefix bkdwd_. A database written with
// the old prefix bkdwt_ is migrated on open (the objects, the references to them from failover
// and weighted backends and from edge routes, so a referenced one still cannot be deleted); the
// old id still names the object in a path and as a before_id cursor. A backup taken before the
// migration is migrated as it is restored. On every engine.
func TestWeightedBackendIDs(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			dsn := testdb.Fresh(t, engine)
			e, stop := openEnv(t, dsn)
			a := e.newAccount("weighted")
			s := staticBackend(e, a)
			w1 := e.do(a.token, "POST", "/backends/weighted", map[string]any{"backends": map[string]any{s: 1}}).must(t, 201).str("id")
			w2 := e.do(a.token, "POST", "/backends/weighted", map[string]any{"backends": map[string]any{w1: 2}}).must(t, 201).str("id")
			for _, id := range []string{w1, w2} {
				if !ep.ValidID("bkdwd", id) {
					t.Fatalf("weighted backend id %q, want bkdwd_ and a KSUID", id)
				}
			}
			f := e.do(a.token, "POST", "/backends/failover", map[string]any{"backends": []any{w1}}).must(t, 201).str("id")
			edge := e.do(a.token, "POST", "/edges/https", map[string]any{"hostports": []any{reserve(e, a) + ":443"}}).must(t, 201).str("id")
			route := e.do(a.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
				"backend": map[string]any{"backend_id": w2}}).must(t, 201).str("id")
			stop()

			downgradeWeightedIDs(t, engine, dsn)
			old := func(id string) string { return "bkdwt_" + strings.TrimPrefix(id, "bkdwd_") }
			e, _ = openEnv(t, dsn)
			check := func(e *env, tok string) {
				t.Helper()
				items := e.do(tok, "GET", "/backends/weighted", nil).must(t, 200).items(t, "backends")
				if len(items) != 2 || items[0]["id"] != w2 || items[1]["id"] != w1 {
					t.Fatalf("weighted backends after the migration: %v, want %s, %s", items, w2, w1)
				}
				sameJSON(t, "w2's backends", e.do(tok, "GET", "/backends/weighted/"+w2, nil).must(t, 200).body["backends"], map[string]any{w1: 2.0})
				sameJSON(t, "f's backends", e.do(tok, "GET", "/backends/failover/"+f, nil).must(t, 200).body["backends"], []any{w1})
				got := e.do(tok, "GET", "/edges/https/"+edge+"/routes/"+route, nil).must(t, 200).body["backend"].(map[string]any)["backend"].(map[string]any)["id"]
				if got != w2 {
					t.Fatalf("the route's backend is %v, want %s", got, w2)
				}
				// The old id names the same object in a path and as a cursor (either spelling).
				if id := e.do(tok, "GET", "/backends/weighted/"+old(w1), nil).must(t, 200).str("id"); id != w1 {
					t.Fatalf("GET by the old id answered %s, want %s", id, w1)
				}
				for _, param := range []string{"before_id", "beforeId"} {
					page := e.do(tok, "GET", "/backends/weighted?"+param+"="+old(w2), nil).must(t, 200).items(t, "backends")
					if len(page) != 1 || page[0]["id"] != w1 {
						t.Fatalf("%s=%s: %v, want only %s", param, old(w2), page, w1)
					}
				}
				// References were migrated: a referenced weighted backend still cannot go.
				e.do(tok, "DELETE", "/backends/weighted/"+w1, nil).wantError(t, 409, ep.CodeBackendInUse)
				e.do(tok, "DELETE", "/backends/weighted/"+old(w1), nil).wantError(t, 409, ep.CodeBackendInUse)
				// An old id of the wrong shape is still a 404, not another object.
				e.do(tok, "GET", "/backends/weighted/bkdwt_x", nil).wantError(t, 404, ep.CodeNotFound)
			}
			check(e, a.token)

			// A backup taken before the upgrade (schema 4, bkdwt_ ids) is migrated on import.
			var backup bytes.Buffer
			if err := e.st.Export(context.Background(), &backup); err != nil {
				t.Fatal(err)
			}
			older := strings.ReplaceAll(backup.String(), "bkdwd_", "bkdwt_")
			older = regexp.MustCompile(`"schema_version":\d+,`).ReplaceAllString(older, `"schema_version":4,`)
			if older == backup.String() || !strings.Contains(older, `"schema_version":4,`) {
				t.Fatal("could not make a schema 4 backup out of the export")
			}
			r, _ := openEnv(t, testdb.Fresh(t, engine))
			if err := r.st.Import(context.Background(), strings.NewReader(older)); err != nil {
				t.Fatal(err)
			}
			check(r, a.token)
			r.do(a.token, "PATCH", "/backends/weighted/"+old(w2), map[string]any{"description": "by its old id"}).must(t, 200)
			r.do(a.token, "DELETE", "/edges/https/"+edge+"/routes/"+route, nil).must(t, 204)
			r.do(a.token, "DELETE", "/backends/weighted/"+old(w2), nil).must(t, 204)
		})
	}
}
