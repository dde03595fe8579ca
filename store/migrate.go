package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// migrations are the schema changes in order, embedded so a binary carries its own schema.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the embedded migrations that are not yet recorded, each in its own transaction.
// Replicas starting together take turns through the dialect's migration lock, so each migration
// runs exactly once.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return s.classify(err)
	}
	defer conn.Close()
	unlock, err := s.d.lockMigrations(ctx, conn)
	if err != nil {
		return fmt.Errorf("store: lock migrations: %w", err)
	}
	defer unlock()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("store: create schema_migrations: %w", err)
	}
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("store: migration %s: name must start with a number", f)
		}
		body, err := migrations.ReadFile(f)
		if err != nil {
			return err
		}
		if !forEngine(base, s.d.name()) {
			// Recorded all the same, so that every engine's schema has the same version and a
			// backup's version means the same on both.
			body = nil
		}
		err = s.connTx(ctx, conn, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), v).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			for _, stmt := range splitStatements(string(body)) {
				if _, err := tx.ExecContext(ctx, s.d.ddl(stmt)); err != nil {
					return fmt.Errorf("store: migration %s: %w", base, err)
				}
			}
			_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`),
				v, ep.FormatTime(time.Now()))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// forEngine reports whether the migration file base runs on the engine: a file named
// NNNN_name.sqlite.sql or NNNN_name.postgres.sql holds a change of one engine's schema only (an
// index that only that engine's queries use); any other file runs on both.
func forEngine(base, engine string) bool {
	name := strings.TrimSuffix(base, ".sql")
	for _, e := range []string{"sqlite", "postgres"} {
		if strings.HasSuffix(name, "."+e) {
			return e == engine
		}
	}
	return true
}

// splitStatements splits a migration file on semicolons at line ends, dropping comments.
func splitStatements(body string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(body, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}
