package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// The secrets inside documents (docsecrets.go): a route's webhook secret and OAuth and OIDC
// client secrets are sealed in the database and in exports, opened for the data plane, shown
// (webhook) or null (client secrets) in what the API gets, rotated, checked, and imported.

// Plaintexts distinctive enough that finding one in a file cannot be chance.
const (
	webhookPlain = "whsec-plaintext-7f3a9c"
	oauthPlain   = "oauth-client-plaintext-51d2e8"
	oidcPlain    = "oidc-client-plaintext-a04b6c"
)

var docPlains = []string{webhookPlain, oauthPlain, oidcPlain}

func openKeyed(t *testing.T, dsn, keys string) *store.Store {
	t.Helper()
	s, err := store.OpenWith(context.Background(), dsn, store.Options{SecretKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keyIDOf is the id edgeplane gives a key: the first 8 hex digits of its SHA-256.
func keyIDOf(t *testing.T, key string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:4])
}

func decodeInto[T any](t *testing.T, body string, v T) T {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatal(err)
	}
	return v
}

// secretRoutes makes an HTTPS edge with two routes: one with webhook verification and OAuth
// (GitHub, its own application), one with OIDC; it returns the edge and route ids.
func secretRoutes(t *testing.T, s *store.Store, c ep.Caller) (edge, r1, r2 string) {
	t.Helper()
	ctx := context.Background()
	e, err := s.Create(ctx, c, ep.HTTPSEdges, "", decodeInto(t, `{}`, ep.HTTPSEdges.NewCreate()))
	if err != nil {
		t.Fatal(err)
	}
	edge = e.Base().ID
	route := func(body string) *ep.HTTPSEdgeRoute {
		t.Helper()
		cr := decodeInto(t, body, ep.HTTPSEdgeRoutes.NewCreate())
		if err := cr.Validate(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Create(ctx, c, ep.HTTPSEdgeRoutes, edge, cr)
		if err != nil {
			t.Fatal(err)
		}
		return d.(*ep.HTTPSEdgeRoute)
	}
	a := route(`{"match_type": "path_prefix", "match": "/a", "webhook_verification": {"provider": "github", "secret": "` + webhookPlain + `"},
		"oauth": {"provider": {"github": {"client_id": "gh-id", "client_secret": "` + oauthPlain + `"}}}}`)
	b := route(`{"match_type": "path_prefix", "match": "/b", "oidc": {"issuer": "https://id.example.com", "client_id": "oidc-id", "client_secret": "` + oidcPlain + `"}}`)
	// What a create answers: the webhook secret as given, the client secrets null.
	wantPresented(t, "create", a, b)
	return edge, a.ID, b.ID
}

// wantPresented checks routes as the API gets them: a the one with webhook and OAuth, b OIDC.
func wantPresented(t *testing.T, when string, a, b *ep.HTTPSEdgeRoute) {
	t.Helper()
	if a.WebhookVerification.Secret != webhookPlain || a.OAuth.Provider.GitHub.ClientSecret != nil ||
		*a.OAuth.Provider.GitHub.ClientID != "gh-id" || b.OIDC.ClientSecret != nil || b.OIDC.ClientID != "oidc-id" {
		t.Fatalf("%s: webhook %q, oauth client secret %v, oidc client secret %v", when, a.WebhookVerification.Secret,
			a.OAuth.Provider.GitHub.ClientSecret, b.OIDC.ClientSecret)
	}
}

// snapshotSecrets returns the secrets the data plane gets: webhook, OAuth, OIDC.
func snapshotSecrets(t *testing.T, s *store.Store, account, r1, r2 string) [3]string {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	var out [3]string
	for _, d := range snap.ByKind[ep.HTTPSEdgeRoutes] {
		r := d.(*ep.HTTPSEdgeRoute)
		switch r.ID {
		case r1:
			out[0], out[1] = r.WebhookVerification.Secret, *r.OAuth.Provider.GitHub.ClientSecret
		case r2:
			out[2] = *r.OIDC.ClientSecret
		}
	}
	return out
}

// rawStorage is what the database holds: a SQLite database's files (with its WAL), or the
// documents of a PostgreSQL database (its WAL is the server's).
func rawStorage(t *testing.T, dsn string) []byte {
	t.Helper()
	if !store.IsPostgres(dsn) {
		var dump []byte
		for _, suffix := range []string{"", "-wal"} {
			if b, err := os.ReadFile(dsn + suffix); err == nil {
				dump = append(dump, b...)
			}
		}
		return dump
	}
	return rawDocs(t, dsn)
}

// rawDocs is every stored document, read with SQL behind the store's back.
func rawDocs(t *testing.T, dsn string) []byte {
	t.Helper()
	driver := "pgx"
	if !store.IsPostgres(dsn) {
		driver = "sqlite"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT doc FROM objects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var dump []byte
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			t.Fatal(err)
		}
		dump = append(dump, doc...)
	}
	return dump
}

func wantNoPlaintext(t *testing.T, what string, data []byte) {
	t.Helper()
	for _, p := range docPlains {
		if bytes.Contains(data, []byte(p)) {
			t.Errorf("%s holds the secret %q in plaintext", what, p)
		}
	}
	if !bytes.Contains(data, []byte(`"ep1:`)) {
		t.Errorf("%s holds no sealed secret: the check proves nothing", what)
	}
}

// TestDocumentSecretsSealed: the secrets are sealed in the database and in an export, which
// counts them and names the key; the data plane gets them opened and the API never gets the
// client secrets; Get, List and the edge embedding its routes present them the same way.
func TestDocumentSecretsSealed(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		key := store.NewSecretKey()
		s := openKeyed(t, dsn, key)
		defer s.Close()
		c := admin(t, s, "docsecrets")
		edge, r1, r2 := secretRoutes(t, s, c)

		wantNoPlaintext(t, "the database", rawStorage(t, dsn))
		if got := snapshotSecrets(t, s, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("the data plane's snapshot: %q", got)
		}
		a, err := s.Get(ctx, c.AccountID, ep.HTTPSEdgeRoutes, edge, r1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Get(ctx, c.AccountID, ep.HTTPSEdgeRoutes, edge, r2)
		if err != nil {
			t.Fatal(err)
		}
		wantPresented(t, "get", a.(*ep.HTTPSEdgeRoute), b.(*ep.HTTPSEdgeRoute))
		list, _, err := s.List(ctx, c.AccountID, ep.HTTPSEdgeRoutes, edge, "", 10)
		if err != nil || len(list) != 2 {
			t.Fatalf("list: %d %v", len(list), err)
		}
		wantPresented(t, "list", list[1].(*ep.HTTPSEdgeRoute), list[0].(*ep.HTTPSEdgeRoute))
		e, err := s.Get(ctx, c.AccountID, ep.HTTPSEdges, "", edge)
		if err != nil {
			t.Fatal(err)
		}
		routes := e.(ep.Embedder).Children()
		wantPresented(t, "the edge's routes", routes[0].(*ep.HTTPSEdgeRoute), routes[1].(*ep.HTTPSEdgeRoute))

		var backup bytes.Buffer
		if err := s.Export(ctx, &backup); err != nil {
			t.Fatal(err)
		}
		wantNoPlaintext(t, "the export", backup.Bytes())
		var head struct {
			Protection store.SecretProtection `json:"secret_protection"`
		}
		if err := json.Unmarshal(backup.Bytes(), &head); err != nil {
			t.Fatal(err)
		}
		p := head.Protection
		want := map[string]int{"webhook_verification.secret": 1, "oauth.provider.github.client_secret": 1, "oidc.client_secret": 1}
		got := p.DocumentSecrets[ep.HTTPSEdgeRoutes.Kind]
		if len(p.DocumentSecrets) != 1 || len(got) != len(want) {
			t.Fatalf("document_secrets: %v", p.DocumentSecrets)
		}
		for f, n := range want {
			if got[f] != n {
				t.Errorf("document_secrets[%s] = %d, want %d", f, got[f], n)
			}
		}
		id := keyIDOf(t, key)
		for _, w := range []string{"3 secrets (", "1 webhook_verification.secret of https_edge_route objects",
			"sealed with AES-256-GCM under key id " + id, "the key is not in this file"} {
			if !strings.Contains(p.Summary, w) {
				t.Errorf("summary %q does not say %q", p.Summary, w)
			}
		}
		if strings.Join(p.KeyIDs, ",") != id || p.KeysIncluded || !strings.Contains(p.Encryption, "ID#FIELD") {
			t.Errorf("secret_protection: %+v", p)
		}
	})
}

// TestDocumentSecretKeptOnPut: a module PUT without client_secret keeps the stored one for the
// same application, and is refused (400, nothing written) for another client_id, provider or
// issuer; a PUT with a new secret replaces it; the webhook secret is rewritten sealed each time.
func TestDocumentSecretKeptOnPut(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := openKeyed(t, dsn, store.NewSecretKey())
		defer s.Close()
		c := admin(t, s, "keep")
		edge, r1, r2 := secretRoutes(t, s, c)
		module := func(name string) *ep.Module {
			for _, m := range ep.ModulesOf(ep.HTTPSEdgeRoutes) {
				if m.Name == name {
					return m
				}
			}
			t.Fatalf("no module %s", name)
			return nil
		}
		put := func(route, name, body string) (any, error) {
			m := module(name)
			req := decodeInto(t, body, m.NewRequest())
			if err := req.Validate(); err != nil {
				return nil, err
			}
			var out any
			_, err := s.Update(ctx, c, ep.HTTPSEdgeRoutes, edge, route, func(op *ep.Op, doc ep.Document) error {
				v, err := ep.SetModule(op, m, doc, req)
				out = v
				return err
			})
			return out, err
		}
		out, err := put(r1, "oauth", `{"provider": {"github": {"client_id": "gh-id", "client_secret": null, "scopes": ["read:org"]}}}`)
		if err != nil {
			t.Fatalf("PUT oauth without client_secret: %v", err)
		}
		if o := out.(*ep.EndpointOAuth); o.Provider.GitHub.ClientSecret != nil || o.Provider.GitHub.Scopes[0] != "read:org" {
			t.Fatalf("PUT answer: %+v", o.Provider.GitHub)
		}
		if _, err := put(r2, "oidc", `{"issuer": "https://id.example.com", "client_id": "oidc-id", "scopes": ["email"]}`); err != nil {
			t.Fatalf("PUT oidc without client_secret: %v", err)
		}
		if got := snapshotSecrets(t, s, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("after PUTs keeping the secrets: %q", got)
		}
		for _, bad := range []struct{ route, module, body, field string }{
			{r1, "oauth", `{"provider": {"github": {"client_id": "other-id"}}}`, "provider.github.client_secret"},
			{r1, "oauth", `{"provider": {"google": {"client_id": "gh-id"}}}`, "provider.google.client_secret"},
			{r2, "oidc", `{"issuer": "https://other.example.com", "client_id": "oidc-id"}`, "client_secret"},
			{r2, "oidc", `{"issuer": "https://id.example.com", "client_id": "other-id"}`, "client_secret"},
		} {
			_, err := put(bad.route, bad.module, bad.body)
			var e *ep.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != ep.CodeInvalid || e.Field != bad.field {
				t.Fatalf("PUT %s %s: %v, want 400 naming %s", bad.module, bad.body, err, bad.field)
			}
		}
		if got := snapshotSecrets(t, s, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("a refused PUT changed the secrets: %q", got)
		}
		if _, err := put(r1, "oauth", `{"provider": {"github": {"client_id": "gh-id", "client_secret": "replaced-secret"}}}`); err != nil {
			t.Fatal(err)
		}
		if got := snapshotSecrets(t, s, c.AccountID, r1, r2); got[1] != "replaced-secret" || got[0] != webhookPlain {
			t.Fatalf("after a PUT with a new secret: %q", got)
		}
		wantNoPlaintext(t, "the database", rawStorage(t, dsn))
	})
}

// TestDocumentSecretsRotateCheckImport: rotation re-seals the document secrets under the new key
// (counted with the others), the start-up check opens them and names one that does not open, an
// import under the source's key restores them and under another key restores nothing.
func TestDocumentSecretsRotateCheckImport(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		oldKey, newKey := store.NewSecretKey(), store.NewSecretKey()
		s := openKeyed(t, dsn, oldKey)
		c := admin(t, s, "rotate")
		_, r1, r2 := secretRoutes(t, s, c)
		var backup bytes.Buffer
		if err := s.Export(ctx, &backup); err != nil {
			t.Fatal(err)
		}
		s.Close()

		s = openKeyed(t, dsn, newKey)
		err := s.CheckSecrets(ctx)
		if !errors.Is(err, store.ErrSecretsUndecryptable) || !strings.Contains(err.Error(), "3 of 3 secrets do not decrypt") ||
			!strings.Contains(err.Error(), "objects "+r1+" webhook_verification.secret") {
			t.Fatalf("CheckSecrets under another key: %v", err)
		}
		if n, err := s.RotateSecrets(ctx); err == nil || n != 0 {
			t.Fatalf("RotateSecrets without the old key: %d %v", n, err)
		}
		s.Close()

		s = openKeyed(t, dsn, newKey+","+oldKey)
		if n, err := s.RotateSecrets(ctx); err != nil || n != 3 {
			t.Fatalf("RotateSecrets NEW,OLD: %d %v, want 3", n, err)
		}
		s.Close()
		s = openKeyed(t, dsn, newKey)
		if err := s.CheckSecrets(ctx); err != nil {
			t.Fatalf("CheckSecrets under NEW after the rotation: %v", err)
		}
		if got := snapshotSecrets(t, s, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("after the rotation: %q", got)
		}
		s.Close()

		// The backup, taken under the old key, into fresh databases of the same engine.
		engine := "sqlite"
		if store.IsPostgres(dsn) {
			engine = "postgres"
		}
		wrong := openKeyed(t, testdb.Fresh(t, engine), newKey)
		defer wrong.Close()
		err = wrong.Import(ctx, bytes.NewReader(backup.Bytes()))
		if !errors.Is(err, store.ErrSecretsUndecryptable) || !strings.Contains(err.Error(), "3 of 3 secrets") || !strings.Contains(err.Error(), "Nothing was restored") {
			t.Fatalf("import under another key: %v", err)
		}
		if has, err := wrong.HasAccounts(ctx); err != nil || has {
			t.Fatalf("the refused import restored accounts: %v %v", has, err)
		}
		right := openKeyed(t, testdb.Fresh(t, engine), oldKey)
		defer right.Close()
		if err := right.Import(ctx, bytes.NewReader(backup.Bytes())); err != nil {
			t.Fatalf("import under the source's key: %v", err)
		}
		if err := right.CheckSecrets(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snapshotSecrets(t, right, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("after the import: %q", got)
		}
	})
}
