package edgeplane

import (
	"strings"
	"testing"
)

// The route modules that decide who reaches a route: oauth, oidc, saml, user_agent_filter and
// jwt_validation, checked as a module PUT sends them. Every refusal is 400 ERR_NGROK_215.

// TestValidateOAuth: exactly one provider member; client_secret needs client_id (a client_id
// alone passes here: the write keeps the stored secret or refuses, see TestKeepSecrets), and only
// its own application may ask for scopes, each one token;
// allowed emails are bare addresses and domains hostnames; GitHub teams are "<org>/<team>"; the
// cookie prefix can start a cookie name.
func TestValidateOAuth(t *testing.T) {
	o := fromJSON[EndpointOAuthMutate]
	g := func(app string) *EndpointOAuthMutate { return o(`{"provider": {"google": ` + app + `}}`) }
	gh := func(app string) *EndpointOAuthMutate { return o(`{"provider": {"github": ` + app + `}}`) }
	cases := []vcase{
		pass("managed application", o(`{"provider": {"github": {}}}`)),
		pass("every setting", o(`{"enabled": true, "options_passthrough": true, "cookie_prefix": "myapp.", "inactivity_timeout": 3600,
			"maximum_duration": 86400, "auth_check_interval": 300, "provider": {"github": {"client_id": "id", "client_secret": "s",
			"scopes": ["read:org", "user:email"], "email_addresses": ["a@example.com"], "email_domains": ["example.com"],
			"teams": ["my-org/my-team"], "organizations": ["my-org"]}}}`)),
		failMsg("no provider", o(`{}`), "provider", CodeInvalid, "is required"),
		failMsg("empty provider", o(`{"provider": {}}`), "provider", CodeInvalid, "names no identity provider"),
		fail("null members", o(`{"provider": {"github": null, "google": null}}`), "provider", CodeInvalid),
		failMsg("two providers", o(`{"provider": {"github": {}, "google": {}}}`), "provider", CodeInvalid, "names github and google"),
		pass("own application", g(`{"client_id": "id", "client_secret": "s"}`)),
		pass("empty client strings are the managed application", g(`{"client_id": "", "client_secret": ""}`)),
		pass("client_id alone (the write keeps the stored secret or refuses)", g(`{"client_id": "id"}`)),
		fail("client_secret alone", g(`{"client_secret": "s"}`), "provider.google.client_id", CodeInvalid),
		pass("client_id with empty secret (as client_id alone)", g(`{"client_id": "id", "client_secret": ""}`)),
		pass("scopes with own application", g(`{"client_id": "id", "client_secret": "s", "scopes": ["openid", "https://www.googleapis.com/auth/userinfo.email"]}`)),
		failMsg("scopes with the managed application", g(`{"scopes": ["openid"]}`), "provider.google.scopes", CodeInvalid, "fixed scopes"),
		pass("empty scopes with the managed application", g(`{"scopes": []}`)),
		failMsg("empty scope", g(`{"client_id": "id", "client_secret": "s", "scopes": [""]}`), "provider.google.scopes[0]", CodeInvalid, "must not be empty"),
		failMsg("two scopes in one", g(`{"client_id": "id", "client_secret": "s", "scopes": ["openid", "email profile"]}`), "provider.google.scopes[1]", CodeInvalid, "its own list entry"),
		fail("scope with a quote", g(`{"client_id": "id", "client_secret": "s", "scopes": ["a\"b"]}`), "provider.google.scopes[0]", CodeInvalid),
		fail("scope with a backslash", g(`{"client_id": "id", "client_secret": "s", "scopes": ["a\\b"]}`), "provider.google.scopes[0]", CodeInvalid),
		fail("scope not ASCII", g(`{"client_id": "id", "client_secret": "s", "scopes": ["é"]}`), "provider.google.scopes[0]", CodeInvalid),
		pass("email addresses", g(`{"email_addresses": ["a@example.com", "first.last+tag@sub.example.org"]}`)),
		failMsg("email with a display name", g(`{"email_addresses": ["a@example.com", "Ann <ann@example.com>"]}`), "provider.google.email_addresses[1]", CodeInvalid, "bare email address"),
		fail("email without domain", g(`{"email_addresses": ["ann"]}`), "provider.google.email_addresses[0]", CodeInvalid),
		fail("empty email", g(`{"email_addresses": [""]}`), "provider.google.email_addresses[0]", CodeInvalid),
		fail("email with spaces", g(`{"email_addresses": [" a@example.com"]}`), "provider.google.email_addresses[0]", CodeInvalid),
		pass("email domains", g(`{"email_domains": ["example.com", "corp.example.org"]}`)),
		failMsg("email domain with @", g(`{"email_domains": ["@example.com"]}`), "provider.google.email_domains[0]", CodeInvalid, "domain name"),
		fail("wildcard email domain", g(`{"email_domains": ["*.example.com"]}`), "provider.google.email_domains[0]", CodeInvalid),
		fail("single-label email domain", g(`{"email_domains": ["example.com", "localhost"]}`), "provider.google.email_domains[1]", CodeInvalid),
		pass("GitHub teams and organizations", gh(`{"teams": ["my-org/my-team", "o/t.2_x"], "organizations": ["my-org", "Org2"]}`)),
		failMsg("team without organization", gh(`{"teams": ["my-team"]}`), "provider.github.teams[0]", CodeInvalid, `"my-org/my-team"`),
		fail("team with empty slug", gh(`{"teams": ["my-org/"]}`), "provider.github.teams[0]", CodeInvalid),
		fail("team with empty organization", gh(`{"teams": ["/my-team"]}`), "provider.github.teams[0]", CodeInvalid),
		fail("team of three parts", gh(`{"teams": ["a/b", "a/b/c"]}`), "provider.github.teams[1]", CodeInvalid),
		fail("team with a space", gh(`{"teams": ["my org/team"]}`), "provider.github.teams[0]", CodeInvalid),
		failMsg("organization with a slash", gh(`{"organizations": ["my-org/x"]}`), "provider.github.organizations[0]", CodeInvalid, "organization slug"),
		fail("empty organization", gh(`{"organizations": [""]}`), "provider.github.organizations[0]", CodeInvalid),
		fail("app checked before teams", gh(`{"client_secret": "s", "teams": ["x"]}`), "provider.github.client_id", CodeInvalid),
		pass("cookie prefix with token characters", o(`{"cookie_prefix": "__Host-app_1!", "provider": {"gitlab": {}}}`)),
		pass("empty cookie prefix is the default", o(`{"cookie_prefix": "", "provider": {"gitlab": {}}}`)),
		failMsg("cookie prefix with a space", o(`{"cookie_prefix": "my app", "provider": {"gitlab": {}}}`), "cookie_prefix", CodeInvalid, "cannot start a cookie name"),
		fail("cookie prefix with =", o(`{"cookie_prefix": "a=b", "provider": {"gitlab": {}}}`), "cookie_prefix", CodeInvalid),
		fail("cookie prefix with ;", o(`{"cookie_prefix": "a;", "provider": {"gitlab": {}}}`), "cookie_prefix", CodeInvalid),
		fail("cookie prefix before provider", o(`{"cookie_prefix": "a b"}`), "cookie_prefix", CodeInvalid),
	}
	for _, p := range OAuthProviders {
		cases = append(cases, pass("managed "+p, o(`{"provider": {"`+p+`": {}}}`)),
			fail("half an application for "+p, o(`{"provider": {"`+p+`": {"client_secret": "x"}}}`), "provider."+p+".client_id", CodeInvalid))
	}
	runCases(t, cases)
}

// TestValidateOIDC: the issuer is required, an absolute http(s) URL without credentials, query
// or fragment; client_id is required (client_secret too, but by the write, which may keep the
// stored one: TestKeepSecrets); scopes are single tokens.
func TestValidateOIDC(t *testing.T) {
	o := func(issuer, rest string) *EndpointOIDCMutate {
		return fromJSON[EndpointOIDCMutate](`{"issuer": "` + issuer + `", "client_id": "c", "client_secret": "s"` + rest + `}`)
	}
	runCases(t, []vcase{
		pass("https issuer", o("https://id.example.com", "")),
		pass("http issuer", o("http://localhost:8080", "")),
		pass("issuer with a path", o("https://login.example.com/tenant/v2.0/", `, "scopes": ["openid", "email"], "cookie_prefix": "oidc."`)),
		failMsg("no issuer", fromJSON[EndpointOIDCMutate](`{"client_id": "c", "client_secret": "s"}`), "issuer", CodeInvalid, "is required"),
		fail("empty issuer", o("", ""), "issuer", CodeInvalid),
		failMsg("issuer without scheme", o("id.example.com", ""), "issuer", CodeInvalid, "absolute https or http URL"),
		fail("issuer of another scheme", o("ftp://id.example.com", ""), "issuer", CodeInvalid),
		fail("issuer without host", o("https://", ""), "issuer", CodeInvalid),
		fail("issuer with credentials", o("https://u:p@id.example.com", ""), "issuer", CodeInvalid),
		fail("issuer that does not parse", o("https://id example.com", ""), "issuer", CodeInvalid),
		failMsg("issuer with a query", o("https://id.example.com/?tenant=1", ""), "issuer", CodeInvalid, "query or fragment"),
		fail("issuer with a fragment", o("https://id.example.com/#x", ""), "issuer", CodeInvalid),
		fail("issuer with an empty fragment", o("https://id.example.com/#", ""), "issuer", CodeInvalid),
		failMsg("no client_id", fromJSON[EndpointOIDCMutate](`{"issuer": "https://id.example.com", "client_secret": "s"}`), "client_id", CodeInvalid, "is required"),
		fail("empty client_id", fromJSON[EndpointOIDCMutate](`{"issuer": "https://id.example.com", "client_id": "", "client_secret": "s"}`), "client_id", CodeInvalid),
		pass("no client_secret (the write keeps the stored one or refuses)", fromJSON[EndpointOIDCMutate](`{"issuer": "https://id.example.com", "client_id": "c"}`)),
		failMsg("two scopes in one", o("https://id.example.com", `, "scopes": ["openid", "email profile"]`), "scopes[1]", CodeInvalid, "its own list entry"),
		fail("empty scope", o("https://id.example.com", `, "scopes": [""]`), "scopes[0]", CodeInvalid),
		fail("bad cookie prefix", o("https://id.example.com", `, "cookie_prefix": "a,b"`), "cookie_prefix", CodeInvalid),
		fail("cookie prefix before issuer", fromJSON[EndpointOIDCMutate](`{"cookie_prefix": " "}`), "cookie_prefix", CodeInvalid),
	})
}

// entity is IdP metadata with the root element's attributes and content.
func entity(attrs, content string) string {
	return `<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata"` + attrs + `>` + content + `</EntityDescriptor>`
}

// TestValidateSAML: idp_metadata is required and must be well-formed XML whose one root element
// is a SAML metadata EntityDescriptor with an entityID, without DOCTYPE or text around it;
// nameid_format is one of SAML's formats; authorized groups are not blank.
func TestValidateSAML(t *testing.T) {
	const md = "idp_metadata"
	good := entity(` entityID="https://idp.example.com/"`, `<IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol"/>`)
	s := func(metadata string) *EndpointSAMLMutate { return &EndpointSAMLMutate{IdPMetadata: &metadata} }
	withFormat := func(f string) *EndpointSAMLMutate { return &EndpointSAMLMutate{IdPMetadata: &good, NameIDFormat: &f} }
	cases := []vcase{
		pass("metadata", s(good)),
		pass("declaration, comment and spaces", s("<?xml version=\"1.0\"?>\n<!-- idp -->\n"+good+"\n")),
		pass("prefixed namespace", s(`<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="e"></md:EntityDescriptor>`)),
		pass("every setting", &EndpointSAMLMutate{IdPMetadata: &good, ForceAuthn: ptr(true), AllowIdPInitiated: ptr(false),
			AuthorizedGroups: []string{"admins", "ops team"}, NameIDFormat: ptr(""), authSessionMutate: authSessionMutate{CookiePrefix: ptr("saml.")}}),
		failMsg("no metadata", fromJSON[EndpointSAMLMutate](`{"force_authn": true}`), md, CodeInvalid, "is required"),
		fail("blank metadata", s(" \n "), md, CodeInvalid),
		failMsg("not XML", s("<EntityDescriptor"), md, CodeInvalid, "not well-formed XML"),
		fail("unclosed element", s(`<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="e">`), md, CodeInvalid),
		failMsg("text only", s("https://idp.example.com/metadata"), md, CodeInvalid, "text outside"),
		fail("text after the element", s(good+"x"), md, CodeInvalid),
		failMsg("only a comment", s("<!-- nothing -->"), md, CodeInvalid, "has no XML element"),
		failMsg("other root", s(`<EntitiesDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata"></EntitiesDescriptor>`), md, CodeInvalid, "must be an EntityDescriptor"),
		fail("no namespace", s(`<EntityDescriptor entityID="e"></EntityDescriptor>`), md, CodeInvalid),
		fail("other namespace", s(`<EntityDescriptor xmlns="urn:example" entityID="e"></EntityDescriptor>`), md, CodeInvalid),
		failMsg("no entityID", s(entity("", "")), md, CodeInvalid, "no entityID"),
		fail("empty entityID", s(entity(` entityID=""`, "")), md, CodeInvalid),
		fail("entityID in a namespace", s(entity(` xmlns:x="urn:x" x:entityID="e"`, "")), md, CodeInvalid),
		failMsg("two roots", s(good+good), md, CodeInvalid, "more than one root"),
		failMsg("DOCTYPE", s(`<!DOCTYPE x [<!ENTITY e "e">]>`+good), md, CodeInvalid, "DOCTYPE"),
		pass("no name id format", withFormat("")),
		failMsg("unknown name id format", withFormat("email"), "nameid_format", CodeInvalid, "is not supported"),
		fail("name id format in other case", withFormat(strings.ToLower(DefaultNameIDFormat)), "nameid_format", CodeInvalid),
		failMsg("empty group", &EndpointSAMLMutate{IdPMetadata: &good, AuthorizedGroups: []string{""}}, "authorized_groups[0]", CodeInvalid, "must not be empty"),
		fail("blank group", &EndpointSAMLMutate{IdPMetadata: &good, AuthorizedGroups: []string{"a", " "}}, "authorized_groups[1]", CodeInvalid),
		fail("bad cookie prefix", &EndpointSAMLMutate{IdPMetadata: &good, authSessionMutate: authSessionMutate{CookiePrefix: ptr("a\"b")}}, "cookie_prefix", CodeInvalid),
		fail("metadata before name id format", &EndpointSAMLMutate{IdPMetadata: ptr("x"), NameIDFormat: ptr("x")}, md, CodeInvalid),
	}
	for _, f := range SAMLNameIDFormats {
		cases = append(cases, pass(f, withFormat(f)))
	}
	runCases(t, cases)
}

// TestValidateUserAgentFilter: allow and deny are lists of at most 64 Go (RE2) regular
// expressions; one that does not compile is named by its index.
func TestValidateUserAgentFilter(t *testing.T) {
	u := fromJSON[EndpointUserAgentFilterMutate]
	runCases(t, []vcase{
		pass("empty", u(`{}`)),
		pass("allow and deny", u(`{"allow": ["(?i)^curl/\\d+", "Mozilla/5\\.0 .*"], "deny": ["(?i)bot|crawler|spider", ""]}`)),
		pass("64 regexes", &EndpointUserAgentFilterMutate{Allow: strs(MaxUserAgentRegexes, func(i int) string { return "a{" + strings.Repeat("1", 1+i%2) + "}" })}),
		failMsg("65 regexes", &EndpointUserAgentFilterMutate{Deny: strs(MaxUserAgentRegexes+1, func(int) string { return "x" })}, "deny", CodeInvalid, "at most 64"),
		failMsg("unclosed group", u(`{"allow": ["("]}`), "allow[0]", CodeInvalid, "not a valid regular expression"),
		fail("unclosed class", u(`{"deny": ["ok", "[a-"]}`), "deny[1]", CodeInvalid),
		fail("lookahead", u(`{"deny": ["(?=bot)"]}`), "deny[0]", CodeInvalid),
		fail("backreference", u(`{"allow": ["(a)\\1"]}`), "allow[0]", CodeInvalid),
		fail("repeat over 1000", u(`{"allow": ["a{1001}"]}`), "allow[0]", CodeInvalid),
		pass("repeat of 1000", u(`{"allow": ["a{1000}"]}`)),
		fail("allow before deny", u(`{"deny": ["("], "allow": ["("]}`), "allow[0]", CodeInvalid),
	})
}

// TestValidateJWTValidation: issuers are absolute http(s) URLs, audiences not blank, token
// locations of a known type and method with a name (a header name for headers), algorithms from
// the JOSE list but none, and key sources absolute https URLs.
func TestValidateJWTValidation(t *testing.T) {
	j := fromJSON[EndpointJWTValidationMutate]
	tok := func(loc string) *EndpointJWTValidationMutate { return j(`{"http": {"tokens": [` + loc + `]}}`) }
	alg := func(a string) *EndpointJWTValidationMutate {
		return j(`{"jws": {"allowed_algorithms": ["RS256", "` + a + `"]}}`)
	}
	jku := func(u string) *EndpointJWTValidationMutate {
		return j(`{"jws": {"keys": {"sources": {"additional_jkus": ["` + u + `"]}}}}`)
	}
	cases := []vcase{
		pass("empty", j(`{}`)),
		pass("null parts", j(`{"issuer": null, "audience": null, "http": null, "jws": null}`)),
		pass("everything", j(`{"enabled": true, "issuer": {"allow_list": [{"value": "https://issuer.example.com/"}, {"value": "http://localhost:9000"}]},
			"audience": {"allow_list": [{"value": "api://default"}]},
			"http": {"tokens": [{"type": "at+jwt", "method": "header", "name": "Authorization", "prefix": "Bearer "}, {"method": "body", "name": "access token"}]},
			"jws": {"allowed_algorithms": ["RS256", "ES256"], "keys": {"sources": {"additional_jkus": ["https://keys.example.com/jwks.json"]}}}}`)),
		failMsg("issuer not a URL", j(`{"issuer": {"allow_list": [{"value": "issuer"}]}}`), "issuer.allow_list[0].value", CodeInvalid, "absolute https or http URL"),
		fail("empty issuer", j(`{"issuer": {"allow_list": [{"value": "https://a.example.com"}, {"value": ""}]}}`), "issuer.allow_list[1].value", CodeInvalid),
		fail("issuer of another scheme", j(`{"issuer": {"allow_list": [{"value": "urn:issuer"}]}}`), "issuer.allow_list[0].value", CodeInvalid),
		failMsg("blank audience", j(`{"audience": {"allow_list": [{"value": "a"}, {"value": " "}]}}`), "audience.allow_list[1].value", CodeInvalid, "must not be empty"),
		pass("default type and method", tok(`{"name": "X-Token"}`)),
		failMsg("unknown type", tok(`{"type": "id_token", "name": "X-Token"}`), "http.tokens[0].type", CodeInvalid, "jwt, at+jwt, it+jwt"),
		fail("type in capitals", tok(`{"type": "JWT", "name": "X-Token"}`), "http.tokens[0].type", CodeInvalid),
		failMsg("unknown method", tok(`{"name": "X-Token"}, {"method": "query", "name": "t"}`), "http.tokens[1].method", CodeInvalid, `"header" or "body"`),
		failMsg("no name", tok(`{"method": "body"}`), "http.tokens[0].name", CodeInvalid, "is required"),
		failMsg("header name with a space", tok(`{"name": "X Token"}`), "http.tokens[0].name", CodeInvalid, "not a valid HTTP header name"),
		fail("header name with a colon", tok(`{"method": "header", "name": "Authorization:"}`), "http.tokens[0].name", CodeInvalid),
		pass("body field with a space", tok(`{"method": "body", "name": "access token"}`)),
		failMsg("none", alg("none"), "jws.allowed_algorithms[1]", CodeInvalid, "unsigned tokens"),
		fail("NONE", alg("NONE"), "jws.allowed_algorithms[1]", CodeInvalid),
		failMsg("lower case", alg("rs256"), "jws.allowed_algorithms[1]", CodeInvalid, "case-sensitive"),
		fail("unknown algorithm", alg("HS1"), "jws.allowed_algorithms[1]", CodeInvalid),
		fail("empty algorithm", alg(""), "jws.allowed_algorithms[1]", CodeInvalid),
		failMsg("http key source", jku("http://keys.example.com/jwks.json"), "jws.keys.sources.additional_jkus[0]", CodeInvalid, "absolute https URL"),
		fail("key source without scheme", jku("keys.example.com/jwks.json"), "jws.keys.sources.additional_jkus[0]", CodeInvalid),
		fail("key source with credentials", jku("https://u@keys.example.com/"), "jws.keys.sources.additional_jkus[0]", CodeInvalid),
		fail("issuer before audience", j(`{"audience": {"allow_list": [{"value": ""}]}, "issuer": {"allow_list": [{"value": ""}]}}`), "issuer.allow_list[0].value", CodeInvalid),
	}
	for _, tt := range JWTTokenTypes {
		cases = append(cases, pass("type "+tt, tok(`{"type": "`+tt+`", "name": "Authorization"}`)))
	}
	for _, a := range JWSAlgorithms {
		cases = append(cases, pass("algorithm "+a, alg(a)))
	}
	runCases(t, cases)
}
