package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The oauth route module: a sign-in with one of ngrok's OAuth providers in front of the route.
// A provider member without client_id uses the operator's managed application for that provider
// (--oauth-app); without one, the route answers 503 naming the flag (the API still accepts the
// module: clients depend on that). The provider's endpoints can be overridden (--oauth-endpoints).
func routeOAuth(cfg any, s RouteEnv) (enforce.Stage, error) {
	m := cfg.(*ep.EndpointOAuth)
	name, app, gh := oauthMember(m.Provider)
	if app == nil {
		return nil, errors.New("no identity provider is chosen")
	}
	sess, err := sessionConfig(s.Snapshot, m.CookiePrefix, m.InactivityTimeout, m.MaximumDuration, m.OptionsPassthrough)
	if err != nil {
		return nil, err
	}
	c := enforce.OAuthConfig{Provider: name, EmailAddresses: app.EmailAddresses, EmailDomains: app.EmailDomains,
		CheckInterval: time.Duration(m.AuthCheckInterval) * time.Second, Session: sess, Client: s.Env.Outbound}
	if gh != nil {
		c.Organizations, c.Teams = gh.Organizations, gh.Teams
	}
	if app.ClientID != nil && *app.ClientID != "" {
		c.App = enforce.OAuthApp{ClientID: *app.ClientID}
		if app.ClientSecret != nil {
			c.App.ClientSecret = *app.ClientSecret
		}
		c.Scopes = app.Scopes
	} else if managed, ok := s.Env.OAuthApps[name]; ok {
		c.App = managed
	} else {
		return enforce.OAuthUnavailable(name), nil
	}
	if e, ok := s.Env.OAuthEndpoints[name]; ok {
		c.Endpoints = &e
	}
	return enforce.NewOAuth(c)
}

// oauthMember returns the chosen provider member of the module: its name, its application and,
// for GitHub, its organizations and teams.
func oauthMember(p *ep.EndpointOAuthProvider) (string, *ep.EndpointOAuthProviderApp, *ep.EndpointOAuthGitHub) {
	if p == nil {
		return "", nil, nil
	}
	if p.GitHub != nil {
		return "github", &p.GitHub.EndpointOAuthProviderApp, p.GitHub
	}
	for _, m := range []struct {
		name string
		app  *ep.EndpointOAuthProviderApp
	}{{"facebook", p.Facebook}, {"microsoft", p.Microsoft}, {"google", p.Google}, {"linkedin", p.LinkedIn},
		{"gitlab", p.GitLab}, {"twitch", p.Twitch}, {"amazon", p.Amazon}} {
		if m.app != nil {
			return m.name, m.app, nil
		}
	}
	return "", nil, nil
}

// ngrok's own refusal codes for the mistakes of an oauth bind option, from its published error
// list, so an agent sees the code it would see at ngrok.
const (
	codeOAuthProvider    = 365 // "OAuth provider PROVIDER is not supported"
	codeOAuthHalfClient  = 389 // a client id without its secret, or a secret without its id
	codeOAuthScopesOwned = 390 // scopes need the agent's own OAuth application
)

// The oauth bind option (ngrok-go's WithOAuth): a sign-in with one of ngrok's OAuth providers in
// front of the endpoint, the same stage as the oauth route module, with the agent's
// allow_emails and allow_domains deciding who may pass. A bind naming its own client_id and
// client_secret signs in with that application (and asks for its scopes); a bind naming none uses
// the operator's managed application for the provider (--oauth-app), as a route does. Where a
// route without an application fails closed with 503 (its API object must still be accepted),
// a bind can be refused at once, which tells the agent's owner instead of the visitors: without
// a managed application, or with only a sealed secret (encrypted for ngrok's servers, which
// edgeplane cannot open), the bind is refused with ERR_NGROK_3208, the code of every option
// this server does not apply, naming what would make it work.
func bindOAuth(raw json.RawMessage, b BindEnv) (enforce.Stage, error) {
	var o struct {
		Provider string `json:"provider"`
		signInClient
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, errors.New("the option is not a JSON object")
	}
	provider := strings.ToLower(strings.TrimSpace(o.Provider))
	if provider == "" {
		return nil, errors.New("no provider is named")
	}
	if !enforce.OAuthProvider(provider) {
		return nil, &OptionRefusal{codeOAuthProvider, fmt.Sprintf("OAuth provider %q is not supported; supported providers: %s",
			o.Provider, strings.Join(ep.OAuthProviders, ", "))}
	}
	if err := o.sealedOnly("WithOAuthClientSecret"); err != nil {
		return nil, err
	}
	if (o.ClientID == "") != (o.ClientSecret == "") {
		return nil, &OptionRefusal{codeOAuthHalfClient, "give both client_id and client_secret for your own OAuth application, or neither for this server's managed one"}
	}
	env := b.Env
	if env == nil || len(env.SessionKey) != 32 || env.Outbound == nil {
		return nil, errors.New("this edgeplane server has no session key for sign-in")
	}
	app := enforce.OAuthApp{ClientID: o.ClientID, ClientSecret: o.ClientSecret}
	if app.ClientID == "" {
		if len(o.Scopes) > 0 {
			return nil, &OptionRefusal{codeOAuthScopesOwned, "scopes can be asked for only with your own OAuth application: give client_id and client_secret"}
		}
		managed, ok := env.OAuthApps[provider]
		if !ok {
			return nil, &OptionRefusal{ep.AgentCodeUnsupportedOpt, fmt.Sprintf("this edgeplane server has no managed OAuth application for %s: "+
				"its operator must start it with --oauth-app %s=CLIENT_ID:CLIENT_SECRET (or EDGEPLANE_OAUTH_APPS), "+
				"or the bind must give its own client_id and client_secret", provider, provider)}
		}
		app = managed
	}
	c := enforce.OAuthConfig{Provider: provider, App: app, Scopes: o.Scopes, EmailAddresses: o.AllowEmails,
		EmailDomains: o.AllowDomains, Client: env.Outbound, Session: env.BindSignIn.session(env.SessionKey),
		CheckInterval: env.BindSignIn.CheckInterval}
	if e, ok := env.OAuthEndpoints[provider]; ok {
		c.Endpoints = &e
	}
	return enforce.NewOAuth(c)
}

// signInClient is what the oauth and oidc bind options share: the agent's own client (its
// secret, or one sealed for ngrok's servers) and who may pass.
type signInClient struct {
	ClientID           string   `json:"client_id"`
	ClientSecret       string   `json:"client_secret"`
	SealedClientSecret []byte   `json:"sealed_client_secret"`
	AllowEmails        []string `json:"allow_emails"`
	AllowDomains       []string `json:"allow_domains"`
	Scopes             []string `json:"scopes"`
}

// sealedOnly refuses an option whose only client secret is sealed: it is encrypted for ngrok's
// servers and edgeplane cannot open it (ERR_NGROK_3208, like any option this server cannot
// apply as given). option names the agent's setting for the secret itself.
func (c signInClient) sealedOnly(option string) error {
	if c.ClientSecret == "" && len(c.SealedClientSecret) > 0 {
		return &OptionRefusal{ep.AgentCodeUnsupportedOpt, "sealed_client_secret is encrypted for ngrok's servers and edgeplane cannot open it; give client_secret itself (ngrok-go: " + option + ")"}
	}
	return nil
}

// BindSignInLimits are the operator's limits on the sign-in sessions of agents' oauth and oidc
// bind options. ngrok's bind options carry no session duration, inactivity timeout or re-check
// interval, so they are the server's to set; zero values set none.
type BindSignInLimits struct {
	MaxDuration, IdleTimeout, CheckInterval time.Duration
}

// session is a bind's session settings under the limits, sealed with key.
func (l BindSignInLimits) session(key []byte) enforce.SessionConfig {
	return enforce.SessionConfig{Key: key, MaximumDuration: l.MaxDuration, InactivityTimeout: l.IdleTimeout}
}
