package server_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// TestBackupRoundTrip fills a database with every kind of object through the API, exports it,
// imports it into an empty database of each engine, and requires every GET and list to answer
// byte for byte as before, and the old API keys to keep working.
func TestBackupRoundTrip(t *testing.T) {
	const base = "https://api.example.test"
	// A restore needs the source's secret key (import refuses secrets it cannot decrypt): the
	// source and every target take this process's EDGEPLANE_SECRET_KEY.
	testdb.EnsureSecretKey()
	src := newEnvConfig(t, server.Config{BaseURL: base})
	a := src.newAccount("backup")
	b := src.newAccount("backup-2")

	var paths []string // every object and list path to compare
	for _, acct := range []account{a, b} {
		for _, res := range ep.Resources {
			fx := fixtures[res.Kind]
			path := collectionPath(src, acct, res, fx)
			id := src.do(acct.token, "POST", path, fx.create(src, acct)).must(t, 201).str("id")
			src.do(acct.token, "PATCH", path+"/"+id, fx.update).must(t, 200)
			paths = append(paths, path, path+"/"+id)
		}
	}
	// Modules and references across objects.
	policy := src.do(a.token, "POST", "/ip_policies", nil).must(t, 201).str("id")
	src.do(a.token, "POST", "/ip_policy_rules", map[string]any{"ip_policy_id": policy, "cidr": "10.0.0.0/8", "action": "deny"}).must(t, 201)
	backend := staticBackend(src, a)
	edge := src.do(a.token, "POST", "/edges/https", map[string]any{"hostports": []any{reserve(src, a) + ":443"},
		"tls_termination": map[string]any{"min_version": "1.3"}}).must(t, 201).str("id")
	route := src.do(a.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend":         map[string]any{"backend_id": backend},
		"ip_restriction":  map[string]any{"ip_policy_ids": []any{policy}},
		"circuit_breaker": map[string]any{"num_buckets": 20},
		"request_headers": map[string]any{"add": map[string]any{"x-env": "prod"}, "remove": []any{"cookie"}},
		// Module secrets, sealed inside the document: they restore under the same key on both
		// engines, the webhook one shown, the client secret null.
		"webhook_verification": map[string]any{"provider": "slack", "secret": "backup-webhook-secret"},
		"oauth":                map[string]any{"provider": map[string]any{"gitlab": map[string]any{"client_id": "cid", "client_secret": "backup-oauth-secret"}}},
	}).must(t, 201).str("id")
	oidcRoute := src.do(a.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/sso",
		"oidc": map[string]any{"issuer": "https://id.example.com", "client_id": "cid", "client_secret": "backup-oidc-secret"},
	}).must(t, 201).str("id")
	paths = append(paths, "/edges/https/"+edge, "/edges/https/"+edge+"/tls_termination",
		"/edges/https/"+edge+"/routes/"+route, "/edges/https/"+edge+"/routes/"+route+"/backend",
		"/edges/https/"+edge+"/routes/"+route+"/webhook_verification", "/edges/https/"+edge+"/routes/"+oidcRoute+"/oidc",
		"/ip_policy_rules", "/ip_policies/"+policy)
	sort.Strings(paths)

	snapshot := func(e *env) map[string]string {
		out := map[string]string{}
		for _, p := range paths {
			tok := a.token
			r := e.do(tok, "GET", p, nil)
			if r.status == 404 {
				r = e.do(b.token, "GET", p, nil)
			}
			out[p] = strings.TrimSpace(string(r.raw))
		}
		return out
	}
	before := snapshot(src)

	var backup bytes.Buffer
	if err := src.st.Export(context.Background(), &backup); err != nil {
		t.Fatal(err)
	}
	for _, engine := range testdb.Engines() {
		t.Run("into "+engine, func(t *testing.T) {
			dst, err := store.Open(context.Background(), testdb.Fresh(t, engine))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dst.Close() })
			if err := dst.Import(context.Background(), bytes.NewReader(backup.Bytes())); err != nil {
				t.Fatal(err)
			}
			// A second import into the now non-empty database is refused and changes nothing.
			if err := dst.Import(context.Background(), bytes.NewReader(backup.Bytes())); !errors.Is(err, store.ErrNotEmpty) {
				t.Fatalf("import into a non-empty database: %v", err)
			}
			srv := httptest.NewServer(server.New(dst, server.Config{BaseURL: base}))
			t.Cleanup(srv.Close)
			restored := &env{t: t, st: dst, srv: srv, base: base}
			after := snapshot(restored)
			for _, p := range paths {
				if before[p] != after[p] {
					t.Errorf("%s differs after the round trip:\nbefore %s\nafter  %s", p, before[p], after[p])
				}
			}
			// The data plane of the restored database gets the module secrets opened.
			restored.admin = a
			if o, _, w := routeSecrets(t, restored, route); o != "backup-oauth-secret" || w != "backup-webhook-secret" {
				t.Fatalf("restored route's secrets: oauth %q webhook %q", o, w)
			}
			if _, o, _ := routeSecrets(t, restored, oidcRoute); o != "backup-oidc-secret" {
				t.Fatalf("restored oidc secret: %q", o)
			}
			// Old keys authenticate; writes work and keep uniqueness (claims were restored).
			restored.do(a.token, "POST", "/ip_policies", nil).must(t, 201)
			domains := restored.do(a.token, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains")
			if len(domains) == 0 {
				t.Fatal("no reserved domain in the restored account")
			}
			name := domains[0]["domain"]
			restored.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": name}).wantError(t, 409, ep.CodeDomainReserved)
			restored.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": name}).wantError(t, 409, ep.CodeDomainReservedElsewhere)
		})
	}

	// Garbage and foreign documents are refused without writing anything.
	for _, bad := range []string{``, `[]`, `{"format":"other"}`, `{"format":"edgeplane-backup","version":99}`, `{"format":"edgeplane-backup","version":1,"accounts":[{"id":1}]}`,
		// A failure after rows were written (an account, then an object that is not one).
		`{"format":"edgeplane-backup","version":1,"accounts":[{"id":"acc_2HzbFYz5FgmRQRlDE2qDhEzXS2G","name":"a","created_at":"2026-01-01T00:00:00Z"}],"objects":[{"id":1}]}`} {
		dst, err := store.Open(context.Background(), testdb.Fresh(t, "sqlite"))
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.Import(context.Background(), strings.NewReader(bad)); err == nil {
			t.Errorf("import of %q succeeded", bad)
		}
		if has, _ := dst.HasAccounts(context.Background()); has {
			t.Errorf("a failed import of %q left data behind", bad)
		}
		dst.Close()
	}
}
