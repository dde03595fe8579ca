package plan

import (
	"errors"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The oauth route module: a sign-in with one of ngrok's OAuth providers in front of the route.
// A provider member without client_id uses the operator's managed application for that provider
// (--oauth-app); without one, the route answers 503 naming the flag (the API still accepts the
// module: clients depend on that). The provider's endpoints can be overridden (--oauth-endpoints).
func init() {
	registerRouteStage("oauth", func(cfg any, s *Snapshot) (enforce.Stage, error) {
		m := cfg.(*ep.EndpointOAuth)
		name, app, gh := oauthMember(m.Provider)
		if app == nil {
			return nil, errors.New("no identity provider is chosen")
		}
		sess, err := sessionConfig(s, m.CookiePrefix, m.InactivityTimeout, m.MaximumDuration, m.OptionsPassthrough)
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
	})
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
