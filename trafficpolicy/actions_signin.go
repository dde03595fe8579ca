package trafficpolicy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The configurations of oauth and openid-connect, as ngrok documents them: a sign-in with an
// OAuth provider (oauth) or any OpenID Connect provider (openid-connect) in front of the rest of
// the policy. Both share the session settings.
type (
	// SignInConfig is what oauth and openid-connect share: the application (client_id and
	// client_secret; oauth without them uses the server's managed application for the
	// provider), the scopes asked for beside the ones the identity needs, parameters added to
	// the authorization URL, the session's limits, how often the user is checked again with the
	// provider, whether CORS preflight requests pass without a session, and auth_id, which
	// scopes the session cookie and picks this action in the login and logout paths.
	SignInConfig struct {
		AuthID                  string            `json:"auth_id"`
		ClientID                string            `json:"client_id"`
		ClientSecret            string            `json:"client_secret"`
		Scopes                  []string          `json:"scopes"`
		AuthzURLParams          map[string]string `json:"authz_url_params"`
		MaxSessionDuration      string            `json:"max_session_duration"`
		IdleSessionTimeout      string            `json:"idle_session_timeout"`
		UserinfoRefreshInterval string            `json:"userinfo_refresh_interval"`
		AllowCORSPreflight      bool              `json:"allow_cors_preflight"`
	}
	// OAuthActionConfig is oauth's: the provider (one of OAuthActionProviders) and the sign-in.
	OAuthActionConfig struct {
		Provider string `json:"provider"`
		SignInConfig
	}
	// OIDCActionConfig is openid-connect's: the provider's issuer URL (https; discovery reads
	// its /.well-known/openid-configuration) and the sign-in. idle_session_duration is an older
	// name of idle_session_timeout.
	OIDCActionConfig struct {
		IssuerURL           string `json:"issuer_url"`
		IdleSessionDuration string `json:"idle_session_duration"`
		SignInConfig
	}
)

// OAuthActionProviders are the providers ngrok's oauth action knows.
var OAuthActionProviders = []string{"amazon", "facebook", "github", "gitlab", "google", "linkedin", "microsoft", "twitch"}

// Limits of the sign-in actions' configuration.
const (
	maxAuthID        = 64
	maxSignInScopes  = 32
	maxAuthzParams   = 32
	maxSignInSetting = 4096
)

// authIDPattern is what auth_id may hold: it becomes part of a cookie's name.
var authIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// reservedAuthzParams are the authorization URL's parameters the sign-in sets itself.
var reservedAuthzParams = []string{"client_id", "redirect_uri", "response_type", "scope", "state", "nonce",
	"code_challenge", "code_challenge_method"}

func init() {
	implemented["oauth"] = decodeOAuthAction
	implemented["openid-connect"] = decodeOIDCAction
}

func decodeOAuthAction(a *Action) (any, error) {
	c := &OAuthActionConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	switch {
	case c.Provider == "":
		return nil, errorf(p+".provider", "is required")
	case !slices.Contains(OAuthActionProviders, strings.ToLower(c.Provider)):
		return nil, errorf(p+".provider", "%q is not a supported OAuth provider (%s)", c.Provider, strings.Join(OAuthActionProviders, ", "))
	case (c.ClientID == "") != (c.ClientSecret == ""):
		return nil, errorf(p+".client_secret", "give client_id and client_secret together, or neither for the managed application")
	case c.ClientID == "" && len(c.Scopes) > 0:
		return nil, errorf(p+".scopes", "scopes can be asked for only with your own application (client_id and client_secret)")
	}
	return c, c.check(p)
}

func decodeOIDCAction(a *Action) (any, error) {
	c := &OIDCActionConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if c.IssuerURL == "" {
		return nil, errorf(p+".issuer_url", "is required")
	}
	if u, err := url.Parse(c.IssuerURL); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return nil, errorf(p+".issuer_url", "%q is not an https URL", c.IssuerURL)
	}
	if c.ClientID == "" {
		return nil, errorf(p+".client_id", "is required")
	}
	if c.ClientSecret == "" {
		return nil, errorf(p+".client_secret", "is required")
	}
	if c.IdleSessionDuration != "" {
		if c.IdleSessionTimeout != "" {
			return nil, errorf(p+".idle_session_duration", "give idle_session_timeout or its older name idle_session_duration, not both")
		}
		c.IdleSessionTimeout = c.IdleSessionDuration
	}
	return c, c.check(p)
}

// check refuses what the shared settings may not hold; p is the configuration's path.
func (c *SignInConfig) check(p string) error {
	switch {
	case len(c.AuthID) > maxAuthID || (c.AuthID != "" && !authIDPattern.MatchString(c.AuthID)):
		return errorf(p+".auth_id", "must be at most %d letters, digits, '-' and '_'", maxAuthID)
	case len(c.ClientID) > maxSignInSetting || len(c.ClientSecret) > maxSignInSetting:
		return errorf(p+".client_id", "client_id and client_secret must be at most %d characters", maxSignInSetting)
	case len(c.Scopes) > maxSignInScopes:
		return errorf(p+".scopes", "at most %d scopes, got %d", maxSignInScopes, len(c.Scopes))
	case len(c.AuthzURLParams) > maxAuthzParams:
		return errorf(p+".authz_url_params", "at most %d parameters, got %d", maxAuthzParams, len(c.AuthzURLParams))
	}
	for i, s := range c.Scopes {
		if s == "" || len(s) > 256 || strings.ContainsAny(s, " \t\r\n") {
			return errorf(fmt.Sprintf("%s.scopes[%d]", p, i), "%q is not a scope", s)
		}
	}
	for k, v := range c.AuthzURLParams {
		if slices.Contains(reservedAuthzParams, strings.ToLower(k)) {
			return errorf(p+".authz_url_params", "%q is set by the sign-in itself", k)
		}
		if k == "" || len(k) > 256 || len(v) > maxSignInSetting {
			return errorf(p+".authz_url_params", "the parameter %q is empty or too long", k)
		}
	}
	for field, v := range map[string]string{"max_session_duration": c.MaxSessionDuration,
		"idle_session_timeout": c.IdleSessionTimeout, "userinfo_refresh_interval": c.UserinfoRefreshInterval} {
		if _, err := signInDuration(v); err != nil {
			return errorf(p+"."+field, "%v", err)
		}
	}
	return nil
}

// Durations are the session's limits and the re-check interval (0 for none).
func (c *SignInConfig) Durations() (maxSession, idle, refresh time.Duration) {
	maxSession, _ = signInDuration(c.MaxSessionDuration)
	idle, _ = signInDuration(c.IdleSessionTimeout)
	refresh, _ = signInDuration(c.UserinfoRefreshInterval)
	return maxSession, idle, refresh
}

// signInDuration parses a session setting: a Go duration of at least a second and at most a
// year, "" for none.
func signInDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30m or 24h", s)
	}
	if d < time.Second || d > 365*24*time.Hour {
		return 0, fmt.Errorf("%q must be from 1s to 8760h", s)
	}
	return d, nil
}
