package enforce

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDCConfig is the oidc module's configuration.
type OIDCConfig struct {
	// Issuer is the https URL of the OpenID provider; discovery appends
	// /.well-known/openid-configuration to it.
	Issuer, ClientID, ClientSecret string
	// Scopes are requested beside openid, which is always requested.
	Scopes []string
	// EmailAddresses and EmailDomains restrict who may pass (the agents' allow_emails and
	// allow_domains); none lets every user of the provider in.
	EmailAddresses, EmailDomains []string
	// CheckInterval re-checks a session with the provider (refresh token, else the userinfo
	// endpoint) when that long has passed since the last check; 0 never re-checks.
	CheckInterval time.Duration
	// Session is the session settings (Scope is filled in from the issuer and client).
	Session SessionConfig
	// Client makes every request to the provider (it trusts the system roots plus --outbound-ca).
	Client *http.Client
	// AuthParams are added to the authorization URL (a traffic policy's authz_url_params).
	AuthParams map[string]string
	// Providers is the data plane's cache of discovered providers, shared by every stage given
	// it; without it the stage discovers its provider for itself.
	Providers *OIDCProviders
}

// Discovery limits: a discovered provider is used for oidcMaxAge, and a failed discovery is not
// tried again for oidcRetry, so visitors cannot make edgeplane hammer a provider that is down.
// Variables for the tests.
var (
	oidcMaxAge = time.Hour
	oidcRetry  = 10 * time.Second
)

// OIDCProviders holds the discovered OpenID providers of a data plane's oidc modules, bind
// options and openid-connect actions, one per issuer and outbound client, so that a plan rebuild
// does not discover again and routes sharing an issuer share its discovery, its keys and its
// retry limit. It is the data plane's instance (plan.Env), not process-wide state: two data
// planes in one process keep theirs apart, so one's failed discovery is never served to the
// other. A provider keeps the client it was discovered with for its key set fetches, so the
// key names the client too: a stage never fetches through another client, whose outbound guard
// may differ. A provider is kept while a stage holds it and dropped once no stage does. The
// zero value is not ready: use NewOIDCProviders.
type OIDCProviders struct {
	m *weakCache[oidcKey, oidcDiscovery]
}

// NewOIDCProviders returns an empty cache of discovered providers.
func NewOIDCProviders() *OIDCProviders {
	return &OIDCProviders{m: newWeakCache[oidcKey, oidcDiscovery]()}
}

// discovery returns the discovery of issuer with client, made on first use. With a nil
// OIDCProviders it is the caller's own.
func (ps *OIDCProviders) discovery(issuer string, client *http.Client) *oidcDiscovery {
	if ps == nil {
		return &oidcDiscovery{}
	}
	return ps.m.get(oidcKey{client, issuer}, func() *oidcDiscovery { return &oidcDiscovery{} })
}

// len is the number of providers held, for the tests.
func (ps *OIDCProviders) len() int { return ps.m.len() }

type oidcKey struct {
	client *http.Client
	issuer string
}

// oidcDiscovery is the discovery document of one issuer, fetched when first needed.
type oidcDiscovery struct {
	mu      sync.Mutex
	p       *oidc.Provider
	fetched time.Time
	lastTry time.Time
	lastErr error
}

// provider returns the issuer's discovered provider, discovering it when it never was or is old.
func (d *oidcDiscovery) provider(issuer string, client *http.Client) (*oidc.Provider, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if d.p != nil && now.Sub(d.fetched) < oidcMaxAge {
		return d.p, nil
	}
	if !d.lastTry.IsZero() && now.Sub(d.lastTry) < oidcRetry {
		if d.p != nil {
			return d.p, nil
		}
		return nil, d.lastErr
	}
	d.lastTry = now
	// The context carries the client for the discovery and, after it, the key set fetches.
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.Background(), client), 20*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		d.lastErr = fmt.Errorf("discovery at %s failed: %w", issuer, err)
		if d.p != nil {
			return d.p, nil
		}
		return nil, d.lastErr
	}
	d.p, d.fetched, d.lastErr = p, now, nil
	return p, nil
}

// oidcBackend is the OpenID Connect protocol behind the sign-in flow.
type oidcBackend struct {
	cfg    OIDCConfig
	client *http.Client
	disc   *oidcDiscovery
	scopes []string
}

// NewOIDC builds the oidc stage. It refuses an issuer that is not https, a missing client, or
// session settings without a key; the provider is discovered when a visitor first needs it.
func NewOIDC(cfg OIDCConfig) (Stage, error) {
	u, err := url.Parse(cfg.Issuer)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("the issuer %q is not an https URL", cfg.Issuer)
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("client_id and client_secret are required")
	}
	b := &oidcBackend{cfg: cfg, client: boundedClient(cfg.Client)}
	b.disc = cfg.Providers.discovery(cfg.Issuer, cfg.Client)
	b.scopes = []string{oidc.ScopeOpenID}
	for _, s := range cfg.Scopes {
		if !slices.Contains(b.scopes, s) {
			b.scopes = append(b.scopes, s)
		}
	}
	cfg.Session.Scope = "oidc\x00" + cfg.Issuer + "\x00" + cfg.ClientID
	s, err := NewSessions(cfg.Session)
	if err != nil {
		return nil, err
	}
	return &signIn{module: "oidc", s: s, b: b, checkEvery: cfg.CheckInterval}, nil
}

func (b *oidcBackend) oauth2Config(p *oidc.Provider, redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: b.cfg.ClientID, ClientSecret: b.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: redirect, Scopes: b.scopes}
}

func (b *oidcBackend) verifier(p *oidc.Provider, now func() time.Time) *oidc.IDTokenVerifier {
	return p.Verifier(&oidc.Config{ClientID: b.cfg.ClientID, Now: now})
}

func (b *oidcBackend) authURL(_ context.Context, redirect, state string, f *signInFlow) (string, error) {
	p, err := b.disc.provider(b.cfg.Issuer, b.client)
	if err != nil {
		return "", err
	}
	return b.oauth2Config(p, redirect).AuthCodeURL(state,
		append(authParams(b.cfg.AuthParams), oauth2.S256ChallengeOption(f.Verifier), oidc.Nonce(f.Nonce))...), nil
}

// oidcClaims are the ID token's and userinfo's claims edgeplane uses.
type oidcClaims struct {
	Subject       string `json:"sub"`
	Email         string `json:"email"`
	EmailVerified *bool  `json:"email_verified"`
	Name          string `json:"name"`
	Username      string `json:"preferred_username"`
}

// identity is the claims as an identity; an email the provider says is unverified is left out,
// so it can never pass email_addresses or email_domains.
func (c oidcClaims) identity() Identity {
	id := Identity{Provider: "oidc", UserID: c.Subject, Name: c.Name}
	if c.EmailVerified == nil || *c.EmailVerified {
		id.Email = c.Email
	}
	if id.Name == "" {
		id.Name = c.Username
	}
	return id
}

func (b *oidcBackend) finish(ctx context.Context, r *http.Request, redirect string, f *signInFlow) (Identity, *signInError) {
	p, err := b.disc.provider(b.cfg.Issuer, b.client)
	if err != nil {
		return Identity{}, &signInError{http.StatusBadGateway, CodeSignInFailed, "The OIDC provider cannot be reached: " + fetchFailure(err)}
	}
	ctx = providerContext(ctx, b.client)
	tok, err := b.oauth2Config(p, redirect).Exchange(ctx, r.URL.Query().Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, &signInError{http.StatusBadGateway, CodeSignInFailed, "The OIDC provider did not accept the sign-in: " + fetchFailure(err)}
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, &signInError{http.StatusBadGateway, 5203, "The OIDC provider failed to return an OIDC ID Token."}
	}
	idt, err := b.verifier(p, nil).Verify(ctx, raw)
	if err == nil && idt.Nonce != f.Nonce {
		err = errors.New("the nonce does not match the sign-in's")
	}
	if err != nil {
		return Identity{}, &signInError{http.StatusUnauthorized, 5204, "Failed to verify the OIDC ID Token: " + short(err.Error())}
	}
	var c oidcClaims
	if err := idt.Claims(&c); err != nil {
		return Identity{}, &signInError{http.StatusUnauthorized, 5204, "Failed to verify the OIDC ID Token: its claims do not decode."}
	}
	id := c.identity()
	id.AccessToken, id.RefreshToken = tok.AccessToken, tok.RefreshToken
	return id, nil
}

// recheck refreshes the tokens when there is a refresh token (a new ID token must name the same
// subject), else asks the userinfo endpoint with the access token; any refusal ends the session.
func (b *oidcBackend) recheck(ctx context.Context, id *Identity) error {
	p, err := b.disc.provider(b.cfg.Issuer, b.client)
	if err != nil {
		return err
	}
	ctx = providerContext(ctx, b.client)
	if id.RefreshToken != "" {
		ts := b.oauth2Config(p, "").TokenSource(ctx, &oauth2.Token{RefreshToken: id.RefreshToken, Expiry: time.Unix(1, 0)})
		tok, err := ts.Token()
		if err != nil {
			return err
		}
		if raw, _ := tok.Extra("id_token").(string); raw != "" {
			idt, err := b.verifier(p, nil).Verify(ctx, raw)
			if err != nil {
				return err
			}
			if idt.Subject != id.UserID {
				return errors.New("the refreshed ID token names another user")
			}
		}
		id.AccessToken = tok.AccessToken
		if tok.RefreshToken != "" {
			id.RefreshToken = tok.RefreshToken
		}
		return nil
	}
	if id.AccessToken == "" {
		return errors.New("nothing to re-check the session with")
	}
	ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(&oauth2.Token{AccessToken: id.AccessToken}))
	if err != nil {
		return err
	}
	if ui.Subject != id.UserID {
		return errors.New("the userinfo names another user")
	}
	return nil
}

func (b *oidcBackend) allowed(id Identity) bool {
	return EmailAllowed(id.Email, b.cfg.EmailAddresses, b.cfg.EmailDomains)
}
