package server_test

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"reflect"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// Tests of the route authentication modules: oauth, saml, oidc, user_agent_filter and
// jwt_validation (route_auth.go), and the rule that a route has at most one of oauth, saml and
// oidc.

// testIdPMetadata is a minimal but real SAML IdP EntityDescriptor.
const testIdPMetadata = `<?xml version="1.0" encoding="UTF-8"?>
<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="https://idp.example.com/metadata">
  <md:IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">
    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect" Location="https://idp.example.com/sso"/>
  </md:IDPSSODescriptor>
</md:EntityDescriptor>
`

// authModuleFixtures are valid PUT bodies of the five modules, for the generic module lifecycle
// test of modules_test.go, which walks the module table.
var authModuleFixtures = map[string]map[string]any{
	"https_edge_route/oauth": {
		"provider": map[string]any{"github": map[string]any{
			"client_id": "gh-client", "client_secret": "gh-secret", "scopes": []any{"read:org", "user:email"},
			"email_domains": []any{"example.com"}, "teams": []any{"acme/ops"}, "organizations": []any{"acme"},
		}},
		"cookie_prefix": "acme.", "inactivity_timeout": 3600, "maximum_duration": 86400, "auth_check_interval": 300,
		"options_passthrough": true,
	},
	"https_edge_route/saml": {
		"idp_metadata": testIdPMetadata, "force_authn": true, "authorized_groups": []any{"admins"},
		"nameid_format": "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress",
	},
	"https_edge_route/oidc": {
		"issuer": "https://accounts.example.com", "client_id": "oidc-client", "client_secret": "oidc-secret",
		"scopes": []any{"openid", "email"}, "maximum_duration": 7200,
	},
	"https_edge_route/user_agent_filter": {"allow": []any{`^curl/`, `(?i)firefox`}, "deny": []any{`(?i)bot`}},
	"https_edge_route/jwt_validation": {
		"issuer":   map[string]any{"allow_list": []any{map[string]any{"value": "https://issuer.example.com"}}},
		"audience": map[string]any{"allow_list": []any{map[string]any{"value": "api://edge"}}},
		"http": map[string]any{"tokens": []any{map[string]any{
			"type": "jwt", "method": "header", "name": "Authorization", "prefix": "Bearer ",
		}}},
		"jws": map[string]any{"allowed_algorithms": []any{"RS256", "ES256"},
			"keys": map[string]any{"sources": map[string]any{"additional_jkus": []any{"https://keys.example.com/jwks.json"}}}},
	},
}

func init() { registerModuleFixtures(authModuleFixtures) }

// authRoute is a new HTTPS edge with one route; path is the route's object path.
type authRoute struct {
	edgeID, id, path string
}

func newAuthRoute(t *testing.T, e *env) authRoute {
	t.Helper()
	edge := e.do(e.admin.token, "POST", "/edges/https", map[string]any{}).must(t, 201).str("id")
	id := e.do(e.admin.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/x"}).must(t, 201).str("id")
	return authRoute{edgeID: edge, id: id, path: "/edges/https/" + edge + "/routes/" + id}
}

func wantAuthJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, w := normJSON(t, got), normJSON(t, want)
	if !reflect.DeepEqual(g, w) {
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(w)
		t.Fatalf("%s:\n got %s\nwant %s", what, gj, wj)
	}
}

// wantAuthError asserts a 400 with the code, naming the field in details and at the start of msg.
func wantAuthError(t *testing.T, r resp, code int, field string) {
	t.Helper()
	r.wantError(t, 400, code)
	wantField(t, r, field)
	if !strings.HasPrefix(r.msg(), field+": ") {
		t.Fatalf("message should start with %q: %s", field+": ", r.msg())
	}
}

// moduleRoundTrip PUTs body as module name of the route and asserts the exact response (want,
// or the response itself when want is nil), that GET, the route and the edge's embedded route
// show the same, then DELETE (204), GET 404 and null on the route. It returns the PUT response.
func moduleRoundTrip(t *testing.T, e *env, r authRoute, name string, body, want any) map[string]any {
	t.Helper()
	path := r.path + "/" + name
	put := e.do(e.admin.token, "PUT", path, body).must(t, 200)
	if want != nil {
		wantAuthJSON(t, "PUT "+name, put.body, want)
	}
	wantAuthJSON(t, "GET "+name, e.do(e.admin.token, "GET", path, nil).must(t, 200).body, put.body)
	route := e.do(e.admin.token, "GET", r.path, nil).must(t, 200)
	wantAuthJSON(t, "route's "+name, route.body[name], put.body)
	routes := e.do(e.admin.token, "GET", "/edges/https/"+r.edgeID, nil).must(t, 200).items(t, "routes")
	wantAuthJSON(t, "edge's route's "+name, routes[0][name], put.body)

	del := e.do(e.admin.token, "DELETE", path, nil).must(t, 204)
	if len(del.raw) != 0 {
		t.Fatalf("DELETE %s: 204 with a body %q", name, del.raw)
	}
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
	route = e.do(e.admin.token, "GET", r.path, nil).must(t, 200)
	if v, ok := route.body[name]; !ok || v != nil {
		t.Fatalf("route after DELETE %s: %s = %v (present %v), want null", name, name, v, ok)
	}
	return put.body
}

// inBodies checks that the module is accepted in a route create body and a route PATCH, giving
// the module want (or, for want nil, what check accepts).
func inBodies(t *testing.T, e *env, name string, body any, check func(routeID string, got any)) {
	t.Helper()
	edge := e.do(e.admin.token, "POST", "/edges/https", map[string]any{}).must(t, 201).str("id")
	created := e.do(e.admin.token, "POST", "/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/created", name: body}).must(t, 201)
	check(created.str("id"), created.body[name])
	got := e.do(e.admin.token, "GET", "/edges/https/"+edge+"/routes/"+created.str("id")+"/"+name, nil).must(t, 200)
	wantAuthJSON(t, "GET of a module set at create", got.body, created.body[name])

	r := e.do(e.admin.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "exact_path", "match": "/patched"}).must(t, 201)
	if r.body[name] != nil {
		t.Fatalf("new route has %s: %s", name, r.raw)
	}
	path := "/edges/https/" + edge + "/routes/" + r.str("id")
	patched := e.do(e.admin.token, "PATCH", path, map[string]any{name: body}).must(t, 200)
	check(r.str("id"), patched.body[name])
	// PATCH without the module, or with null, leaves it.
	after := e.do(e.admin.token, "PATCH", path, map[string]any{"description": "d", name: nil}).must(t, 200)
	wantAuthJSON(t, "module after a PATCH that does not name it", after.body[name], patched.body[name])
	wantAuthJSON(t, "GET of a module set by PATCH", e.do(e.admin.token, "GET", path+"/"+name, nil).must(t, 200).body, patched.body[name])
}

// exactly returns a check for inBodies that wants the module equal to want.
func exactly(t *testing.T, want any) func(string, any) {
	return func(_ string, got any) { t.Helper(); wantAuthJSON(t, "module in a route body", got, want) }
}

// --- oauth -------------------------------------------------------------------------------------

// oauthWant is the response of an oauth module with provider member name set to member and the
// session settings at their defaults unless overridden.
func oauthWant(name string, member map[string]any, session map[string]any) map[string]any {
	prov := map[string]any{}
	for _, p := range ep.OAuthProviders {
		prov[p] = nil
	}
	prov[name] = member
	out := map[string]any{"enabled": true, "provider": prov, "options_passthrough": false, "cookie_prefix": "ngrok.",
		"inactivity_timeout": 0, "maximum_duration": 0, "auth_check_interval": 0}
	for k, v := range session {
		out[k] = v
	}
	return out
}

func emptyMember(github bool) map[string]any {
	m := map[string]any{"client_id": nil, "client_secret": nil, "scopes": []any{}, "email_addresses": []any{}, "email_domains": []any{}}
	if github {
		m["teams"], m["organizations"] = []any{}, []any{}
	}
	return m
}

// TestOAuthModule: every provider with its defaults (managed application: null client_id and
// client_secret, [] lists, other members null, cookie prefix "ngrok.", numbers 0), a full GitHub
// configuration returned as given but for its secret (never returned: null; see
// client_secrets_test.go), and the module in route bodies.
func TestOAuthModule(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	for _, p := range ep.OAuthProviders {
		moduleRoundTrip(t, e, r, "oauth", map[string]any{"provider": map[string]any{p: map[string]any{}}},
			oauthWant(p, emptyMember(p == "github"), nil))
	}

	full := authModuleFixtures["https_edge_route/oauth"]
	wantFull := oauthWant("github", map[string]any{
		"client_id": "gh-client", "client_secret": nil, "scopes": []any{"read:org", "user:email"},
		"email_addresses": []any{}, "email_domains": []any{"example.com"}, "teams": []any{"acme/ops"}, "organizations": []any{"acme"},
	}, map[string]any{"cookie_prefix": "acme.", "inactivity_timeout": 3600, "maximum_duration": 86400, "auth_check_interval": 300,
		"options_passthrough": true})
	moduleRoundTrip(t, e, r, "oauth", full, wantFull)

	// A managed-application member with allow lists, enabled false, explicit nulls and "".
	body := map[string]any{"enabled": false, "cookie_prefix": "", "inactivity_timeout": nil, "provider": map[string]any{
		"google": map[string]any{"client_id": "", "client_secret": nil, "email_addresses": []any{"ann@example.com", "bob@example.org"}},
		"github": nil,
	}}
	want := oauthWant("google", map[string]any{"client_id": nil, "client_secret": nil, "scopes": []any{},
		"email_addresses": []any{"ann@example.com", "bob@example.org"}, "email_domains": []any{}}, map[string]any{"enabled": false})
	moduleRoundTrip(t, e, r, "oauth", body, want)

	inBodies(t, e, "oauth", full, exactly(t, wantFull))
}

// TestOAuthModuleRules: each rule of the OAuth module is a 400 naming the field, on PUT and, with
// the module's name in front, in a route create body and a PATCH.
func TestOAuthModuleRules(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/oauth"
	prov := func(name string, member map[string]any) map[string]any {
		return map[string]any{"provider": map[string]any{name: member}}
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"no provider", map[string]any{}, "provider"},
		{"null provider", map[string]any{"provider": nil}, "provider"},
		{"provider without a member", map[string]any{"provider": map[string]any{}}, "provider"},
		{"provider with only null members", map[string]any{"provider": map[string]any{"github": nil, "google": nil}}, "provider"},
		{"two members", map[string]any{"provider": map[string]any{"github": map[string]any{}, "google": map[string]any{}}}, "provider"},
		{"client_id without client_secret", prov("github", map[string]any{"client_id": "id"}), "provider.github.client_secret"},
		{"client_id with an empty client_secret", prov("amazon", map[string]any{"client_id": "id", "client_secret": ""}), "provider.amazon.client_secret"},
		{"client_secret without client_id", prov("google", map[string]any{"client_secret": "s"}), "provider.google.client_id"},
		{"scopes without client_id and client_secret", prov("gitlab", map[string]any{"scopes": []any{"read_user"}}), "provider.gitlab.scopes"},
		{"scopes with client_id only", prov("twitch", map[string]any{"client_id": "id", "scopes": []any{"user:read:email"}}), "provider.twitch.client_secret"},
		{"scopes as one string", prov("microsoft", map[string]any{"client_id": "id", "client_secret": "s", "scopes": []any{"openid email"}}), "provider.microsoft.scopes[0]"},
		{"empty scope", prov("linkedin", map[string]any{"client_id": "id", "client_secret": "s", "scopes": []any{"r_liteprofile", ""}}), "provider.linkedin.scopes[1]"},
		{"team without org", prov("github", map[string]any{"teams": []any{"acme/ops", "ops"}}), "provider.github.teams[1]"},
		{"team with empty slug", prov("github", map[string]any{"teams": []any{"acme/"}}), "provider.github.teams[0]"},
		{"team with empty org", prov("github", map[string]any{"teams": []any{"/ops"}}), "provider.github.teams[0]"},
		{"team with two slashes", prov("github", map[string]any{"teams": []any{"acme/ops/x"}}), "provider.github.teams[0]"},
		{"organization with a slash", prov("github", map[string]any{"organizations": []any{"acme/ops"}}), "provider.github.organizations[0]"},
		{"empty organization", prov("github", map[string]any{"organizations": []any{""}}), "provider.github.organizations[0]"},
		{"not an email", prov("facebook", map[string]any{"email_addresses": []any{"not-an-email"}}), "provider.facebook.email_addresses[0]"},
		{"email with a display name", prov("facebook", map[string]any{"email_addresses": []any{"Ann <ann@example.com>"}}), "provider.facebook.email_addresses[0]"},
		{"bad email domain", prov("google", map[string]any{"email_domains": []any{"example.com", "not a domain"}}), "provider.google.email_domains[1]"},
		{"email domain given as an address", prov("google", map[string]any{"email_domains": []any{"@example.com"}}), "provider.google.email_domains[0]"},
		{"cookie prefix with a space", merge(prov("google", map[string]any{}), map[string]any{"cookie_prefix": "my app"}), "cookie_prefix"},
		{"cookie prefix with a semicolon", merge(prov("google", map[string]any{}), map[string]any{"cookie_prefix": "a;b"}), "cookie_prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			wantAuthError(t, e.do(e.admin.token, "PUT", path, c.body), ep.CodeInvalid, c.field)
		})
	}
	e.t = t

	// Decoding: negative and too large numbers, unknown members and fields.
	wantAuthError(t, e.do(e.admin.token, "PUT", path, merge(prov("google", map[string]any{}), map[string]any{"inactivity_timeout": -1})), ep.CodeInvalid, "inactivity_timeout")
	wantAuthError(t, e.do(e.admin.token, "PUT", path, merge(prov("google", map[string]any{}), map[string]any{"auth_check_interval": 1 << 32})), ep.CodeInvalid, "auth_check_interval")
	e.do(e.admin.token, "PUT", path, prov("okta", map[string]any{})).wantError(t, 400, ep.CodeUnknownField)
	e.do(e.admin.token, "PUT", path, prov("google", map[string]any{"teams": []any{"acme/ops"}})).wantError(t, 400, ep.CodeUnknownField)
	e.do(e.admin.token, "PUT", path, prov("github", map[string]any{"client": "x"})).wantError(t, 400, ep.CodeUnknownField)
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)

	// In a route create body and a PATCH, the field is named under "oauth".
	bad := map[string]any{"provider": map[string]any{"github": map[string]any{"client_id": "id"}}}
	routes := "/edges/https/" + r.edgeID + "/routes"
	wantAuthError(t, e.do(e.admin.token, "POST", routes, map[string]any{"match_type": "path_prefix", "match": "/bad", "oauth": bad}),
		ep.CodeInvalid, "oauth.provider.github.client_secret")
	wantAuthError(t, e.do(e.admin.token, "PATCH", r.path, map[string]any{"oauth": map[string]any{}}), ep.CodeInvalid, "oauth.provider")
	if got := e.do(e.admin.token, "GET", r.path, nil).must(t, 200).body["oauth"]; got != nil {
		t.Fatalf("a refused PATCH set oauth: %v", got)
	}
}

// --- saml --------------------------------------------------------------------------------------

// samlCert parses and checks a request signing certificate: one PEM CERTIFICATE block, RSA,
// self-signed, valid now for years, not a CA, for signatures.
func samlCert(t *testing.T, pemText string) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode([]byte(pemText))
	if block == nil || block.Type != "CERTIFICATE" || strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("request_signing_certificate_pem is not one PEM certificate: %q", pemText)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.PublicKey.(*rsa.PublicKey); !ok {
		t.Fatalf("key type %T, want RSA", c.PublicKey)
	}
	// Self-signed: its own key verifies its signature (CheckSignatureFrom would demand a CA).
	if err := c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		t.Fatalf("certificate is not self-signed: %v", err)
	}
	now := time.Now()
	if now.Before(c.NotBefore) || now.After(c.NotAfter) || c.NotAfter.Before(now.AddDate(5, 0, 0)) {
		t.Fatalf("validity %s..%s", c.NotBefore, c.NotAfter)
	}
	if c.IsCA || c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		t.Fatalf("certificate: CA %v, key usage %v", c.IsCA, c.KeyUsage)
	}
	return c
}

// samlWant is the response of a saml module on the route with the server's base URL, given the
// certificate the server generated (checked separately).
func samlWant(base, routeID, cert string, over map[string]any) map[string]any {
	sp := base + "/saml/" + routeID
	out := map[string]any{
		"enabled": true, "options_passthrough": false, "cookie_prefix": "ngrok.", "inactivity_timeout": 0, "maximum_duration": 0,
		"idp_metadata": testIdPMetadata, "force_authn": false, "allow_idp_initiated": false, "authorized_groups": []any{},
		"entity_id": sp + "/metadata", "metadata_url": sp + "/metadata",
		"assertion_consumer_service_url": sp + "/acs", "single_logout_url": sp + "/slo",
		"request_signing_certificate_pem": cert, "nameid_format": "urn:oasis:names:tc:SAML:2.0:nameid-format:persistent",
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

func noPrivateKey(t *testing.T, r resp) {
	t.Helper()
	if strings.Contains(string(r.raw), "PRIVATE KEY") {
		t.Fatalf("a response shows a private key: %s", r.raw)
	}
}

// TestSAMLModule: defaults, the generated service provider URLs under the base URL and the
// route id, a real self-signed signing certificate that a PUT keeps and a new configuration
// after DELETE replaces, every name identifier format, and the module in route bodies.
func TestSAMLModule(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/saml"

	put := e.do(e.admin.token, "PUT", path, map[string]any{"idp_metadata": testIdPMetadata}).must(t, 200)
	noPrivateKey(t, put)
	cert := put.str("request_signing_certificate_pem")
	samlCert(t, cert)
	wantAuthJSON(t, "PUT saml", put.body, samlWant(e.base, r.id, cert, nil))
	wantAuthJSON(t, "GET saml", e.do(e.admin.token, "GET", path, nil).must(t, 200).body, put.body)
	route := e.do(e.admin.token, "GET", r.path, nil).must(t, 200)
	noPrivateKey(t, route)
	wantAuthJSON(t, "route's saml", route.body["saml"], put.body)

	// A PUT changing other fields keeps the certificate, so the IdP's configuration stays valid.
	body := merge(authModuleFixtures["https_edge_route/saml"], map[string]any{
		"allow_idp_initiated": true, "options_passthrough": true, "cookie_prefix": "sso_", "inactivity_timeout": 600, "maximum_duration": 3600,
		"authorized_groups": []any{"admins", "ops"},
	})
	changed := e.do(e.admin.token, "PUT", path, body).must(t, 200)
	wantAuthJSON(t, "PUT saml with every field", changed.body, samlWant(e.base, r.id, cert, map[string]any{
		"force_authn": true, "allow_idp_initiated": true, "options_passthrough": true, "cookie_prefix": "sso_",
		"inactivity_timeout": 600, "maximum_duration": 3600, "authorized_groups": []any{"admins", "ops"},
		"nameid_format": "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress",
	}))
	// A PATCH of the route with saml keeps it too.
	patched := e.do(e.admin.token, "PATCH", r.path, map[string]any{"saml": map[string]any{"idp_metadata": testIdPMetadata, "enabled": false}}).must(t, 200)
	wantAuthJSON(t, "saml set by PATCH", patched.body["saml"], samlWant(e.base, r.id, cert, map[string]any{"enabled": false}))

	// DELETE, and a new configuration gets a new certificate.
	e.do(e.admin.token, "DELETE", path, nil).must(t, 204)
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
	if v := e.do(e.admin.token, "GET", r.path, nil).must(t, 200).body["saml"]; v != nil {
		t.Fatalf("route's saml after DELETE: %v", v)
	}
	again := e.do(e.admin.token, "PUT", path, map[string]any{"idp_metadata": testIdPMetadata}).must(t, 200)
	if c := again.str("request_signing_certificate_pem"); c == cert {
		t.Fatal("a new SAML configuration kept the deleted one's certificate")
	} else {
		samlCert(t, c)
		wantAuthJSON(t, "PUT saml after DELETE", again.body, samlWant(e.base, r.id, c, nil))
	}

	// Every supported name identifier format; the IdP metadata with a default namespace.
	for _, f := range []string{
		"urn:oasis:names:tc:SAML:2.0:nameid-format:persistent", "urn:oasis:names:tc:SAML:2.0:nameid-format:transient",
		"urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress", "urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified",
		"urn:oasis:names:tc:SAML:1.1:nameid-format:X509SubjectName", "urn:oasis:names:tc:SAML:1.1:nameid-format:WindowsDomainQualifiedName",
		"urn:oasis:names:tc:SAML:2.0:nameid-format:kerberos", "urn:oasis:names:tc:SAML:2.0:nameid-format:entity",
	} {
		got := e.do(e.admin.token, "PUT", path, map[string]any{"idp_metadata": testIdPMetadata, "nameid_format": f}).must(t, 200)
		if got.str("nameid_format") != f {
			t.Fatalf("nameid_format %q, want %q", got.str("nameid_format"), f)
		}
	}
	plain := `<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="urn:idp"><IDPSSODescriptor/></EntityDescriptor>`
	if got := e.do(e.admin.token, "PUT", path, map[string]any{"idp_metadata": plain}).must(t, 200); got.str("idp_metadata") != plain {
		t.Fatalf("idp_metadata not kept as given: %s", got.raw)
	}
	moduleRoundTrip(t, e, r, "saml", map[string]any{"idp_metadata": testIdPMetadata}, nil)

	// In route bodies: the URLs use the new route's id.
	inBodies(t, e, "saml", map[string]any{"idp_metadata": testIdPMetadata}, func(routeID string, got any) {
		m, _ := got.(map[string]any)
		c, _ := m["request_signing_certificate_pem"].(string)
		samlCert(t, c)
		wantAuthJSON(t, "saml in a route body", got, samlWant(e.base, routeID, c, nil))
	})
}

// TestSAMLModuleBaseURL: behind a proxy at https://host/api, the service provider URLs start
// with it.
func TestSAMLModuleBaseURL(t *testing.T) {
	e := newEnvBase(t, "https://proxy.example.test/api")
	r := newAuthRoute(t, e)
	got := e.do(e.admin.token, "PUT", r.path+"/saml", map[string]any{"idp_metadata": testIdPMetadata}).must(t, 200)
	want := "https://proxy.example.test/api/saml/" + r.id
	if got.str("entity_id") != want+"/metadata" || got.str("metadata_url") != want+"/metadata" ||
		got.str("assertion_consumer_service_url") != want+"/acs" || got.str("single_logout_url") != want+"/slo" {
		t.Fatalf("service provider URLs not under %s: %s", want, got.raw)
	}
}

// TestSAMLModuleRules: each rule of the SAML module is a 400 naming the field.
func TestSAMLModuleRules(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/saml"
	md := func(extra map[string]any) map[string]any {
		return merge(map[string]any{"idp_metadata": testIdPMetadata}, extra)
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"no idp_metadata", map[string]any{}, "idp_metadata"},
		{"empty idp_metadata", md(map[string]any{"idp_metadata": "  "}), "idp_metadata"},
		{"not XML", md(map[string]any{"idp_metadata": "https://idp.example.com/metadata"}), "idp_metadata"},
		{"malformed XML", md(map[string]any{"idp_metadata": `<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="x">`}), "idp_metadata"},
		{"another root element", md(map[string]any{"idp_metadata": `<EntitiesDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata"/>`}), "idp_metadata"},
		{"EntityDescriptor without namespace", md(map[string]any{"idp_metadata": `<EntityDescriptor entityID="x"/>`}), "idp_metadata"},
		{"EntityDescriptor of another namespace", md(map[string]any{"idp_metadata": `<EntityDescriptor xmlns="urn:example" entityID="x"/>`}), "idp_metadata"},
		{"no entityID", md(map[string]any{"idp_metadata": `<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata"/>`}), "idp_metadata"},
		{"two root elements", md(map[string]any{"idp_metadata": testIdPMetadata + testIdPMetadata[strings.Index(testIdPMetadata, "<md:"):]}), "idp_metadata"},
		{"text after the root", md(map[string]any{"idp_metadata": testIdPMetadata + "trailing"}), "idp_metadata"},
		{"DOCTYPE", md(map[string]any{"idp_metadata": `<!DOCTYPE x [<!ENTITY e "v">]><EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="x"/>`}), "idp_metadata"},
		{"unknown nameid_format", md(map[string]any{"nameid_format": "urn:oasis:names:tc:SAML:2.0:nameid-format:encrypted"}), "nameid_format"},
		{"nameid_format in the wrong case", md(map[string]any{"nameid_format": "urn:oasis:names:tc:SAML:1.1:nameid-format:emailaddress"}), "nameid_format"},
		{"empty group", md(map[string]any{"authorized_groups": []any{"admins", ""}}), "authorized_groups[1]"},
		{"bad cookie prefix", md(map[string]any{"cookie_prefix": "a=b"}), "cookie_prefix"},
		{"negative duration", md(map[string]any{"maximum_duration": -5}), "maximum_duration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			wantAuthError(t, e.do(e.admin.token, "PUT", path, c.body), ep.CodeInvalid, c.field)
		})
	}
	e.t = t
	// The generated fields cannot be set.
	for _, f := range []string{"entity_id", "metadata_url", "assertion_consumer_service_url", "single_logout_url", "request_signing_certificate_pem"} {
		e.do(e.admin.token, "PUT", path, md(map[string]any{f: "x"})).wantError(t, 400, ep.CodeUnknownField)
	}
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
	wantAuthError(t, e.do(e.admin.token, "POST", "/edges/https/"+r.edgeID+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/bad", "saml": map[string]any{"idp_metadata": "<x/>"}}), ep.CodeInvalid, "saml.idp_metadata")
	wantAuthError(t, e.do(e.admin.token, "PATCH", r.path, map[string]any{"saml": map[string]any{}}), ep.CodeInvalid, "saml.idp_metadata")
}

// --- oidc --------------------------------------------------------------------------------------

// TestOIDCModule: defaults (cookie prefix "ngrok.", numbers 0, scopes []), values as given but
// the client secret (never returned: null), and the module in route bodies.
func TestOIDCModule(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	minimal := map[string]any{"issuer": "https://id.example.com/realms/main", "client_id": "edge", "client_secret": "s3cret"}
	wantMin := map[string]any{"enabled": true, "options_passthrough": false, "cookie_prefix": "ngrok.", "inactivity_timeout": 0,
		"maximum_duration": 0, "issuer": "https://id.example.com/realms/main", "client_id": "edge", "client_secret": nil, "scopes": []any{}}
	moduleRoundTrip(t, e, r, "oidc", minimal, wantMin)

	full := merge(authModuleFixtures["https_edge_route/oidc"], map[string]any{"enabled": false, "options_passthrough": true,
		"cookie_prefix": "oidc.", "inactivity_timeout": 900, "issuer": "http://localhost:8180/realms/dev"})
	wantFull := map[string]any{"enabled": false, "options_passthrough": true, "cookie_prefix": "oidc.", "inactivity_timeout": 900,
		"maximum_duration": 7200, "issuer": "http://localhost:8180/realms/dev", "client_id": "oidc-client", "client_secret": nil,
		"scopes": []any{"openid", "email"}}
	moduleRoundTrip(t, e, r, "oidc", full, wantFull)
	inBodies(t, e, "oidc", minimal, exactly(t, wantMin))
}

// TestOIDCModuleRules: each rule of the OIDC module is a 400 naming the field.
func TestOIDCModuleRules(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/oidc"
	ok := map[string]any{"issuer": "https://id.example.com", "client_id": "c", "client_secret": "s"}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"no issuer", map[string]any{"client_id": "c", "client_secret": "s"}, "issuer"},
		{"empty issuer", merge(ok, map[string]any{"issuer": ""}), "issuer"},
		{"issuer not a URL", merge(ok, map[string]any{"issuer": "id.example.com"}), "issuer"},
		{"issuer relative", merge(ok, map[string]any{"issuer": "/realms/main"}), "issuer"},
		{"issuer of another scheme", merge(ok, map[string]any{"issuer": "ftp://id.example.com"}), "issuer"},
		{"issuer without host", merge(ok, map[string]any{"issuer": "https://"}), "issuer"},
		{"issuer with a query", merge(ok, map[string]any{"issuer": "https://id.example.com/?tenant=a"}), "issuer"},
		{"issuer with a fragment", merge(ok, map[string]any{"issuer": "https://id.example.com/#a"}), "issuer"},
		{"issuer with credentials", merge(ok, map[string]any{"issuer": "https://user:pw@id.example.com"}), "issuer"},
		{"no client_id", map[string]any{"issuer": "https://id.example.com", "client_secret": "s"}, "client_id"},
		{"empty client_id", merge(ok, map[string]any{"client_id": ""}), "client_id"},
		{"no client_secret", map[string]any{"issuer": "https://id.example.com", "client_id": "c"}, "client_secret"},
		{"null client_secret", merge(ok, map[string]any{"client_secret": nil}), "client_secret"},
		{"scopes as one string", merge(ok, map[string]any{"scopes": []any{"openid profile"}}), "scopes[0]"},
		{"empty scope", merge(ok, map[string]any{"scopes": []any{"openid", ""}}), "scopes[1]"},
		{"bad cookie prefix", merge(ok, map[string]any{"cookie_prefix": "a,b"}), "cookie_prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			wantAuthError(t, e.do(e.admin.token, "PUT", path, c.body), ep.CodeInvalid, c.field)
		})
	}
	e.t = t
	e.do(e.admin.token, "PUT", path, merge(ok, map[string]any{"auth_check_interval": 1})).wantError(t, 400, ep.CodeUnknownField)
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
	wantAuthError(t, e.do(e.admin.token, "PATCH", r.path, map[string]any{"oidc": merge(ok, map[string]any{"issuer": "nope"})}), ep.CodeInvalid, "oidc.issuer")
}

// --- user_agent_filter -------------------------------------------------------------------------

// TestUserAgentFilterModule: [] for lists not given, patterns kept as given, route bodies.
func TestUserAgentFilterModule(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	moduleRoundTrip(t, e, r, "user_agent_filter", map[string]any{}, map[string]any{"enabled": true, "allow": []any{}, "deny": []any{}})
	moduleRoundTrip(t, e, r, "user_agent_filter", map[string]any{"allow": nil, "deny": []any{`(?i)bot`, `^$`}},
		map[string]any{"enabled": true, "allow": []any{}, "deny": []any{`(?i)bot`, `^$`}})
	body := authModuleFixtures["https_edge_route/user_agent_filter"]
	want := map[string]any{"enabled": false, "allow": []any{`^curl/`, `(?i)firefox`}, "deny": []any{`(?i)bot`}}
	moduleRoundTrip(t, e, r, "user_agent_filter", merge(body, map[string]any{"enabled": false}), want)
	inBodies(t, e, "user_agent_filter", body, exactly(t, merge(want, map[string]any{"enabled": true})))
}

// TestUserAgentFilterModuleRules: every entry must compile as a Go regular expression.
func TestUserAgentFilterModuleRules(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/user_agent_filter"
	wantAuthError(t, e.do(e.admin.token, "PUT", path, map[string]any{"allow": []any{"("}}), ep.CodeInvalid, "allow[0]")
	wantAuthError(t, e.do(e.admin.token, "PUT", path, map[string]any{"allow": []any{"ok"}, "deny": []any{"bot", "[a-"}}), ep.CodeInvalid, "deny[1]")
	// Perl lookaheads are not RE2.
	wantAuthError(t, e.do(e.admin.token, "PUT", path, map[string]any{"deny": []any{`^(?!curl)`}}), ep.CodeInvalid, "deny[0]")
	wantAuthError(t, e.do(e.admin.token, "PUT", path, map[string]any{"allow": "curl"}), ep.CodeInvalid, "allow")
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
	wantAuthError(t, e.do(e.admin.token, "POST", "/edges/https/"+r.edgeID+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/bad", "user_agent_filter": map[string]any{"allow": []any{"*"}}}), ep.CodeInvalid, "user_agent_filter.allow[0]")
}

// --- jwt_validation ----------------------------------------------------------------------------

// jwtWant is the response of an empty jwt_validation module with parts overridden.
func jwtWant(over map[string]any) map[string]any {
	out := map[string]any{
		"enabled":  true,
		"issuer":   map[string]any{"allow_list": []any{}},
		"audience": map[string]any{"allow_list": []any{}},
		"http":     map[string]any{"tokens": []any{}},
		"jws":      map[string]any{"allowed_algorithms": []any{}, "keys": map[string]any{"sources": map[string]any{"additional_jkus": []any{}}}},
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// TestJWTValidationModule: the spec's shape echoed with [] for empty lists, token locations with
// their defaults (type jwt, method header), every JOSE algorithm, and route bodies.
func TestJWTValidationModule(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	moduleRoundTrip(t, e, r, "jwt_validation", map[string]any{}, jwtWant(nil))
	moduleRoundTrip(t, e, r, "jwt_validation", map[string]any{"issuer": nil, "http": map[string]any{"tokens": nil}, "jws": map[string]any{"keys": nil}}, jwtWant(nil))

	full := authModuleFixtures["https_edge_route/jwt_validation"]
	wantFull := jwtWant(map[string]any{
		"issuer":   map[string]any{"allow_list": []any{map[string]any{"value": "https://issuer.example.com"}}},
		"audience": map[string]any{"allow_list": []any{map[string]any{"value": "api://edge"}}},
		"http":     map[string]any{"tokens": []any{map[string]any{"type": "jwt", "method": "header", "name": "Authorization", "prefix": "Bearer "}}},
		"jws": map[string]any{"allowed_algorithms": []any{"RS256", "ES256"},
			"keys": map[string]any{"sources": map[string]any{"additional_jkus": []any{"https://keys.example.com/jwks.json"}}}},
	})
	moduleRoundTrip(t, e, r, "jwt_validation", full, wantFull)

	tokens := map[string]any{"enabled": false, "http": map[string]any{"tokens": []any{
		map[string]any{"name": "X-Token"},
		map[string]any{"type": "at+jwt", "method": "body", "name": "access token"},
		map[string]any{"type": "it+jwt", "name": "Authorization", "prefix": "Bearer "},
	}}}
	moduleRoundTrip(t, e, r, "jwt_validation", tokens, jwtWant(map[string]any{"enabled": false, "http": map[string]any{"tokens": []any{
		map[string]any{"type": "jwt", "method": "header", "name": "X-Token", "prefix": ""},
		map[string]any{"type": "at+jwt", "method": "body", "name": "access token", "prefix": ""},
		map[string]any{"type": "it+jwt", "method": "header", "name": "Authorization", "prefix": "Bearer "},
	}}}))

	algs := []any{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}
	moduleRoundTrip(t, e, r, "jwt_validation", map[string]any{"jws": map[string]any{"allowed_algorithms": algs}},
		jwtWant(map[string]any{"jws": map[string]any{"allowed_algorithms": algs, "keys": map[string]any{"sources": map[string]any{"additional_jkus": []any{}}}}}))

	inBodies(t, e, "jwt_validation", full, exactly(t, wantFull))
}

// TestJWTValidationModuleRules: each rule of the JWT validation module is a 400 naming the
// field by its path in the module.
func TestJWTValidationModuleRules(t *testing.T) {
	e := newEnv(t)
	r := newAuthRoute(t, e)
	path := r.path + "/jwt_validation"
	token := func(tok map[string]any) map[string]any {
		return map[string]any{"http": map[string]any{"tokens": []any{map[string]any{"name": "Authorization"}, tok}}}
	}
	jws := func(algs ...any) map[string]any {
		return map[string]any{"jws": map[string]any{"allowed_algorithms": algs}}
	}
	jku := func(u string) map[string]any {
		return map[string]any{"jws": map[string]any{"keys": map[string]any{"sources": map[string]any{"additional_jkus": []any{u}}}}}
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"issuer not a URL", map[string]any{"issuer": map[string]any{"allow_list": []any{map[string]any{"value": "issuer"}}}}, "issuer.allow_list[0].value"},
		{"empty issuer", map[string]any{"issuer": map[string]any{"allow_list": []any{map[string]any{"value": "https://a.example"}, map[string]any{}}}}, "issuer.allow_list[1].value"},
		{"empty audience", map[string]any{"audience": map[string]any{"allow_list": []any{map[string]any{"value": ""}}}}, "audience.allow_list[0].value"},
		{"token type", token(map[string]any{"type": "jws", "name": "A"}), "http.tokens[1].type"},
		{"token type in upper case", token(map[string]any{"type": "JWT", "name": "A"}), "http.tokens[1].type"},
		{"token method", token(map[string]any{"method": "query", "name": "A"}), "http.tokens[1].method"},
		{"token without name", token(map[string]any{"type": "jwt", "method": "header"}), "http.tokens[1].name"},
		{"header token with a bad name", token(map[string]any{"method": "header", "name": "Bad Header"}), "http.tokens[1].name"},
		{"algorithm none", jws("RS256", "none"), "jws.allowed_algorithms[1]"},
		{"algorithm NONE", jws("NONE"), "jws.allowed_algorithms[0]"},
		{"algorithm in lower case", jws("rs256"), "jws.allowed_algorithms[0]"},
		{"unknown algorithm", jws("RSA-OAEP"), "jws.allowed_algorithms[0]"},
		{"jku over http", jku("http://keys.example.com/jwks.json"), "jws.keys.sources.additional_jkus[0]"},
		{"jku relative", jku("/jwks.json"), "jws.keys.sources.additional_jkus[0]"},
		{"jku without host", jku("https:///jwks.json"), "jws.keys.sources.additional_jkus[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			wantAuthError(t, e.do(e.admin.token, "PUT", path, c.body), ep.CodeInvalid, c.field)
		})
	}
	e.t = t
	e.do(e.admin.token, "PUT", path, map[string]any{"jws": map[string]any{"keys": map[string]any{"urls": []any{}}}}).wantError(t, 400, ep.CodeUnknownField)
	e.do(e.admin.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
	wantAuthError(t, e.do(e.admin.token, "PATCH", r.path, map[string]any{"jwt_validation": jws("none")}), ep.CodeInvalid, "jwt_validation.jws.allowed_algorithms[0]")
}

// --- one of oauth, saml, oidc ------------------------------------------------------------------

// TestOneLoginModulePerRoute: a second one of oauth, saml and oidc is 400 ERR_NGROK_7079 whether
// it comes by module PUT, in the route create body or in a route PATCH, and changes nothing; the
// other modules combine freely with any of them.
func TestOneLoginModulePerRoute(t *testing.T) {
	e := newEnv(t)
	bodies := map[string]any{
		"oauth": map[string]any{"provider": map[string]any{"google": map[string]any{}}},
		"saml":  map[string]any{"idp_metadata": testIdPMetadata},
		"oidc":  map[string]any{"issuer": "https://id.example.com", "client_id": "c", "client_secret": "s"},
	}
	names := []string{"oauth", "saml", "oidc"}
	wantConflict := func(r resp, a, b string) {
		t.Helper()
		r.wantError(t, 400, ep.CodeOneAuthModule)
		field, _ := r.body["details"].(map[string]any)["field"].(string)
		if field != a && field != b {
			t.Fatalf("details.field %q, want %s or %s: %s", field, a, b, r.raw)
		}
		if !strings.Contains(r.msg(), a) || !strings.Contains(r.msg(), b) {
			t.Fatalf("message should name %s and %s: %s", a, b, r.msg())
		}
	}

	for _, have := range names {
		for _, add := range names {
			if have == add {
				continue
			}
			// By module PUT.
			r := newAuthRoute(t, e)
			first := e.do(e.admin.token, "PUT", r.path+"/"+have, bodies[have]).must(t, 200)
			wantConflict(e.do(e.admin.token, "PUT", r.path+"/"+add, bodies[add]), have, add)
			e.do(e.admin.token, "GET", r.path+"/"+add, nil).wantError(t, 404, ep.CodeNotFound)
			wantAuthJSON(t, "module kept after a refused PUT", e.do(e.admin.token, "GET", r.path+"/"+have, nil).must(t, 200).body, first.body)

			// By route PATCH.
			wantConflict(e.do(e.admin.token, "PATCH", r.path, map[string]any{add: bodies[add], "description": "x"}), have, add)
			route := e.do(e.admin.token, "GET", r.path, nil).must(t, 200)
			if route.body[add] != nil || route.body["description"] != "" {
				t.Fatalf("a refused PATCH changed the route: %s", route.raw)
			}

			// After DELETE the other one can be configured.
			e.do(e.admin.token, "DELETE", r.path+"/"+have, nil).must(t, 204)
			e.do(e.admin.token, "PATCH", r.path, map[string]any{add: bodies[add]}).must(t, 200)
			wantConflict(e.do(e.admin.token, "PUT", r.path+"/"+have, bodies[have]), have, add)
		}
	}

	// In the route create body: two or three of them, and nothing is created.
	edge := e.do(e.admin.token, "POST", "/edges/https", map[string]any{}).must(t, 201).str("id")
	routes := "/edges/https/" + edge + "/routes"
	wantConflict(e.do(e.admin.token, "POST", routes, map[string]any{"match_type": "path_prefix", "match": "/a",
		"oauth": bodies["oauth"], "oidc": bodies["oidc"]}), "oauth", "oidc")
	wantConflict(e.do(e.admin.token, "POST", routes, map[string]any{"match_type": "path_prefix", "match": "/a",
		"saml": bodies["saml"], "oidc": bodies["oidc"]}), "saml", "oidc")
	r := e.do(e.admin.token, "POST", routes, map[string]any{"match_type": "path_prefix", "match": "/a",
		"oauth": bodies["oauth"], "saml": bodies["saml"], "oidc": bodies["oidc"]})
	r.wantError(t, 400, ep.CodeOneAuthModule)
	if n := len(e.do(e.admin.token, "GET", "/edges/https/"+edge, nil).must(t, 200).items(t, "routes")); n != 0 {
		t.Fatalf("refused creates left %d routes", n)
	}

	// One of them with the other modules, enabled or not: fine. A disabled one still counts.
	all := map[string]any{"match_type": "path_prefix", "match": "/b",
		"oauth":             merge(bodies["oauth"].(map[string]any), map[string]any{"enabled": false}),
		"user_agent_filter": authModuleFixtures["https_edge_route/user_agent_filter"],
		"jwt_validation":    authModuleFixtures["https_edge_route/jwt_validation"]}
	created := e.do(e.admin.token, "POST", routes, all).must(t, 201)
	for _, m := range []string{"oauth", "user_agent_filter", "jwt_validation"} {
		if created.body[m] == nil {
			t.Fatalf("route has no %s: %s", m, created.raw)
		}
	}
	p := routes + "/" + created.str("id")
	wantConflict(e.do(e.admin.token, "PUT", p+"/oidc", bodies["oidc"]), "oauth", "oidc")
	// Replacing the one there is not a conflict.
	e.do(e.admin.token, "PUT", p+"/oauth", bodies["oauth"]).must(t, 200)
	e.do(e.admin.token, "PATCH", p, map[string]any{"oauth": bodies["oauth"]}).must(t, 200)
}
