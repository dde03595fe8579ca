package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// SQLite pages through objects_versions and has no objects_page (one index fewer per create);
// PostgreSQL keeps objects_page. On both, pages of an account hold only its objects, newest
// first, and follow each other without gaps while another account writes in between.
func TestPagingIndexPerEngine(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		if got, want := hasObjectsPage(t, s.r, engine), engine == "postgres"; got != want {
			t.Errorf("objects_page exists: %v, want %v", got, want)
		}
		var v int
		if err := s.r.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v < 20 {
			t.Errorf("schema version %d (%v), want the SQLite-only migration recorded on %s too", v, err, engine)
		}
		if engine == "sqlite" {
			plan := queryPlan(t, s.r, s.q.list, "acc", "ip_policy", "\x7f", 11)
			if !strings.Contains(plan, "objects_versions") || strings.Contains(plan, "TEMP B-TREE") {
				t.Errorf("the page query does not read objects_versions in order: %q", plan)
			}
		}

		a, b := ensureAccount(t, s, "pages-a"), ensureAccount(t, s, "pages-b")
		var want []string
		for i := range 7 {
			p, err := s.Create(ctx, a, ep.IPPolicies, "", &ep.IPPolicyCreate{})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, p.Base().ID)
			if i%2 == 0 {
				if _, err := s.Create(ctx, b, ep.IPPolicies, "", &ep.IPPolicyCreate{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		slices.Reverse(want)
		var got []string
		for before, more := "", true; more; {
			docs, m, err := s.List(ctx, a.AccountID, ep.IPPolicies, "", before, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				got = append(got, d.Base().ID)
			}
			if len(docs) == 0 || len(got) > len(want) {
				break
			}
			before, more = got[len(got)-1], m
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of account A: %v, want %v", got, want)
		}
	})
}

// An existing SQLite database, made before objects_page was dropped, loses it when it is opened,
// and its pages read as before.
func TestPagingIndexMigratesSQLite(t *testing.T) {
	ctx := context.Background()
	dsn := t.TempDir() + "/old.db"
	s := openStore(t, dsn)
	c := ensureAccount(t, s, "old")
	p, err := s.Create(ctx, c, ep.IPPolicies, "", &ep.IPPolicyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Back to the schema before the migration, through a connection of its own.
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE INDEX objects_page ON objects (account_id, kind, (id || ''))`, `DELETE FROM schema_migrations WHERE version = 20`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if !hasObjectsPage(t, db, "sqlite") {
		t.Fatal("objects_page was not made again")
	}
	db.Close()
	s = openStore(t, dsn)
	if hasObjectsPage(t, s.r, "sqlite") {
		t.Error("objects_page is still there after the migration")
	}
	docs, _, err := s.List(ctx, c.AccountID, ep.IPPolicies, "", "", 10)
	if err != nil || len(docs) != 1 || docs[0].Base().ID != p.Base().ID {
		t.Errorf("list after the migration: %v, %v", docs, err)
	}
}

func TestForEngine(t *testing.T) {
	for _, c := range []struct {
		base, engine string
		want         bool
	}{
		{"0001_init.sql", "sqlite", true},
		{"0001_init.sql", "postgres", true},
		{"0020_one_paging_index.sqlite.sql", "sqlite", true},
		{"0020_one_paging_index.sqlite.sql", "postgres", false},
		{"0021_x.postgres.sql", "sqlite", false},
		{"0021_x.postgres.sql", "postgres", true},
	} {
		if got := forEngine(c.base, c.engine); got != c.want {
			t.Errorf("forEngine(%q, %q) = %v, want %v", c.base, c.engine, got, c.want)
		}
	}
}

func hasObjectsPage(t *testing.T, db *sql.DB, engine string) bool {
	t.Helper()
	q := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'objects_page'`
	if engine == "postgres" {
		q = `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'objects_page'`
	}
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query(`EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}
