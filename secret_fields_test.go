package edgeplane

import (
	"encoding/json"
	"testing"
)

// TestSecretsOf: the route's module secrets are found through the module table, named by their
// path in the route, the client secrets hidden and the webhook secret shown; only the route
// collection holds any; redacting a client secret renders it null.
func TestSecretsOf(t *testing.T) {
	for _, r := range Resources {
		if got, want := HoldsSecrets(r), r == HTTPSEdgeRoutes; got != want {
			t.Errorf("HoldsSecrets(%s) = %v, want %v", r.Kind, got, want)
		}
	}
	route := &HTTPSEdgeRoute{}
	if s := SecretsOf(HTTPSEdgeRoutes, route); len(s) != 0 {
		t.Fatalf("a route without modules has secrets: %+v", s)
	}
	id, secret := "gh-id", "gh-secret"
	route.WebhookVerification = &EndpointWebhookValidation{Provider: "github", Secret: "whsec"}
	route.OAuth = &EndpointOAuth{Provider: &EndpointOAuthProvider{GitHub: &EndpointOAuthGitHub{
		EndpointOAuthProviderApp: EndpointOAuthProviderApp{ClientID: &id, ClientSecret: &secret}}}}
	got := SecretsOf(HTTPSEdgeRoutes, route)
	if len(got) != 2 || got[0].Field != "webhook_verification.secret" || got[0].Value != "whsec" || got[0].Hidden ||
		got[1].Field != "oauth.provider.github.client_secret" || got[1].Value != "gh-secret" || !got[1].Hidden {
		t.Fatalf("SecretsOf: %+v", got)
	}
	got[0].Set("ep1:sealed")
	got[1].Set("")
	if route.WebhookVerification.Secret != "ep1:sealed" || route.OAuth.Provider.GitHub.ClientSecret != nil || secret != "gh-secret" {
		t.Fatalf("Set: webhook %q, oauth %v, the original string %q", route.WebhookVerification.Secret, route.OAuth.Provider.GitHub.ClientSecret, secret)
	}
	out, _ := json.Marshal(route.OAuth.Provider.GitHub)
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	if v, ok := m["client_secret"]; !ok || v != nil {
		t.Fatalf("a redacted client secret renders %v, want null: %s", v, out)
	}
	oidc := &EndpointOIDC{Issuer: "https://id.example.com", ClientID: "c"}
	route.OIDC = oidc
	if s := SecretsOf(HTTPSEdgeRoutes, route); len(s) != 1 {
		t.Fatalf("an OIDC module without a client secret declares one: %+v", s)
	}
}

// TestKeepSecrets: a module written without its client secret keeps the stored one only for the
// same application (provider and client_id for OAuth, issuer and client_id for OIDC); otherwise
// the write is refused naming the field. The managed OAuth application needs none.
func TestKeepSecrets(t *testing.T) {
	oauth := func(provider, id, secret string) *EndpointOAuth {
		app := EndpointOAuthProviderApp{}
		if id != "" {
			app.ClientID = &id
		}
		if secret != "" {
			app.ClientSecret = &secret
		}
		p := &EndpointOAuthProvider{}
		switch provider {
		case "github":
			p.GitHub = &EndpointOAuthGitHub{EndpointOAuthProviderApp: app}
		case "google":
			p.Google = &app
		}
		return &EndpointOAuth{Provider: p}
	}
	stored := oauth("github", "id", "s3cret")
	kept := oauth("github", "id", "")
	if err := kept.KeepSecrets(stored); err != nil || *kept.Provider.GitHub.ClientSecret != "s3cret" {
		t.Fatalf("same provider and client_id: %v", err)
	}
	given := oauth("github", "id", "new")
	if err := given.KeepSecrets(stored); err != nil || *given.Provider.GitHub.ClientSecret != "new" {
		t.Fatalf("a new secret given: %v", err)
	}
	if err := oauth("github", "", "").KeepSecrets(nil); err != nil {
		t.Fatalf("the managed application: %v", err)
	}
	for name, c := range map[string]struct {
		mod   *EndpointOAuth
		prev  any
		field string
	}{
		"no stored module":    {oauth("github", "id", ""), nil, "provider.github.client_secret"},
		"another client_id":   {oauth("github", "other", ""), stored, "provider.github.client_secret"},
		"another provider":    {oauth("google", "id", ""), stored, "provider.google.client_secret"},
		"stored without one":  {oauth("github", "id", ""), oauth("github", "", ""), "provider.github.client_secret"},
		"another module type": {oauth("github", "id", ""), &EndpointOIDC{ClientID: "id"}, "provider.github.client_secret"},
	} {
		wantInvalid(t, name, c.mod.KeepSecrets(c.prev), c.field)
	}

	s := "oidc-secret"
	prev := &EndpointOIDC{Issuer: "https://id.example.com", ClientID: "c", ClientSecret: &s}
	o := &EndpointOIDC{Issuer: "https://id.example.com", ClientID: "c"}
	if err := o.KeepSecrets(prev); err != nil || *o.ClientSecret != "oidc-secret" {
		t.Fatalf("oidc, same issuer and client_id: %v", err)
	}
	wantInvalid(t, "oidc, another issuer", (&EndpointOIDC{Issuer: "https://other.example.com", ClientID: "c"}).KeepSecrets(prev), "client_secret")
	wantInvalid(t, "oidc, another client_id", (&EndpointOIDC{Issuer: "https://id.example.com", ClientID: "d"}).KeepSecrets(prev), "client_secret")
	wantInvalid(t, "oidc, nothing stored", (&EndpointOIDC{Issuer: "https://id.example.com", ClientID: "c"}).KeepSecrets(nil), "client_secret")
}

func wantInvalid(t *testing.T, name string, err error, field string) {
	t.Helper()
	e, ok := err.(*Error)
	if !ok || e.Status != 400 || e.Code != CodeInvalid || e.Field != field {
		t.Errorf("%s: got %v, want 400 ERR_NGROK_%d naming %s", name, err, CodeInvalid, field)
	}
}
