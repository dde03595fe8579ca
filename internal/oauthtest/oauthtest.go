// Package oauthtest is a GitHub-shaped OAuth provider for tests: the authorize, token and API
// endpoints of GitHub Enterprise's layout (/login/oauth/… and /api/v3/…), which edgeplane reaches
// through an endpoint override. The enforce tests and the end-to-end tests through real agents
// share it, so both sign in against the same provider rather than each keeping its own copy.
package oauthtest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// User is who is signed in at the provider.
type User struct {
	ID                 int
	Login, Name, Email string // an empty Name is null in /user, as for a GitHub user without one
	Orgs               []string
	Teams              []string // "org/team"
	// UnverifiedPrimary makes Email, the primary address, unverified.
	UnverifiedPrimary bool
}

// OtherEmail is a verified address every user has besides Email, never the primary one: a
// client must take the primary address, not the first verified one it sees.
const OtherEmail = "other@elsewhere.org"

// Options configure a GitHub.
type Options struct {
	// Clients are the OAuth applications the provider knows: client id -> secret.
	Clients map[string]string
	// User is signed in at the provider until SetUser changes it.
	User User
	// Certificate, when set, is the server's TLS certificate (one for 127.0.0.1), so that only
	// the clients trusting its issuer reach it; otherwise httptest makes one.
	Certificate *tls.Certificate
	// FormEncoded makes the token endpoint answer in GitHub's default form encoding
	// (access_token=…&token_type=bearer) instead of JSON, whatever the client's Accept header
	// asks for, so that a test covers a client reading either.
	FormEncoded bool
}

// GitHub is a running provider. Its authorize endpoint signs the current user in at once and
// redirects back with a code; its token endpoint checks the client, the PKCE verifier (S256 only)
// and the redirect URI, and hands out an access token for the user signed in at that moment; its
// API (/user, /user/emails, /user/orgs, /user/teams) answers for the user behind the bearer token
// and refuses any other with 401.
type GitHub struct {
	Server *httptest.Server

	opts   Options
	mu     sync.Mutex
	user   User
	codes  map[string]grant
	tokens map[string]User
	calls  int
	asked  []string
}

// grant is what an authorization code was handed out for.
type grant struct{ challenge, redirectURI string }

// NewGitHub starts a provider over TLS; t's cleanup stops it.
func NewGitHub(t testing.TB, o Options) *GitHub {
	t.Helper()
	g := &GitHub{opts: o, user: o.User, codes: map[string]grant{}, tokens: map[string]User{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/login/oauth/authorize", g.authorize)
	mux.HandleFunc("/login/oauth/access_token", g.token)
	g.api(mux, "/user", func(u User) any {
		var name any
		if u.Name != "" {
			name = u.Name
		}
		return map[string]any{"id": u.ID, "login": u.Login, "name": name, "email": nil}
	})
	g.api(mux, "/user/emails", func(u User) any {
		return []map[string]any{{"email": OtherEmail, "primary": false, "verified": true},
			{"email": u.Email, "primary": true, "verified": !u.UnverifiedPrimary}}
	})
	g.api(mux, "/user/orgs", func(u User) any {
		var out []map[string]any
		for _, o := range u.Orgs {
			out = append(out, map[string]any{"login": o})
		}
		return out
	})
	g.api(mux, "/user/teams", func(u User) any {
		var out []map[string]any
		for _, t := range u.Teams {
			org, slug, _ := strings.Cut(t, "/")
			out = append(out, map[string]any{"slug": slug, "organization": map[string]any{"login": org}})
		}
		return out
	})
	g.Server = httptest.NewUnstartedServer(mux)
	if o.Certificate != nil {
		g.Server.TLS = &tls.Config{Certificates: []tls.Certificate{*o.Certificate}}
	}
	g.Server.StartTLS()
	t.Cleanup(g.Server.Close)
	return g
}

// AuthorizeURL is the provider's authorization endpoint.
func (g *GitHub) AuthorizeURL() string { return g.Server.URL + "/login/oauth/authorize" }

// TokenURL is the provider's token endpoint.
func (g *GitHub) TokenURL() string { return g.Server.URL + "/login/oauth/access_token" }

// UserURL is the provider's user endpoint; the other API endpoints are below it.
func (g *GitHub) UserURL() string { return g.Server.URL + "/api/v3/user" }

// SetUser makes u the user of the next sign-ins.
func (g *GitHub) SetUser(u User) { g.mu.Lock(); g.user = u; g.mu.Unlock() }

// RevokeAll revokes every access token handed out so far.
func (g *GitHub) RevokeAll() { g.mu.Lock(); g.tokens = map[string]User{}; g.mu.Unlock() }

// ChangeSignedIn applies change to the user behind each access token handed out so far, as
// when a signed-in user leaves an organization.
func (g *GitHub) ChangeSignedIn(change func(*User)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for tok, u := range g.tokens {
		change(&u)
		g.tokens[tok] = u
	}
}

// Calls is how many API requests the provider has received, with a valid token or not.
func (g *GitHub) Calls() int { g.mu.Lock(); defer g.mu.Unlock(); return g.calls }

// Asked returns "client_id scope" of each authorization request accepted so far.
func (g *GitHub) Asked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.asked...)
}

func (g *GitHub) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, ok := g.opts.Clients[q.Get("client_id")]; !ok || q.Get("code_challenge_method") != "S256" {
		http.Error(w, "unknown client or no S256 code challenge", http.StatusBadRequest)
		return
	}
	code := rand.Text()
	g.mu.Lock()
	g.codes[code] = grant{q.Get("code_challenge"), q.Get("redirect_uri")}
	g.asked = append(g.asked, q.Get("client_id")+" "+q.Get("scope"))
	g.mu.Unlock()
	http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
}

func (g *GitHub) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.codes[r.PostForm.Get("code")]
	delete(g.codes, r.PostForm.Get("code"))
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	want, known := g.opts.Clients[id]
	if !ok || !known || secret != want || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge ||
		r.PostForm.Get("redirect_uri") != c.redirectURI {
		g.answer(w, url.Values{"error": {"bad_verification_code"}})
		return
	}
	tok := rand.Text()
	g.tokens[tok] = g.user
	g.answer(w, url.Values{"access_token": {tok}, "token_type": {"bearer"}, "scope": {"read:user"}})
}

// answer writes a token endpoint answer, as JSON or form-encoded (Options.FormEncoded), with
// status 200 even for an error, as GitHub does.
func (g *GitHub) answer(w http.ResponseWriter, v url.Values) {
	if g.opts.FormEncoded {
		w.Header().Set("Content-Type", "application/x-www-form-urlencoded")
		_, _ = w.Write([]byte(v.Encode()))
		return
	}
	m := map[string]string{}
	for k := range v {
		m[k] = v.Get(k)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
}

// api serves an API endpoint below /api/v3 answering f of the bearer token's user.
func (g *GitHub) api(mux *http.ServeMux, path string, f func(User) any) {
	mux.HandleFunc("/api/v3"+path, func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.calls++
		u, ok := g.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		g.mu.Unlock()
		if !ok {
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(f(u))
	})
}
