package edgeplane

import (
	"net/mail"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The route modules that decide who may reach a route: OAuth, SAML and OIDC log visitors in
// through an identity provider (at most one of the three per route), JWT validation checks
// bearer tokens, and the user agent filter allows or denies clients by their User-Agent header.
// Each has a request shape with Validate (body-only rules) and Build (defaults and generated
// fields), and a response shape stored in the route. Lists in responses are [] rather than null
// so clients can range over them without a nil check.

// routeAuth holds the route modules that authenticate or filter visitors. It is embedded in
// HTTPSEdgeRoute, so the fields appear in route documents like every other module.
type routeAuth struct {
	OAuth           *EndpointOAuth           `json:"oauth"`
	SAML            *EndpointSAML            `json:"saml"`
	OIDC            *EndpointOIDC            `json:"oidc"`
	UserAgentFilter *EndpointUserAgentFilter `json:"user_agent_filter"`
	JWTValidation   *EndpointJWTValidation   `json:"jwt_validation"`
}

// routeAuthBody is the request side of routeAuth, embedded in the route's create and PATCH body;
// applyModules finds its fields because their types are ModuleRequests.
type routeAuthBody struct {
	OAuth           *EndpointOAuthMutate           `json:"oauth"`
	SAML            *EndpointSAMLMutate            `json:"saml"`
	OIDC            *EndpointOIDCMutate            `json:"oidc"`
	UserAgentFilter *EndpointUserAgentFilterMutate `json:"user_agent_filter"`
	JWTValidation   *EndpointJWTValidationMutate   `json:"jwt_validation"`
}

// CheckModules allows at most one of oauth, saml and oidc on a route: each of them owns the
// visitor's login flow and session cookie, so two would fight over every request. A module
// counts while it is configured, enabled or not, because enabling it later must not be able to
// create the conflict. It runs after a module PUT, a route create and a route PATCH.
func (r *HTTPSEdgeRoute) CheckModules() error {
	var set []string
	if r.OAuth != nil {
		set = append(set, "oauth")
	}
	if r.SAML != nil {
		set = append(set, "saml")
	}
	if r.OIDC != nil {
		set = append(set, "oidc")
	}
	if len(set) > 1 {
		return Invalid(CodeOneAuthModule, set[1], "only one of oauth, saml and oidc may be configured on a route, "+
			"but this route would have both %s and %s; delete one before configuring the other", set[0], set[1])
	}
	return nil
}

// --- the session settings OAuth, SAML and OIDC share -------------------------------------------

// DefaultCookiePrefix is the session cookie prefix of OAuth, SAML and OIDC when none is given:
// the compatible service's, so cookies keep their names after a move.
const DefaultCookiePrefix = "ngrok."

// authSession is the response side of the session settings of a login module.
type authSession struct {
	OptionsPassthrough bool   `json:"options_passthrough"`
	CookiePrefix       string `json:"cookie_prefix"`
	InactivityTimeout  uint32 `json:"inactivity_timeout"`
	MaximumDuration    uint32 `json:"maximum_duration"`
}

// authSessionMutate is the request side of authSession.
type authSessionMutate struct {
	OptionsPassthrough *bool   `json:"options_passthrough"`
	CookiePrefix       *string `json:"cookie_prefix"`
	InactivityTimeout  *uint32 `json:"inactivity_timeout"`
	MaximumDuration    *uint32 `json:"maximum_duration"`
}

// validate requires a cookie prefix that can start a cookie name (an RFC 6265 token), so the
// data plane never has to set a cookie the browser drops.
func (s *authSessionMutate) validate() error {
	if p := s.CookiePrefix; p != nil && *p != "" && !validHeaderName(*p) {
		return Invalid(CodeInvalid, "cookie_prefix", "%q cannot start a cookie name: use letters, digits and !#$%%&'*+-.^_`|~ only", *p)
	}
	return nil
}

// build fills the defaults: the standard cookie prefix, false and 0.
func (s *authSessionMutate) build() authSession {
	out := authSession{CookiePrefix: DefaultCookiePrefix}
	if s.OptionsPassthrough != nil {
		out.OptionsPassthrough = *s.OptionsPassthrough
	}
	if s.CookiePrefix != nil && *s.CookiePrefix != "" {
		out.CookiePrefix = *s.CookiePrefix
	}
	out.InactivityTimeout = derefU32(s.InactivityTimeout)
	out.MaximumDuration = derefU32(s.MaximumDuration)
	return out
}

// derefU32 is an optional number's value; unset numbers are 0, as the schema documents.
func derefU32(v *uint32) uint32 {
	if v == nil {
		return 0
	}
	return *v
}

// emptyIfNil returns l, or an empty list instead of nil, so responses show [] rather than null.
func emptyIfNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return slices.Clone(l)
}

// indexed names entry i of a list field: "scopes[2]".
func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// validScopes checks OAuth scope tokens (RFC 6749 section 3.3: printable ASCII without spaces,
// quotes or backslashes), so a scope list is never one space-separated string by mistake.
func validScopes(field string, scopes []string) error {
	for i, s := range scopes {
		if s == "" {
			return Invalid(CodeInvalid, indexed(field, i), "must not be empty")
		}
		for j := 0; j < len(s); j++ {
			if c := s[j]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
				return Invalid(CodeInvalid, indexed(field, i), "%q is not one OAuth scope: give each scope as its own list entry, without spaces or quotes", s)
			}
		}
	}
	return nil
}

// absoluteURL checks that s is an absolute URL with one of the schemes and a host; the rest of
// edgeplane's consumers (browsers, OIDC discovery, key fetchers) need exactly that.
func absoluteURL(field, s string, schemes ...string) error {
	u, err := url.Parse(s)
	if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" || u.User != nil {
		return Invalid(CodeInvalid, field, "%q is not an absolute %s URL with a host", s, strings.Join(schemes, " or "))
	}
	return nil
}

// --- oauth -------------------------------------------------------------------------------------

// OAuthProviders are the identity providers of the OAuth module, in the schema's order.
var OAuthProviders = []string{"github", "facebook", "microsoft", "google", "linkedin", "gitlab", "twitch", "amazon"}

// EndpointOAuth logs visitors in through an OAuth identity provider (schema "EndpointOAuth").
type EndpointOAuth struct {
	Enabled  bool                   `json:"enabled"`
	Provider *EndpointOAuthProvider `json:"provider"`
	authSession
	AuthCheckInterval uint32 `json:"auth_check_interval"`
}

// EndpointOAuthProvider has one member per identity provider; exactly one is set and the others
// are null. It is the same shape in requests and responses.
type EndpointOAuthProvider struct {
	GitHub    *EndpointOAuthGitHub      `json:"github"`
	Facebook  *EndpointOAuthProviderApp `json:"facebook"`
	Microsoft *EndpointOAuthProviderApp `json:"microsoft"`
	Google    *EndpointOAuthProviderApp `json:"google"`
	LinkedIn  *EndpointOAuthProviderApp `json:"linkedin"`
	GitLab    *EndpointOAuthProviderApp `json:"gitlab"`
	Twitch    *EndpointOAuthProviderApp `json:"twitch"`
	Amazon    *EndpointOAuthProviderApp `json:"amazon"`
}

// members returns the provider members by name, in the schema's order.
func (p *EndpointOAuthProvider) members() []struct {
	name string
	app  *EndpointOAuthProviderApp
} {
	var gh *EndpointOAuthProviderApp
	if p.GitHub != nil {
		gh = &p.GitHub.EndpointOAuthProviderApp
	}
	apps := []*EndpointOAuthProviderApp{gh, p.Facebook, p.Microsoft, p.Google, p.LinkedIn, p.GitLab, p.Twitch, p.Amazon}
	out := make([]struct {
		name string
		app  *EndpointOAuthProviderApp
	}, len(apps))
	for i, a := range apps {
		out[i].name, out[i].app = OAuthProviders[i], a
	}
	return out
}

// EndpointOAuthProviderApp is what every provider member has: the OAuth application (none means
// the service's managed one) and who may pass. client_id and client_secret are null when the
// managed application is used.
type EndpointOAuthProviderApp struct {
	ClientID       *string  `json:"client_id"`
	ClientSecret   *string  `json:"client_secret"`
	Scopes         []string `json:"scopes"`
	EmailAddresses []string `json:"email_addresses"`
	EmailDomains   []string `json:"email_domains"`
}

// EndpointOAuthGitHub adds GitHub's teams (as "<org>/<team>") and organizations.
type EndpointOAuthGitHub struct {
	EndpointOAuthProviderApp
	Teams         []string `json:"teams"`
	Organizations []string `json:"organizations"`
}

// EndpointOAuthMutate is the request shape of EndpointOAuth.
type EndpointOAuthMutate struct {
	Enabled  *bool                  `json:"enabled"`
	Provider *EndpointOAuthProvider `json:"provider"`
	authSessionMutate
	AuthCheckInterval *uint32 `json:"auth_check_interval"`
}

// Validate requires exactly one provider member and checks it: its own application needs both
// client_id and client_secret, and only its own application may ask for scopes (the managed one
// has fixed scopes). A client_id without client_secret passes here: the API never returns the
// secret, so a client re-sending the module it read has none, and KeepSecrets keeps the stored
// one or refuses the write inside the update, where the stored module is known.
func (m *EndpointOAuthMutate) Validate() error {
	if err := m.authSessionMutate.validate(); err != nil {
		return err
	}
	if m.Provider == nil {
		return Invalid(CodeInvalid, "provider", "is required: exactly one of %s", strings.Join(OAuthProviders, ", "))
	}
	var chosen []string
	for _, mb := range m.Provider.members() {
		if mb.app != nil {
			chosen = append(chosen, mb.name)
		}
	}
	switch len(chosen) {
	case 0:
		return Invalid(CodeInvalid, "provider", "names no identity provider: give exactly one of %s", strings.Join(OAuthProviders, ", "))
	case 1:
	default:
		return Invalid(CodeInvalid, "provider", "names %s: give exactly one identity provider", strings.Join(chosen, " and "))
	}
	for _, mb := range m.Provider.members() {
		if mb.app != nil {
			if err := mb.app.validate("provider." + mb.name); err != nil {
				return err
			}
		}
	}
	if gh := m.Provider.GitHub; gh != nil {
		return gh.validateGitHub("provider.github")
	}
	return nil
}

func (a *EndpointOAuthProviderApp) validate(prefix string) error {
	hasID, hasSecret := deref(a.ClientID) != "", deref(a.ClientSecret) != ""
	if hasSecret && !hasID {
		return Invalid(CodeInvalid, prefix+".client_id", "is required with client_secret: your own OAuth application needs both")
	}
	if len(a.Scopes) > 0 && !hasID {
		return Invalid(CodeInvalid, prefix+".scopes", "need client_id and client_secret: the managed OAuth application asks for fixed scopes")
	}
	if err := validScopes(prefix+".scopes", a.Scopes); err != nil {
		return err
	}
	for i, e := range a.EmailAddresses {
		if addr, err := mail.ParseAddress(e); err != nil || addr.Address != e {
			return Invalid(CodeInvalid, indexed(prefix+".email_addresses", i), "%q is not a bare email address such as user@example.com", e)
		}
	}
	for i, d := range a.EmailDomains {
		if !ValidHostname(d, false) {
			return Invalid(CodeInvalid, indexed(prefix+".email_domains", i), "%q is not a domain name such as example.com", d)
		}
	}
	return nil
}

// validateGitHub checks team and organization slugs: teams are "<org>/<team>", which is how
// GitHub names a team uniquely.
func (g *EndpointOAuthGitHub) validateGitHub(prefix string) error {
	for i, t := range g.Teams {
		org, team, ok := strings.Cut(t, "/")
		if !ok || !validSlug(org) || !validSlug(team) {
			return Invalid(CodeInvalid, indexed(prefix+".teams", i), "%q is not a team slug qualified with its organization, such as \"my-org/my-team\"", t)
		}
	}
	for i, o := range g.Organizations {
		if !validSlug(o) {
			return Invalid(CodeInvalid, indexed(prefix+".organizations", i), "%q is not an organization slug, such as \"my-org\"", o)
		}
	}
	return nil
}

// validSlug: non-empty, without slashes, spaces or control characters.
func validSlug(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == '/' || r == 0x7f })
}

// Build fills the defaults: [] for the chosen member's lists, null for an unset client_id and
// client_secret (the managed application), null for the members not chosen.
func (m *EndpointOAuthMutate) Build(*Op) (any, error) {
	app := func(a *EndpointOAuthProviderApp) *EndpointOAuthProviderApp {
		if a == nil {
			return nil
		}
		out := &EndpointOAuthProviderApp{Scopes: emptyIfNil(a.Scopes), EmailAddresses: emptyIfNil(a.EmailAddresses), EmailDomains: emptyIfNil(a.EmailDomains)}
		if v := deref(a.ClientID); v != "" {
			out.ClientID = &v
		}
		if v := deref(a.ClientSecret); v != "" {
			out.ClientSecret = &v
		}
		return out
	}
	p := m.Provider
	prov := &EndpointOAuthProvider{Facebook: app(p.Facebook), Microsoft: app(p.Microsoft), Google: app(p.Google),
		LinkedIn: app(p.LinkedIn), GitLab: app(p.GitLab), Twitch: app(p.Twitch), Amazon: app(p.Amazon)}
	if p.GitHub != nil {
		prov.GitHub = &EndpointOAuthGitHub{EndpointOAuthProviderApp: *app(&p.GitHub.EndpointOAuthProviderApp),
			Teams: emptyIfNil(p.GitHub.Teams), Organizations: emptyIfNil(p.GitHub.Organizations)}
	}
	return &EndpointOAuth{Enabled: enabled(m.Enabled), Provider: prov, authSession: m.authSessionMutate.build(),
		AuthCheckInterval: derefU32(m.AuthCheckInterval)}, nil
}

// chosen returns the configured provider member and its name, or a nil app when none is.
func (p *EndpointOAuthProvider) chosen() (string, *EndpointOAuthProviderApp) {
	if p == nil {
		return "", nil
	}
	for _, mb := range p.members() {
		if mb.app != nil {
			return mb.name, mb.app
		}
	}
	return "", nil
}

// Secrets declares the client secret of the route's own OAuth application: sealed at rest and
// never returned; the managed application has none.
func (o *EndpointOAuth) Secrets() []Secret {
	name, app := o.Provider.chosen()
	if app == nil {
		return nil
	}
	return optionalSecret("provider."+name+".client_secret", &app.ClientSecret, true)
}

// KeepSecrets keeps the stored client_secret when the module names the same provider and
// client_id without one (what a client that read the module sends back), and otherwise refuses a
// client_id without client_secret.
func (o *EndpointOAuth) KeepSecrets(previous any) error {
	name, app := o.Provider.chosen()
	if app == nil || deref(app.ClientID) == "" || deref(app.ClientSecret) != "" {
		return nil
	}
	if old, ok := previous.(*EndpointOAuth); ok {
		if oldName, oldApp := old.Provider.chosen(); oldName == name && oldApp != nil &&
			deref(oldApp.ClientID) == *app.ClientID && deref(oldApp.ClientSecret) != "" {
			v := *oldApp.ClientSecret
			app.ClientSecret = &v
			return nil
		}
	}
	return Invalid(CodeInvalid, "provider."+name+".client_secret", "is required with client_id: your own OAuth application needs both "+
		"(leave it out only to keep the stored one, for the same provider and client_id)")
}

// --- oidc --------------------------------------------------------------------------------------

// EndpointOIDC logs visitors in through an OpenID Connect provider (schema "EndpointOIDC").
type EndpointOIDC struct {
	Enabled bool `json:"enabled"`
	authSession
	Issuer   string `json:"issuer"`
	ClientID string `json:"client_id"`
	// ClientSecret is sealed at rest and never returned: responses show null.
	ClientSecret *string  `json:"client_secret"`
	Scopes       []string `json:"scopes"`
}

// EndpointOIDCMutate is the request shape of EndpointOIDC.
type EndpointOIDCMutate struct {
	Enabled *bool `json:"enabled"`
	authSessionMutate
	Issuer       *string  `json:"issuer"`
	ClientID     *string  `json:"client_id"`
	ClientSecret *string  `json:"client_secret"`
	Scopes       []string `json:"scopes"`
}

// Validate requires the issuer, an absolute http(s) URL without query or fragment (discovery
// appends /.well-known/openid-configuration to it), and the client's id: unlike OAuth there is
// no managed application to fall back on. The client's secret is required too, but by
// KeepSecrets, inside the update: a write that leaves it out keeps the stored one for the same
// issuer and client_id, since the API never returns it.
func (m *EndpointOIDCMutate) Validate() error {
	if err := m.authSessionMutate.validate(); err != nil {
		return err
	}
	iss := deref(m.Issuer)
	if iss == "" {
		return Invalid(CodeInvalid, "issuer", "is required: the URL of the OpenID provider")
	}
	if err := absoluteURL("issuer", iss, "https", "http"); err != nil {
		return err
	}
	if u, _ := url.Parse(iss); u.RawQuery != "" || u.Fragment != "" || strings.Contains(iss, "#") {
		return Invalid(CodeInvalid, "issuer", "%q must not have a query or fragment: discovery appends /.well-known/openid-configuration to it", iss)
	}
	if deref(m.ClientID) == "" {
		return Invalid(CodeInvalid, "client_id", "is required")
	}
	return validScopes("scopes", m.Scopes)
}

// Build fills the defaults.
func (m *EndpointOIDCMutate) Build(*Op) (any, error) {
	out := &EndpointOIDC{Enabled: enabled(m.Enabled), authSession: m.authSessionMutate.build(),
		Issuer: *m.Issuer, ClientID: *m.ClientID, Scopes: emptyIfNil(m.Scopes)}
	if v := deref(m.ClientSecret); v != "" {
		out.ClientSecret = &v
	}
	return out, nil
}

// Secrets declares the client secret: sealed at rest and never returned.
func (o *EndpointOIDC) Secrets() []Secret {
	return optionalSecret("client_secret", &o.ClientSecret, true)
}

// KeepSecrets keeps the stored client_secret when the module names the same issuer and
// client_id without one, and otherwise refuses a module without client_secret.
func (o *EndpointOIDC) KeepSecrets(previous any) error {
	if deref(o.ClientSecret) != "" {
		return nil
	}
	if old, ok := previous.(*EndpointOIDC); ok && old.Issuer == o.Issuer && old.ClientID == o.ClientID && deref(old.ClientSecret) != "" {
		v := *old.ClientSecret
		o.ClientSecret = &v
		return nil
	}
	return Invalid(CodeInvalid, "client_secret", "is required (leave it out only to keep the stored one, for the same issuer and client_id)")
}
