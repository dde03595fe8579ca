package server_test

import (
	"context"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// Client secrets are write-only: the oauth and oidc modules' client_secret is null in
// every response, and a PUT or PATCH that leaves it out keeps the stored one while it names the
// same application (oauth: provider and client_id; oidc: issuer and client_id), so a client can
// send back the module it read. The webhook secret is returned as given. What the data plane
// gets is read from the store's snapshot, the only reader that sees the secrets.

// routeSecrets returns the secrets the data plane has for a route: oauth's client secret (any
// provider), oidc's, and the webhook secret; "" where none.
func routeSecrets(t *testing.T, e *env, routeID string) (oauth, oidc, webhook string) {
	t.Helper()
	snap, err := e.st.Snapshot(context.Background(), e.admin.caller.AccountID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range snap.ByKind[ep.HTTPSEdgeRoutes] {
		r := d.(*ep.HTTPSEdgeRoute)
		if r.ID != routeID {
			continue
		}
		for _, s := range ep.SecretsOf(ep.HTTPSEdgeRoutes, r) {
			switch s.Field {
			case "oidc.client_secret":
				oidc = s.Value
			case "webhook_verification.secret":
				webhook = s.Value
			default:
				oauth = s.Value
			}
		}
	}
	return
}

// wantNullSecret checks that the client secret of a module as the API shows it is null.
func wantNullSecret(t *testing.T, what string, module map[string]any, member string) {
	t.Helper()
	m := module
	if member != "" {
		m, _ = module["provider"].(map[string]any)[member].(map[string]any)
	}
	if v, ok := m["client_secret"]; !ok || v != nil {
		t.Fatalf("%s: client_secret = %v (present %v), want null", what, v, ok)
	}
}

// TestOAuthClientSecretWriteOnly: never returned (PUT, GET, route, edge); kept by a PUT of the
// module as read and by a route PATCH without it; a PUT or PATCH naming another client_id or
// another provider without a secret is 400 naming the field and keeps the stored module.
func TestOAuthClientSecretWriteOnly(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/oauth"
	body := map[string]any{"provider": map[string]any{"github": map[string]any{
		"client_id": "gh-client", "client_secret": "gh-secret-1", "scopes": []any{"read:org"}}}}
	put := e.do(e.admin.token, "PUT", path, body).must(t, 200)
	wantNullSecret(t, "PUT", put.body, "github")
	got := e.do(e.admin.token, "GET", path, nil).must(t, 200)
	wantNullSecret(t, "GET", got.body, "github")
	wantNullSecret(t, "the route", e.do(e.admin.token, "GET", r.path, nil).must(t, 200).body["oauth"].(map[string]any), "github")
	routes := e.do(e.admin.token, "GET", "/edges/https/"+r.edgeID, nil).must(t, 200).items(t, "routes")
	wantNullSecret(t, "the edge's route", routes[0]["oauth"].(map[string]any), "github")
	if s, _, _ := routeSecrets(t, e, r.id); s != "gh-secret-1" {
		t.Fatalf("the data plane has %q", s)
	}

	// The module as read, sent back with a change: the secret stays.
	readBack := got.body
	readBack["cookie_prefix"] = "kept."
	again := e.do(e.admin.token, "PUT", path, readBack).must(t, 200)
	wantNullSecret(t, "PUT of the module as read", again.body, "github")
	if again.body["cookie_prefix"] != "kept." {
		t.Fatalf("PUT of the module as read: %s", again.raw)
	}
	if s, _, _ := routeSecrets(t, e, r.id); s != "gh-secret-1" {
		t.Fatalf("after a PUT without client_secret the data plane has %q", s)
	}

	// Another client_id or another provider without a secret: refused, nothing changes.
	for _, c := range []struct {
		name, field string
		body        map[string]any
	}{
		{"another client_id", "provider.github.client_secret", map[string]any{"provider": map[string]any{"github": map[string]any{"client_id": "other"}}}},
		{"another provider", "provider.google.client_secret", map[string]any{"provider": map[string]any{"google": map[string]any{"client_id": "gh-client", "client_secret": nil}}}},
	} {
		wantAuthError(t, e.do(e.admin.token, "PUT", path, c.body), ep.CodeInvalid, c.field)
		wantAuthError(t, e.do(e.admin.token, "PATCH", r.path, map[string]any{"oauth": c.body}), ep.CodeInvalid, "oauth."+c.field)
		wantAuthJSON(t, "the module after a refused "+c.name, e.do(e.admin.token, "GET", path, nil).must(t, 200).body, again.body)
		if s, _, _ := routeSecrets(t, e, r.id); s != "gh-secret-1" {
			t.Fatalf("after a refused %s the data plane has %q", c.name, s)
		}
	}

	// A route PATCH without the secret keeps it; with a new one replaces it.
	patched := e.do(e.admin.token, "PATCH", r.path, map[string]any{"oauth": map[string]any{"provider": map[string]any{
		"github": map[string]any{"client_id": "gh-client", "email_domains": []any{"example.com"}}}}}).must(t, 200)
	wantNullSecret(t, "PATCH", patched.body["oauth"].(map[string]any), "github")
	if s, _, _ := routeSecrets(t, e, r.id); s != "gh-secret-1" {
		t.Fatalf("after a PATCH without client_secret the data plane has %q", s)
	}
	e.do(e.admin.token, "PUT", path, map[string]any{"provider": map[string]any{"github": map[string]any{
		"client_id": "gh-client-2", "client_secret": "gh-secret-2"}}}).must(t, 200)
	if s, _, _ := routeSecrets(t, e, r.id); s != "gh-secret-2" {
		t.Fatalf("after a PUT with a new application the data plane has %q", s)
	}

	// After DELETE nothing is kept: a client_id alone is refused again.
	e.do(e.admin.token, "DELETE", path, nil).must(t, 204)
	wantAuthError(t, e.do(e.admin.token, "PUT", path, map[string]any{"provider": map[string]any{"github": map[string]any{"client_id": "gh-client-2"}}}),
		ep.CodeInvalid, "provider.github.client_secret")
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
}

// TestOIDCClientSecretWriteOnly: the same for oidc, where the application is the issuer and the
// client_id.
func TestOIDCClientSecretWriteOnly(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/oidc"
	put := e.do(e.admin.token, "PUT", path, map[string]any{"issuer": "https://id.example.com", "client_id": "c", "client_secret": "oidc-secret-1"}).must(t, 200)
	wantNullSecret(t, "PUT", put.body, "")
	got := e.do(e.admin.token, "GET", path, nil).must(t, 200)
	wantNullSecret(t, "GET", got.body, "")
	wantNullSecret(t, "the route", e.do(e.admin.token, "GET", r.path, nil).must(t, 200).body["oidc"].(map[string]any), "")

	readBack := got.body
	readBack["scopes"] = []any{"email"}
	e.do(e.admin.token, "PUT", path, readBack).must(t, 200)
	if _, s, _ := routeSecrets(t, e, r.id); s != "oidc-secret-1" {
		t.Fatalf("after a PUT of the module as read the data plane has %q", s)
	}
	for _, c := range []struct {
		name string
		body map[string]any
	}{
		{"another issuer", map[string]any{"issuer": "https://other.example.com", "client_id": "c"}},
		{"another client_id", map[string]any{"issuer": "https://id.example.com", "client_id": "d", "client_secret": nil}},
	} {
		wantAuthError(t, e.do(e.admin.token, "PUT", path, c.body), ep.CodeInvalid, "client_secret")
		wantAuthError(t, e.do(e.admin.token, "PATCH", r.path, map[string]any{"oidc": c.body}), ep.CodeInvalid, "oidc.client_secret")
		if _, s, _ := routeSecrets(t, e, r.id); s != "oidc-secret-1" {
			t.Fatalf("after a refused %s the data plane has %q", c.name, s)
		}
	}
	e.do(e.admin.token, "PATCH", r.path, map[string]any{"oidc": map[string]any{"issuer": "https://id.example.com", "client_id": "c"}}).must(t, 200)
	if _, s, _ := routeSecrets(t, e, r.id); s != "oidc-secret-1" {
		t.Fatalf("after a PATCH without client_secret the data plane has %q", s)
	}
	// A new route has nothing to keep.
	routes := "/edges/https/" + r.edgeID + "/routes"
	wantAuthError(t, e.do(e.admin.token, "POST", routes, map[string]any{"match_type": "path_prefix", "match": "/new",
		"oidc": map[string]any{"issuer": "https://id.example.com", "client_id": "c"}}), ep.CodeInvalid, "oidc.client_secret")
}

// TestWebhookSecretShown: the webhook secret is sealed at rest like the client secrets but
// returned as given (the spec: the response is the same as the request), and the data plane
// verifies with it.
func TestWebhookSecretShown(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/webhook_verification"
	put := e.do(e.admin.token, "PUT", path, map[string]any{"provider": "github", "secret": "whsec-shown"}).must(t, 200)
	for what, m := range map[string]any{
		"PUT": put.body, "GET": e.do(e.admin.token, "GET", path, nil).must(t, 200).body,
		"the route":        e.do(e.admin.token, "GET", r.path, nil).must(t, 200).body["webhook_verification"],
		"the edge's route": e.do(e.admin.token, "GET", "/edges/https/"+r.edgeID, nil).must(t, 200).items(t, "routes")[0]["webhook_verification"],
	} {
		if s := m.(map[string]any)["secret"]; s != "whsec-shown" {
			t.Fatalf("%s: secret %v, want it as given", what, s)
		}
	}
	if _, _, s := routeSecrets(t, e, r.id); s != "whsec-shown" {
		t.Fatalf("the data plane has %q", s)
	}
}
