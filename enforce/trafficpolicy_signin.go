package enforce

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
	"golang.org/x/oauth2"
)

// The oauth and openid-connect actions are the oauth and oidc modules' sign-in (the same flow,
// sessions and providers, built by NewOAuth and NewOIDC) run as an action of on_http_request: a
// visitor without an allowed session is sent to the provider (the rest of the policy does not
// run), the special paths (/ngrok/login, /ngrok/logout, the callback) are answered by the
// action, and a signed-in request goes on to the next action with the ngrok-auth-* headers the
// modules set. oauth without client_id uses the server's managed application for the provider
// (--oauth-app); without one the stage is refused naming the flag. The session cookie is
// <prefix><auth_id>.session when auth_id is given, so two actions keep apart; a login or logout
// path naming another action's auth_id (?auth_id=…) passes this one by. client_id and
// client_secret may interpolate CEL, rendered on each request the action runs on
// (trafficpolicy_signin_apps.go).

// SignInOptions is what a traffic policy's sign-in actions need of the data plane: the key
// sealing sessions (every replica's), the operator's managed OAuth applications and provider
// endpoint overrides (--oauth-app, --oauth-endpoints).
type SignInOptions struct {
	SessionKey     []byte
	OAuthApps      map[string]OAuthApp
	OAuthEndpoints map[string]OAuthEndpoints
}

func init() {
	registerRequestAction("oauth", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.OAuthActionConfig)
		sess, err := signInSession(a, &c.SignInConfig, tp)
		if err != nil {
			return nil, err
		}
		_, _, refresh := c.Durations()
		provider := strings.ToLower(c.Provider)
		oc := OAuthConfig{Provider: provider, Scopes: c.Scopes, CheckInterval: refresh, Session: sess,
			Client: tp.opts.Outbound, AuthParams: c.AuthzURLParams}
		if e, ok := tp.opts.SignIn.OAuthEndpoints[provider]; ok {
			oc.Endpoints = &e
		}
		build := func(app OAuthApp) (Stage, error) {
			oc := oc
			oc.App = app
			return NewOAuth(oc)
		}
		if c.ClientID == "" {
			managed, ok := tp.opts.SignIn.OAuthApps[provider]
			if !ok {
				return nil, fmt.Errorf("%s.config: this server has no managed OAuth application for %s: its operator must start it with --oauth-app %s=CLIENT_ID:CLIENT_SECRET, or the action must give client_id and client_secret", a.Path, provider, provider)
			}
			st, err := build(managed)
			if err != nil {
				return nil, fmt.Errorf("%s.config: %v", a.Path, err)
			}
			return signInAction(st, c.AuthID), nil
		}
		return signInApps(a, &c.SignInConfig, build)
	})
	registerRequestAction("openid-connect", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.OIDCActionConfig)
		sess, err := signInSession(a, &c.SignInConfig, tp)
		if err != nil {
			return nil, err
		}
		_, _, refresh := c.Durations()
		return signInApps(a, &c.SignInConfig, func(app OAuthApp) (Stage, error) {
			return NewOIDC(OIDCConfig{Issuer: c.IssuerURL, ClientID: app.ClientID, ClientSecret: app.ClientSecret, Scopes: c.Scopes,
				CheckInterval: refresh, Session: sess, Client: tp.opts.Outbound, AuthParams: c.AuthzURLParams, Providers: tp.opts.OIDCProviders})
		})
	})
}

// signInSession checks what a sign-in action needs of the stage and returns its session
// settings.
func signInSession(a *trafficpolicy.Action, c *trafficpolicy.SignInConfig, tp *TrafficPolicy) (SessionConfig, error) {
	if tp.opts.SignIn == nil || len(tp.opts.SignIn.SessionKey) != 32 || tp.opts.Outbound == nil {
		return SessionConfig{}, fmt.Errorf("%s: the %s action needs the data plane's session key and outbound client, which this stage was built without", a.Path, a.Type)
	}
	maxSession, idle, _ := c.Durations()
	sess := SessionConfig{Key: tp.opts.SignIn.SessionKey, OptionsPassthrough: c.AllowCORSPreflight,
		InactivityTimeout: idle, MaximumDuration: maxSession}
	if c.AuthID != "" {
		sess.CookiePrefix = "ngrok." + c.AuthID + "."
	}
	return sess, nil
}

// signInAction runs a sign-in stage as an action: the request goes on (with the identity
// headers the stage set) when the stage passes it to its next handler; otherwise the stage
// answered (a redirect to the provider, a special path, a refusal).
func signInAction(st Stage, authID string) requestFunc {
	return func(w http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request {
		if other := r.URL.Query().Get("auth_id"); other != "" && other != authID &&
			(r.URL.Path == LoginPath || r.URL.Path == LogoutPath) {
			return r // another action's login or logout
		}
		var passed *http.Request
		r = withOwnHeader(r) // the stage sets the identity headers on the request it passes on
		st.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { passed = r })).ServeHTTP(w, r)
		return passed
	}
}

// authParams are extra authorization URL parameters as oauth2 options, in name order.
func authParams(m map[string]string) []oauth2.AuthCodeOption {
	var out []oauth2.AuthCodeOption
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, oauth2.SetAuthURLParam(k, m[k]))
	}
	return out
}
