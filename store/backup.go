package store

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// A backup is one JSON document holding every row of every table, table by table in an order
// that satisfies the foreign keys (accounts before their principals, parents before children).
// It keeps what a faithful restore needs: token hashes (so existing keys keep working), secrets
// exactly as stored (so encrypted-at-rest keys stay encrypted, under the same key), ids,
// timestamps, versions, references and claims. Documents are embedded as JSON, not strings, so a
// backup can be read and diffed. Its "secret_protection" member (restore.go) says which secrets it
// holds and how they are protected; the keys that encrypt them are never in it, and Import refuses
// a backup whose secrets the target's keys cannot decrypt.

// BackupFormat names the document; BackupVersion changes when its shape does. Version 2 added
// the system_secrets table and the secret_protection summary; version 3 holds the secrets inside
// documents sealed (schema 9) and says so in secret_protection (summary, document_secrets).
// Import reads versions 1 to 3, and seals the document secrets of a backup from before schema 9.
const (
	BackupFormat  = "edgeplane-backup"
	BackupVersion = 3
)

// backupTable is a table of the backup: its columns, and which hold integers or JSON.
type backupTable struct {
	name    string
	columns []string
	ints    map[string]bool
	rawJSON map[string]bool
	order   string
	// replace says the target's rows of the table give way to the backup's: an empty target may
	// already hold a system secret (a CA made by `edgeplane ca` before the restore).
	replace bool
}

var backupTables = []backupTable{
	{name: "accounts", columns: []string{"id", "name", "created_at"}, order: "id"},
	{name: "principals", columns: []string{"id", "account_id", "role", "active", "created_at"},
		ints: map[string]bool{"active": true}, order: "id"},
	// Parents (no parent_id) first, so children's foreign keys hold on import.
	{name: "objects", columns: []string{"id", "account_id", "kind", "parent_id", "version", "created_at", "doc"},
		ints: map[string]bool{"version": true}, rawJSON: map[string]bool{"doc": true},
		order: "CASE WHEN parent_id IS NULL THEN 0 ELSE 1 END, id"},
	{name: "tokens", columns: []string{"selector", "hash", "kind", "account_id", "object_id", "principal_id"}, order: "selector"},
	{name: "refs", columns: []string{"from_id", "to_id", "mode"}, ints: map[string]bool{"mode": true}, order: "from_id, to_id"},
	{name: "claims", columns: []string{"namespace", "value", "account_id", "object_id"}, order: "namespace, value"},
	{name: "secrets", columns: []string{"object_id", "account_id", "data"}, order: "object_id"},
	{name: "system_secrets", columns: []string{"name", "public", "sealed", "created_at"}, order: "name", replace: true},
}

// Export writes a backup of the whole database to w, from one consistent snapshot.
func (s *Store) Export(ctx context.Context, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		tx, err = s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	}
	if err != nil {
		return s.classify(err)
	}
	defer tx.Rollback()
	var schema int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&schema); err != nil {
		return s.classify(err)
	}
	fmt.Fprintf(bw, "{\"format\":%q,\"version\":%d,\"schema_version\":%d,\"exported_at\":%q", BackupFormat, BackupVersion, schema, ep.FormatTime(time.Now()))
	if err := s.writeSecretProtection(ctx, tx, bw); err != nil {
		return err
	}
	for _, t := range backupTables {
		fmt.Fprintf(bw, ",\n%q:[", t.name)
		rows, err := tx.QueryContext(ctx, `SELECT `+strings.Join(t.columns, ", ")+` FROM `+t.name+` ORDER BY `+t.order)
		if err != nil {
			return s.classify(err)
		}
		first := true
		for rows.Next() {
			vals := make([]any, len(t.columns))
			ptrs := make([]any, len(t.columns))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return s.classify(err)
			}
			if !first {
				bw.WriteByte(',')
			}
			first = false
			bw.WriteString("\n{")
			for i, c := range t.columns {
				if i > 0 {
					bw.WriteByte(',')
				}
				fmt.Fprintf(bw, "%q:", c)
				if err := writeValue(bw, vals[i], t.rawJSON[c]); err != nil {
					rows.Close()
					return fmt.Errorf("store: export %s.%s: %w", t.name, c, err)
				}
			}
			bw.WriteByte('}')
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return s.classify(err)
		}
		rows.Close()
		bw.WriteString("]")
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

func writeValue(w *bufio.Writer, v any, raw bool) error {
	if b, ok := v.([]byte); ok {
		v = string(b)
	}
	if raw {
		s, ok := v.(string)
		if !ok || !json.Valid([]byte(s)) {
			return errors.New("stored document is not JSON")
		}
		_, err := w.WriteString(s)
		return err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// ErrNotEmpty is returned by Import for a database that already has accounts: a restore never
// merges into or overwrites data.
var ErrNotEmpty = errors.New("store: the database is not empty; import restores into an empty database only")

// Import restores a backup written by Export into this database, which must be empty, in one
// transaction: either everything is restored or nothing is.
func (s *Store) Import(ctx context.Context, r io.Reader) error {
	// Imported rows may carry versions the snapshot cache has seen with other content.
	defer s.feed.snaps.reset()
	if has, err := s.HasAccounts(ctx); err != nil {
		return err
	} else if has {
		return ErrNotEmpty
	}
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<16))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	tables := map[string]backupTable{}
	for _, t := range backupTables {
		tables[t.name] = t
	}
	var schema int
	if err := s.migratedVersion(ctx, &schema); err != nil {
		return err
	}
	return s.tryTxOnce(ctx, func(ctx context.Context, tx *wtx) error {
		if has, err := hasAccountsTx(ctx, tx); err != nil || has {
			if err == nil {
				err = ErrNotEmpty
			}
			return err
		}
		seenFormat := false
		backupSchema := 0
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return fmt.Errorf("store: import: %w", err)
			}
			name, _ := key.(string)
			switch name {
			case "format":
				var f string
				if err := dec.Decode(&f); err != nil || f != BackupFormat {
					return fmt.Errorf("store: import: not an edgeplane backup (format %q)", f)
				}
				seenFormat = true
			case "version":
				var v int
				if err := dec.Decode(&v); err != nil || v < 1 || v > BackupVersion {
					return fmt.Errorf("store: import: backup version %d; this edgeplane reads version %d", v, BackupVersion)
				}
			case "schema_version":
				var v int
				if err := dec.Decode(&v); err != nil || v > schema {
					return fmt.Errorf("store: import: the backup is of database schema %d, newer than this edgeplane's %d: upgrade edgeplane first", v, schema)
				}
				backupSchema = v
			case "secret_protection":
				var ignored SecretProtection // a summary for people; the rows are checked
				if err := dec.Decode(&ignored); err != nil {
					return fmt.Errorf("store: import: secret_protection: %w", err)
				}
			case "exported_at":
				var ignored string
				if err := dec.Decode(&ignored); err != nil {
					return fmt.Errorf("store: import: %w", err)
				}
			default:
				t, ok := tables[name]
				if !ok {
					return fmt.Errorf("store: import: unknown table %q in the backup", name)
				}
				if !seenFormat {
					return errors.New("store: import: the backup does not start with its format")
				}
				if err := s.importTable(ctx, tx, dec, t); err != nil {
					return err
				}
			}
		}
		if !seenFormat {
			return errors.New("store: import: not an edgeplane backup")
		}
		if err := expectDelim(dec, '}'); err != nil {
			return err
		}
		if err := s.reapplyDataMigrations(ctx, tx, backupSchema); err != nil {
			return err
		}
		if backupSchema < docSecretsSchema {
			if _, err := s.rewriteFields(ctx, tx, true); err != nil {
				return err
			}
		}
		if err := s.checkImportedSecrets(ctx, tx); err != nil {
			return err
		}
		if err := s.recordPolicyShares(ctx, tx); err != nil {
			return err
		}
		if s.resealImport {
			_, err := s.resealAll(ctx, tx)
			return err
		}
		return nil
	})
}

func (s *Store) importTable(ctx context.Context, tx *wtx, dec *json.Decoder, t backupTable) error {
	if err := expectDelim(dec, '['); err != nil {
		return err
	}
	q := s.d.rebind(`INSERT INTO ` + t.name + ` (` + strings.Join(t.columns, ", ") + `) VALUES (?` + strings.Repeat(", ?", len(t.columns)-1) + `)`)
	stmt, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return s.classify(err)
	}
	defer stmt.Close()
	if t.replace {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+t.name); err != nil {
			return s.classify(err)
		}
	}
	progress := importProgress(ctx)
	n := 0
	for dec.More() {
		var row map[string]json.RawMessage
		if err := dec.Decode(&row); err != nil {
			return fmt.Errorf("store: import %s row %d: %w", t.name, n, err)
		}
		args := make([]any, len(t.columns))
		for i, c := range t.columns {
			raw, ok := row[c]
			if !ok {
				return fmt.Errorf("store: import %s row %d: no %s", t.name, n, c)
			}
			switch {
			case t.rawJSON[c]:
				args[i] = string(raw)
			case t.ints[c]:
				var v int64
				if err := json.Unmarshal(raw, &v); err != nil {
					return fmt.Errorf("store: import %s row %d: %s: %w", t.name, n, c, err)
				}
				args[i] = v
			default:
				var v *string
				if err := json.Unmarshal(raw, &v); err != nil {
					return fmt.Errorf("store: import %s row %d: %s: %w", t.name, n, c, err)
				}
				if v == nil {
					args[i] = nil
				} else {
					args[i] = *v
				}
			}
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("store: import %s row %d: %w", t.name, n, err)
		}
		n++
		if progress != nil {
			progress.Add(1)
		}
	}
	_, err = dec.Token() // ]
	return err
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("store: import: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("store: import: malformed backup: expected %q", string(want))
	}
	return nil
}

func hasAccountsTx(ctx context.Context, tx querier) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM accounts`).Scan(&n)
	return n > 0, err
}

func (s *Store) migratedVersion(ctx context.Context, v *int) error {
	return s.classify(s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(v))
}

// tryTxOnce runs fn in one write transaction, without the retries of inTx (an import is not
// idempotent against a concurrent writer; it fails instead).
func (s *Store) tryTxOnce(ctx context.Context, fn txFunc) error {
	err := s.runTx(ctx, fn)
	if errors.Is(err, errRetry) {
		return errors.New("store: import conflicted with a concurrent write; retry into an empty database")
	}
	return err
}
