package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// Document secrets as written behind the store's back: by an older edgeplane (plaintext), in an
// older backup, or moved to another object.

// rawExec runs one statement on the database behind the store's back ($1-style placeholders).
func rawExec(t *testing.T, dsn, query string, args ...any) {
	t.Helper()
	driver := "pgx"
	if !store.IsPostgres(dsn) {
		driver = "sqlite"
		for i := len(args); i >= 1; i-- {
			query = strings.ReplaceAll(query, "$"+string(rune('0'+i)), "?")
		}
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// plainDocs returns the routes' documents with their secrets in plaintext, as an edgeplane
// before schema 9 stored them.
func plainDocs(t *testing.T, s *store.Store, account string) map[string][]byte {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, d := range snap.ByKind[ep.HTTPSEdgeRoutes] {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		out[d.Base().ID] = b
	}
	return out
}

// TestDocumentSecretsFromBefore: document secrets an older edgeplane stored in plaintext are
// sealed by the first start after the migration, and by the import of a backup of an older
// schema; a backup of this schema holding a plaintext secret is refused.
func TestDocumentSecretsFromBefore(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		key := store.NewSecretKey()
		s := openKeyed(t, dsn, key)
		c := admin(t, s, "before")
		_, r1, r2 := secretRoutes(t, s, c)
		plain := plainDocs(t, s, c.AccountID)
		var backup bytes.Buffer
		if err := s.Export(ctx, &backup); err != nil {
			t.Fatal(err)
		}
		s.Close()

		// The database as an older edgeplane left it, with migration 0009 just applied.
		for id, doc := range plain {
			rawExec(t, dsn, `UPDATE objects SET doc = $1 WHERE id = $2`, string(doc), id)
		}
		rawExec(t, dsn, `INSERT INTO store_tasks (name) VALUES ('seal-document-secrets')`)
		if dump := rawDocs(t, dsn); !bytes.Contains(dump, []byte(oauthPlain)) {
			t.Fatal("the plaintext was not written: the test proves nothing")
		}
		s = openKeyed(t, dsn, key)
		if err := s.CheckSecrets(ctx); err != nil {
			t.Fatalf("CheckSecrets after the first start: %v", err)
		}
		if got := snapshotSecrets(t, s, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("after sealing: %q", got)
		}
		s.Close()
		wantNoPlaintext(t, "the documents after the first start", rawDocs(t, dsn))

		// A backup of schema 8 with the plaintext documents: the import seals them.
		b := orderedMembers(t, backup.Bytes())
		var objects []map[string]json.RawMessage
		if err := json.Unmarshal(b.get("objects"), &objects); err != nil {
			t.Fatal(err)
		}
		for _, o := range objects {
			var id string
			_ = json.Unmarshal(o["id"], &id)
			if doc, ok := plain[id]; ok {
				o["doc"] = doc
			}
		}
		raw, _ := json.Marshal(objects)
		b.set("objects", raw)
		engine := "sqlite"
		if store.IsPostgres(dsn) {
			engine = "postgres"
		}
		for _, schema := range []string{"8", "9"} {
			b.set("schema_version", json.RawMessage(schema))
			old := b.marshal()
			if !bytes.Contains(old, []byte(oidcPlain)) {
				t.Fatal("the altered backup holds no plaintext: the test proves nothing")
			}
			target := testdb.Fresh(t, engine)
			r := openKeyed(t, target, key)
			err := r.Import(ctx, bytes.NewReader(old))
			if schema == "9" {
				// This schema's backups hold sealed secrets only: a plaintext one is refused.
				if !errors.Is(err, store.ErrSecretsUndecryptable) || !strings.Contains(err.Error(), "(not encrypted)") {
					t.Fatalf("import of a schema 9 backup with plaintext secrets: %v", err)
				}
				r.Close()
				continue
			}
			if err != nil {
				t.Fatalf("import of a schema 8 backup: %v", err)
			}
			if got := snapshotSecrets(t, r, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
				t.Fatalf("after importing a schema 8 backup: %q", got)
			}
			var again bytes.Buffer
			if err := r.Export(ctx, &again); err != nil {
				t.Fatal(err)
			}
			wantNoPlaintext(t, "the export after importing a schema 8 backup", again.Bytes())
			wantNoPlaintext(t, "the documents imported from a schema 8 backup", rawDocs(t, target))
			r.Close()
		}
	})
}

// members are the members of a JSON object in their order (a backup must start with its format).
type members struct {
	keys []string
	vals map[string]json.RawMessage
}

func orderedMembers(t *testing.T, data []byte) *members {
	t.Helper()
	m := &members{vals: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		m.keys = append(m.keys, k.(string))
		m.vals[k.(string)] = v
	}
	return m
}

func (m *members) get(k string) json.RawMessage    { return m.vals[k] }
func (m *members) set(k string, v json.RawMessage) { m.vals[k] = v }

func (m *members) marshal() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteByte(':')
		b.Write(m.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// rawDoc reads one stored document behind the store's back.
func rawDoc(t *testing.T, dsn, id string) map[string]any {
	t.Helper()
	driver, q := "pgx", `SELECT doc FROM objects WHERE id = $1`
	if !store.IsPostgres(dsn) {
		driver, q = "sqlite", `SELECT doc FROM objects WHERE id = ?`
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var doc []byte
	if err := db.QueryRow(q, id).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDocumentSecretBoundToItsPlace: a sealed value copied into another route's document does
// not open there (the object id and the field are bound into it): the start-up check names the
// place, and the route is neither shown nor handed to the data plane with it.
func TestDocumentSecretBoundToItsPlace(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		key := store.NewSecretKey()
		s := openKeyed(t, dsn, key)
		c := admin(t, s, "bound")
		edge, r1, r2 := secretRoutes(t, s, c)
		s.Close()

		sealed := rawDoc(t, dsn, r1)["webhook_verification"].(map[string]any)["secret"].(string)
		if !strings.HasPrefix(sealed, "ep1:") {
			t.Fatalf("stored webhook secret %q is not sealed", sealed)
		}
		doc := rawDoc(t, dsn, r2)
		doc["webhook_verification"] = map[string]any{"enabled": true, "provider": "github", "secret": sealed}
		moved, _ := json.Marshal(doc)
		rawExec(t, dsn, `UPDATE objects SET doc = $1 WHERE id = $2`, string(moved), r2)

		s = openKeyed(t, dsn, key)
		defer s.Close()
		err := s.CheckSecrets(ctx)
		if !errors.Is(err, store.ErrSecretsUndecryptable) || !strings.Contains(err.Error(), "1 of 4 secrets") ||
			!strings.Contains(err.Error(), "objects "+r2+" webhook_verification.secret") {
			t.Fatalf("CheckSecrets with a moved ciphertext: %v", err)
		}
		if d, err := s.Get(ctx, c.AccountID, ep.HTTPSEdgeRoutes, edge, r2); err == nil {
			t.Fatalf("Get of the route with a moved ciphertext: %+v", d.(*ep.HTTPSEdgeRoute).WebhookVerification)
		}
		if _, err := s.Snapshot(ctx, c.AccountID); err == nil {
			t.Fatal("the snapshot opened a moved ciphertext")
		}
		if _, err := s.Get(ctx, c.AccountID, ep.HTTPSEdgeRoutes, edge, r1); err != nil {
			t.Fatalf("the route the value came from: %v", err)
		}
	})
}
