package plan

import (
	"encoding/json"
	"errors"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The oidc route module: an OpenID Connect sign-in in front of the route, with the session
// sealed under the deployment's identity-sessions key and every provider call made with the
// data plane's outbound client. The provider is discovered when a visitor first needs it. The
// module has no auth_check_interval in the API, so its sessions are not re-checked with the
// provider; inactivity_timeout and maximum_duration end them.
func routeOIDC(cfg any, s RouteEnv) (enforce.Stage, error) {
	m := cfg.(*ep.EndpointOIDC)
	sess, err := sessionConfig(s.Snapshot, m.CookiePrefix, m.InactivityTimeout, m.MaximumDuration, m.OptionsPassthrough)
	if err != nil {
		return nil, err
	}
	var secret string // the snapshot holds it opened (store.Snapshot)
	if m.ClientSecret != nil {
		secret = *m.ClientSecret
	}
	return enforce.NewOIDC(enforce.OIDCConfig{Issuer: m.Issuer, ClientID: m.ClientID, ClientSecret: secret,
		Scopes: m.Scopes, Session: sess, Client: s.Env.Outbound, Providers: s.Env.OIDCProviders})
}

// sessionConfig is the session settings every sign-in module shares, with the environment's key;
// without the key or an outbound client no sign-in module can work, and the route fails closed.
func sessionConfig(s *Snapshot, prefix string, inactivity, maximum uint32, passthrough bool) (enforce.SessionConfig, error) {
	if s.Env == nil || len(s.Env.SessionKey) != 32 || s.Env.Outbound == nil {
		return enforce.SessionConfig{}, errors.New("the data plane has no session key or outbound client for sign-in")
	}
	return enforce.SessionConfig{Key: s.Env.SessionKey, CookiePrefix: prefix, OptionsPassthrough: passthrough,
		InactivityTimeout: time.Duration(inactivity) * time.Second, MaximumDuration: time.Duration(maximum) * time.Second}, nil
}

// The oidc bind option (ngrok-go's WithOIDC): an OpenID Connect sign-in in front of the
// endpoint, the same stage as the oidc route module, with the agent's allow_emails and
// allow_domains. A sealed client secret is encrypted for ngrok's own servers and cannot be
// opened here, so a bind giving only that is refused.
func bindOIDC(raw json.RawMessage, b BindEnv) (enforce.Stage, error) {
	var o struct {
		IssuerURL string `json:"issuer_url"`
		signInClient
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, errors.New("the option is not a JSON object")
	}
	if err := o.sealedOnly("the clientSecret argument of WithOIDC"); err != nil {
		return nil, err
	}
	env := b.Env
	if env == nil || len(env.SessionKey) != 32 || env.Outbound == nil {
		return nil, errors.New("this edgeplane server has no session key for sign-in")
	}
	return enforce.NewOIDC(enforce.OIDCConfig{Issuer: o.IssuerURL, ClientID: o.ClientID, ClientSecret: o.ClientSecret,
		Scopes: o.Scopes, EmailAddresses: o.AllowEmails, EmailDomains: o.AllowDomains, Client: env.Outbound,
		Session: env.BindSignIn.session(env.SessionKey), CheckInterval: env.BindSignIn.CheckInterval, Providers: env.OIDCProviders})
}
