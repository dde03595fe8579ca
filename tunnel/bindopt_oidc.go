package tunnel

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/edgeplane/edgeplane/enforce"
)

// SignInEnv is what the sign-in bind options need from the data plane: the key sealing the
// sessions (the store's identity-sessions secret) and the outbound client for the provider
// calls (it trusts the system roots plus --outbound-ca).
type SignInEnv struct {
	SessionKey []byte
	Outbound   *http.Client
	// OAuthApps are the operator's managed OAuth applications by provider (--oauth-app), used by
	// oauth binds naming no client of their own; OAuthEndpoints override providers' endpoints
	// (--oauth-endpoints), as they do for the oauth route module.
	OAuthApps      map[string]enforce.OAuthApp
	OAuthEndpoints map[string]enforce.OAuthEndpoints
}

// signInEnv is set once by the data plane at start, before the agent listener serves: the bind
// option builders take only the option's JSON, so the environment reaches them here.
var signInEnv atomic.Pointer[SignInEnv]

// SetSignInEnv gives the sign-in bind options their environment; until it is called, binds
// asking for OIDC are refused.
func SetSignInEnv(e SignInEnv) { signInEnv.Store(&e) }

// The oidc bind option (ngrok-go's WithOIDC): an OpenID Connect sign-in in front of the
// endpoint, the same stage as the oidc route module, with the agent's allow_emails and
// allow_domains. A sealed client secret is encrypted for ngrok's own servers and cannot be
// opened here, so a bind giving only that is refused.
func init() {
	registerBindStage("oidc", func(raw json.RawMessage) (enforce.Stage, error) {
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
		env := signInEnv.Load()
		if env == nil || len(env.SessionKey) != 32 || env.Outbound == nil {
			return nil, errors.New("this edgeplane server has no session key for sign-in")
		}
		return enforce.NewOIDC(enforce.OIDCConfig{Issuer: o.IssuerURL, ClientID: o.ClientID, ClientSecret: o.ClientSecret,
			Scopes: o.Scopes, EmailAddresses: o.AllowEmails, EmailDomains: o.AllowDomains, Client: env.Outbound,
			Session: enforce.SessionConfig{Key: env.SessionKey}})
	})
}
