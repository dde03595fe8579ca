package enforce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// OAuthEndpoints are an OAuth provider's authorization, token and user endpoints (all https).
type OAuthEndpoints struct{ AuthURL, TokenURL, UserInfoURL string }

// OAuthApp is an OAuth application's client: a route's own, or the operator's managed one
// (--oauth-app) serving every route of that provider without its own.
type OAuthApp struct{ ClientID, ClientSecret string }

// oauthProvider is what edgeplane knows of one of ngrok's eight OAuth providers: its endpoints,
// the scopes the identity needs, and how its user endpoint is asked.
type oauthProvider struct {
	endpoints OAuthEndpoints
	scopes    []string
	// clientIDHeader sends the client id with user requests (Twitch's Helix API needs it).
	clientIDHeader bool
}

// oauthProviders are ngrok's providers (ep.OAuthProviders) with their public endpoints.
var oauthProviders = map[string]oauthProvider{
	"github": {endpoints: OAuthEndpoints{"https://github.com/login/oauth/authorize", "https://github.com/login/oauth/access_token",
		"https://api.github.com/user"}, scopes: []string{"read:user", "user:email"}},
	"gitlab": {endpoints: OAuthEndpoints{"https://gitlab.com/oauth/authorize", "https://gitlab.com/oauth/token",
		"https://gitlab.com/api/v4/user"}, scopes: []string{"read_user"}},
	"google": {endpoints: OAuthEndpoints{"https://accounts.google.com/o/oauth2/v2/auth", "https://oauth2.googleapis.com/token",
		"https://openidconnect.googleapis.com/v1/userinfo"}, scopes: []string{"openid", "email", "profile"}},
	"microsoft": {endpoints: OAuthEndpoints{"https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
		"https://login.microsoftonline.com/common/oauth2/v2.0/token", "https://graph.microsoft.com/v1.0/me"}, scopes: []string{"User.Read"}},
	"linkedin": {endpoints: OAuthEndpoints{"https://www.linkedin.com/oauth/v2/authorization", "https://www.linkedin.com/oauth/v2/accessToken",
		"https://api.linkedin.com/v2/userinfo"}, scopes: []string{"openid", "profile", "email"}},
	"twitch": {endpoints: OAuthEndpoints{"https://id.twitch.tv/oauth2/authorize", "https://id.twitch.tv/oauth2/token",
		"https://api.twitch.tv/helix/users"}, scopes: []string{"user:read:email"}, clientIDHeader: true},
	"facebook": {endpoints: OAuthEndpoints{"https://www.facebook.com/v19.0/dialog/oauth", "https://graph.facebook.com/v19.0/oauth/access_token",
		"https://graph.facebook.com/v19.0/me?fields=id,name,email"}, scopes: []string{"email", "public_profile"}},
	"amazon": {endpoints: OAuthEndpoints{"https://www.amazon.com/ap/oa", "https://api.amazon.com/auth/o2/token",
		"https://api.amazon.com/user/profile"}, scopes: []string{"profile"}},
}

// OAuthProvider reports whether edgeplane knows the OAuth provider name.
func OAuthProvider(name string) bool { _, ok := oauthProviders[name]; return ok }

// CheckOAuthEndpoints checks an override of a provider's endpoints: three absolute https URLs.
func CheckOAuthEndpoints(e OAuthEndpoints) error {
	for _, u := range []string{e.AuthURL, e.TokenURL, e.UserInfoURL} {
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "https" || pu.Host == "" {
			return fmt.Errorf("%q is not an https URL", u)
		}
	}
	return nil
}

// OAuthConfig is the oauth module's configuration.
type OAuthConfig struct {
	Provider string
	App      OAuthApp
	// Endpoints override the provider's public ones (GitHub Enterprise, GitLab self-managed).
	Endpoints *OAuthEndpoints
	// Scopes are asked for beside the ones the identity needs.
	Scopes []string
	// Who may pass: a listed address, an address in a listed domain, a member of a listed GitHub
	// organization or team ("org/team"); with none listed, every user of the provider.
	EmailAddresses, EmailDomains, Organizations, Teams []string
	// CheckInterval re-asks the provider for the user (and their organizations) when that long
	// has passed since the last check; 0 never re-checks.
	CheckInterval time.Duration
	Session       SessionConfig
	Client        *http.Client
	// AuthParams are added to the authorization URL (a traffic policy's authz_url_params).
	AuthParams map[string]string
}

// oauthBackend is a plain OAuth 2.0 provider behind the sign-in flow: the user comes from the
// provider's user endpoint, asked with the access token.
type oauthBackend struct {
	cfg    OAuthConfig
	p      oauthProvider
	conf   oauth2.Config
	client *http.Client
	apiURL string // GitHub's API root, from the user endpoint
}

// NewOAuth builds the oauth stage. It refuses an unknown provider, a missing client, and
// endpoints that are not https.
func NewOAuth(cfg OAuthConfig) (Stage, error) {
	p, ok := oauthProviders[cfg.Provider]
	if !ok {
		return nil, fmt.Errorf("unknown OAuth provider %q", cfg.Provider)
	}
	if cfg.App.ClientID == "" || cfg.App.ClientSecret == "" {
		return nil, errors.New("no OAuth application (client_id and client_secret)")
	}
	if cfg.Endpoints != nil {
		p.endpoints = *cfg.Endpoints
	}
	if err := CheckOAuthEndpoints(p.endpoints); err != nil {
		return nil, err
	}
	scopes := slices.Clone(p.scopes)
	if cfg.Provider == "github" && (len(cfg.Organizations) > 0 || len(cfg.Teams) > 0) {
		scopes = append(scopes, "read:org")
	}
	for _, s := range cfg.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	b := &oauthBackend{cfg: cfg, p: p, client: boundedClient(cfg.Client),
		apiURL: strings.TrimSuffix(p.endpoints.UserInfoURL, "/user"),
		conf: oauth2.Config{ClientID: cfg.App.ClientID, ClientSecret: cfg.App.ClientSecret, Scopes: scopes,
			Endpoint: oauth2.Endpoint{AuthURL: p.endpoints.AuthURL, TokenURL: p.endpoints.TokenURL}}}
	cfg.Session.Scope = "oauth\x00" + cfg.Provider + "\x00" + p.endpoints.AuthURL + "\x00" + cfg.App.ClientID
	s, err := NewSessions(cfg.Session)
	if err != nil {
		return nil, err
	}
	return &signIn{module: "oauth", s: s, b: b, checkEvery: cfg.CheckInterval}, nil
}

func (b *oauthBackend) authURL(_ context.Context, redirect, state string, f *signInFlow) (string, error) {
	c := b.conf
	c.RedirectURL = redirect
	return c.AuthCodeURL(state, append(authParams(b.cfg.AuthParams), oauth2.S256ChallengeOption(f.Verifier))...), nil
}

func (b *oauthBackend) finish(ctx context.Context, r *http.Request, redirect string, f *signInFlow) (Identity, *signInError) {
	c := b.conf
	c.RedirectURL = redirect
	tok, err := c.Exchange(providerContext(ctx, b.client), r.URL.Query().Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, &signInError{http.StatusBadGateway, CodeSignInFailed, b.cfg.Provider + " did not accept the sign-in: " + fetchFailure(err)}
	}
	id, err := b.user(ctx, tok.AccessToken)
	if err != nil {
		return Identity{}, &signInError{http.StatusBadGateway, CodeSignInFailed, "The user could not be read from " + b.cfg.Provider + ": " + fetchFailure(err)}
	}
	id.AccessToken, id.RefreshToken = tok.AccessToken, tok.RefreshToken
	return id, nil
}

// recheck asks the provider for the user again with the session's access token: a refused
// token, or another user, ends the session; organizations and teams are updated.
func (b *oauthBackend) recheck(ctx context.Context, id *Identity) error {
	if id.AccessToken == "" {
		return errors.New("nothing to re-check the session with")
	}
	now, err := b.user(ctx, id.AccessToken)
	if err != nil {
		return err
	}
	if now.UserID != id.UserID {
		return errors.New("the provider names another user")
	}
	id.Email, id.Name, id.Groups = now.Email, now.Name, now.Groups
	return nil
}

func (b *oauthBackend) allowed(id Identity) bool {
	c := b.cfg
	if len(c.EmailAddresses)+len(c.EmailDomains)+len(c.Organizations)+len(c.Teams) == 0 {
		return true
	}
	if (len(c.EmailAddresses) > 0 || len(c.EmailDomains) > 0) && EmailAllowed(id.Email, c.EmailAddresses, c.EmailDomains) {
		return true
	}
	for _, g := range id.Groups {
		if slices.ContainsFunc(c.Organizations, func(o string) bool { return strings.EqualFold(o, g) }) ||
			slices.ContainsFunc(c.Teams, func(t string) bool { return strings.EqualFold(t, g) }) {
			return true
		}
	}
	return false
}

// getJSON GETs an endpoint of the provider with the access token and decodes the answer.
func (b *oauthBackend) getJSON(ctx context.Context, u, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if b.p.clientIDHeader {
		req.Header.Set("Client-Id", b.cfg.App.ClientID)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("%s answered %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// user reads the signed-in user from the provider's user endpoint (and, for GitHub, the
// verified primary email, organizations and teams).
func (b *oauthBackend) user(ctx context.Context, token string) (Identity, error) {
	var raw map[string]any
	if err := b.getJSON(ctx, b.p.endpoints.UserInfoURL, token, &raw); err != nil {
		return Identity{}, err
	}
	if data, ok := raw["data"].([]any); ok { // Twitch: {"data": [user]}
		if len(data) == 0 {
			return Identity{}, errors.New("the provider returned no user")
		}
		raw, _ = data[0].(map[string]any)
	}
	id := Identity{Provider: b.cfg.Provider, UserID: firstString(raw, "sub", "id", "user_id"),
		Email: firstString(raw, "email", "mail"), Name: firstString(raw, "name", "displayName", "display_name", "login", "username")}
	if v, ok := raw["email_verified"].(bool); ok && !v {
		id.Email = ""
	}
	if b.cfg.Provider == "microsoft" {
		// Graph's mail is whatever the user's tenant (any tenant: the endpoint is "common") put
		// there, never verified: a tenant of the attacker's could name ceo@victim.com and pass
		// email_domains ("nOAuth"). A member's userPrincipalName must be in a domain its
		// tenant verified (or a personal account's own sign-in address), so only it is used; a
		// guest's (#EXT#) is not an address.
		id.Email = ""
		if upn, _ := raw["userPrincipalName"].(string); strings.Contains(upn, "@") && !strings.Contains(upn, "#EXT#") {
			id.Email = upn
		}
	}
	if id.UserID == "" {
		return Identity{}, errors.New("the provider's user has no id")
	}
	if b.cfg.Provider == "github" {
		if err := b.github(ctx, token, &id); err != nil {
			return Identity{}, err
		}
	}
	return id, nil
}

// github fills in the user's verified primary email and, when the module restricts to them,
// their organizations ("org") and teams ("org/team"); one page of 100 of each is read.
func (b *oauthBackend) github(ctx context.Context, token string, id *Identity) error {
	var emails []struct {
		Email             string
		Primary, Verified bool
	}
	id.Email = ""
	if err := b.getJSON(ctx, b.apiURL+"/user/emails?per_page=100", token, &emails); err == nil {
		for _, e := range emails {
			if e.Primary && e.Verified {
				id.Email = e.Email
			}
		}
	}
	id.Groups = nil
	if len(b.cfg.Organizations) > 0 {
		var orgs []struct{ Login string }
		if err := b.getJSON(ctx, b.apiURL+"/user/orgs?per_page=100", token, &orgs); err != nil {
			return err
		}
		for _, o := range orgs {
			id.Groups = append(id.Groups, o.Login)
		}
	}
	if len(b.cfg.Teams) > 0 {
		var teams []struct {
			Slug         string
			Organization struct{ Login string }
		}
		if err := b.getJSON(ctx, b.apiURL+"/user/teams?per_page=100", token, &teams); err != nil {
			return err
		}
		for _, t := range teams {
			id.Groups = append(id.Groups, t.Organization.Login+"/"+t.Slug)
		}
	}
	return nil
}

// firstString returns the first of keys that holds a non-empty string or a number (ids are
// numbers at GitHub and GitLab).
func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		switch v := m[k].(type) {
		case string:
			if v != "" {
				return v
			}
		case float64:
			return fmt.Sprintf("%.0f", v)
		}
	}
	return ""
}

// oauthUnavailable answers every request of a route whose module names no application of its
// own when the operator registered no managed one for the provider.
type oauthUnavailable struct{ provider string }

// OAuthUnavailable is the stage of an oauth module that cannot sign anyone in: the route names
// no client of its own and the operator started edgeplane without --oauth-app for the
// provider. It answers 503 ERR_NGROK_3210, the code of every route module that fails closed, naming the
// flag to set.
func OAuthUnavailable(provider string) Stage { return oauthUnavailable{provider} }

// Name is the module's name.
func (u oauthUnavailable) Name() string { return "oauth" }

// Wrap refuses every request.
func (u oauthUnavailable) Wrap(http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "This route signs visitors in with "+u.provider+
			" through the managed OAuth application, and this edgeplane server has none for "+u.provider+
			": its operator must start it with --oauth-app "+u.provider+"=CLIENT_ID:CLIENT_SECRET (or EDGEPLANE_OAUTH_APPS), "+
			"or the route must name its own client_id and client_secret.")
	})
}
