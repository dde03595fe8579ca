package enforce

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testUser is who is signed in at the test provider.
type testUser struct {
	Sub, Email, Name string
	Unverified       bool
}

// testOIDC is an OpenID provider served by the test: discovery, JWKS, an authorize endpoint
// that signs the current user in at once and redirects back with a code, a token endpoint that
// checks the PKCE verifier and the client and returns RS256-signed ID tokens, and userinfo.
type testOIDC struct {
	srv    *httptest.Server
	key    *rsa.PrivateKey
	client string
	secret string

	mu       sync.Mutex
	user     testUser
	codes    map[string]testCode
	refresh  map[string]testUser // refresh token -> user; deleted when revoked
	badNonce bool
	noIDTok  bool
	expired  bool
	aud, iss string
	keepJWKS *rsa.PublicKey // published instead of the signing key's
	tokens   int

	discoveries atomic.Int32 // discovery documents served
	discDown    atomic.Bool  // discovery answers 503
}

type testCode struct {
	user                 testUser
	nonce, challenge, ru string
}

func newTestOIDC(t *testing.T) *testOIDC {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &testOIDC{key: key, client: "client-1", secret: "secret-1", codes: map[string]testCode{}, refresh: map[string]testUser{},
		user: testUser{Sub: "u-1", Email: "alice@example.com", Name: "Alice"}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if p.discDown.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.discoveries.Add(1)
		u := p.srv.URL
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": u, "authorization_endpoint": u + "/authorize",
			"token_endpoint": u + "/token", "userinfo_endpoint": u + "/userinfo", "jwks_uri": u + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}, "response_types_supported": []string{"code"}})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		pub := &p.key.PublicKey
		if p.keepJWKS != nil {
			pub = p.keepJWKS
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != p.client || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
			q.Get("state") == "" || q.Get("nonce") == "" || !strings.Contains(" "+q.Get("scope")+" ", " openid ") {
			http.Error(w, "bad authorize request "+r.URL.RawQuery, 400)
			return
		}
		code := RandomToken()
		p.mu.Lock()
		p.codes[code] = testCode{user: p.user, nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), ru: q.Get("redirect_uri")}
		p.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("/token", p.token)
	mux.HandleFunc("/userinfo", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		u, ok := p.refresh["at:"+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		p.mu.Unlock()
		if !ok {
			http.Error(w, "bad token", 401)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sub": u.Sub, "email": u.Email})
	})
	p.srv = httptest.NewTLSServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *testOIDC) setUser(u testUser) { p.mu.Lock(); p.user = u; p.mu.Unlock() }

// revokeAll revokes every refresh and access token.
func (p *testOIDC) revokeAll() { p.mu.Lock(); p.refresh = map[string]testUser{}; p.mu.Unlock() }

func (p *testOIDC) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", 400)
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != p.client || secret != p.secret {
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens++
	var u testUser
	nonce := ""
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		c, ok := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || r.PostForm.Get("redirect_uri") != c.ru {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		u, nonce = c.user, c.nonce
		if p.badNonce {
			nonce = "other"
		}
	case "refresh_token":
		var ok bool
		if u, ok = p.refresh[r.PostForm.Get("refresh_token")]; !ok {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
	default:
		w.WriteHeader(400)
		return
	}
	rt, at := RandomToken(), RandomToken()
	p.refresh[rt], p.refresh["at:"+at] = u, u
	out := map[string]any{"access_token": at, "token_type": "Bearer", "refresh_token": rt, "expires_in": 3600}
	if !p.noIDTok {
		out["id_token"] = p.sign(u, nonce)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (p *testOIDC) sign(u testUser, nonce string) string {
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: p.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		panic(err)
	}
	now := time.Now()
	iss, aud, exp := p.srv.URL, p.client, now.Add(time.Hour)
	if p.iss != "" {
		iss = p.iss
	}
	if p.aud != "" {
		aud = p.aud
	}
	if p.expired {
		exp = now.Add(-time.Hour)
	}
	claims := map[string]any{"iss": iss, "sub": u.Sub, "aud": aud, "exp": exp.Unix(), "iat": now.Add(-2 * time.Hour).Unix(),
		"email": u.Email, "email_verified": !u.Unverified, "name": u.Name}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	raw, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		panic(err)
	}
	return raw
}

// oidcEdge serves the oidc stage in front of an echoing upstream.
func oidcEdge(t *testing.T, p *testOIDC, clock *testClock, mut func(*OIDCConfig)) *httptest.Server {
	t.Helper()
	return signInEdge(t, OIDCConfig{Issuer: p.srv.URL, ClientID: p.client, ClientSecret: p.secret, Scopes: []string{"email", "profile"},
		Client: p.srv.Client(), Session: SessionConfig{Key: testKey, CookiePrefix: "ngrok.", Now: clock.Now}}, mut, NewOIDC)
}

func TestOIDCSignIn(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	edge := oidcEdge(t, p, clock, func(c *OIDCConfig) { c.EmailDomains = []string{"example.com"} })
	b := browser(t, edge)
	resp, body := get(t, b, edge.URL+"/app/page?x=1", "Ngrok-Auth-User-Email", "mallory@example.com", "ngrok-auth-user-id", "root")
	if resp.StatusCode != 200 || body != "upstream /app/page?x=1" {
		t.Fatalf("after sign-in: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Got-Email") != "alice@example.com" || resp.Header.Get("X-Got-Id") != "u-1" || resp.Header.Get("X-Got-Name") != "Alice" {
		t.Fatalf("identity headers %v", resp.Header)
	}
	// Signed in: no new sign-in, and a spoofed header is still replaced.
	before := p.tokens
	resp, _ = get(t, b, edge.URL+"/other", "ngrok-auth-user-email", "mallory@example.com")
	if resp.StatusCode != 200 || resp.Header.Get("X-Got-Email") != "alice@example.com" || p.tokens != before {
		t.Fatalf("second request: %d %v (tokens %d -> %d)", resp.StatusCode, resp.Header, before, p.tokens)
	}
	// Logout clears the session: the next request signs in again.
	resp, body = get(t, b, edge.URL+"/ngrok/logout")
	if resp.StatusCode != 200 || !strings.Contains(body, "signed out") {
		t.Fatalf("logout: %d %q", resp.StatusCode, body)
	}
	u, _ := url.Parse(edge.URL)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == "ngrok.session" {
			t.Fatal("session cookie left after logout")
		}
	}
	p.setUser(testUser{Sub: "u-2", Email: "bob@example.com", Name: "Bob"})
	resp, _ = get(t, b, edge.URL+"/")
	if resp.StatusCode != 200 || resp.Header.Get("X-Got-Email") != "bob@example.com" {
		t.Fatalf("after logout: %d %v", resp.StatusCode, resp.Header)
	}
	// /ngrok/login with a redirect_path signs in again and goes there; an off-site path does not.
	resp, body = get(t, b, edge.URL+"/ngrok/login?redirect_path=/there")
	if resp.StatusCode != 200 || body != "upstream /there" {
		t.Fatalf("login: %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, b, edge.URL+"/ngrok/login?redirect_path=//evil.example/")
	if resp.StatusCode != 200 || body != "upstream /" || resp.Request.URL.Host != u.Host {
		t.Fatalf("login off-site: %d %q %s", resp.StatusCode, body, resp.Request.URL)
	}
}

func TestOIDCDenied(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	edge := oidcEdge(t, p, clock, func(c *OIDCConfig) {
		c.EmailAddresses = []string{"carol@other.org"}
		c.EmailDomains = []string{"example.com"}
	})
	for _, u := range []testUser{
		{Sub: "x", Email: "eve@evil.com"},                           // wrong domain
		{Sub: "y", Email: "eve@example.com.evil.com"},               // suffix trick
		{Sub: "z", Email: "alice@example.com", Unverified: true},    // unverified email
		{Sub: "w", Email: "dave@other.org"},                         // wrong address
		{Sub: "v", Email: ""},                                       // none
		{Sub: "q", Email: "carol@other.org.", Name: "trailing dot"}, // not the address
	} {
		p.setUser(u)
		resp, body := get(t, browser(t, edge), edge.URL+"/")
		wantCode(t, resp, 403, "ERR_NGROK_3129")
		if strings.Contains(body, "upstream") {
			t.Fatal("upstream reached")
		}
	}
	p.setUser(testUser{Sub: "c", Email: "carol@other.org"})
	if resp, _ := get(t, browser(t, edge), edge.URL+"/"); resp.StatusCode != 200 {
		t.Fatalf("listed address refused: %d", resp.StatusCode)
	}
}

func TestOIDCTamperedAndExpired(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	edge := oidcEdge(t, p, clock, func(c *OIDCConfig) {
		c.Session.MaximumDuration = time.Hour
		c.Session.InactivityTimeout = 10 * time.Minute
	})
	b := browser(t, edge)
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	// A browser without redirects sees whether it is sent to sign in.
	signsIn := func() bool {
		resp, _ := get(t, noFollow(b), edge.URL+"/")
		if resp.StatusCode == 302 {
			return strings.HasPrefix(resp.Header.Get("Location"), p.srv.URL+"/authorize?")
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return false
	}
	if signsIn() {
		t.Fatal("signed-in browser sent to sign in")
	}
	u, _ := url.Parse(edge.URL)
	var sess *http.Cookie
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == "ngrok.session" {
			sess = c
		}
	}
	// Tampered: one character changed.
	v := []byte(sess.Value)
	v[len(v)/2] ^= 1
	b.Jar.SetCookies(u, []*http.Cookie{{Name: "ngrok.session", Value: string(v), Path: "/"}})
	if !signsIn() {
		t.Fatal("tampered cookie accepted")
	}
	b.Jar.SetCookies(u, []*http.Cookie{{Name: "ngrok.session", Value: sess.Value, Path: "/"}})
	// Inactive for the timeout.
	clock.Add(9 * time.Minute)
	if signsIn() {
		t.Fatal("active session refused")
	}
	clock.Add(10 * time.Minute)
	if !signsIn() {
		t.Fatal("inactive session accepted")
	}
	// Active, but past the maximum duration.
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 {
		t.Fatal("sign-in again")
	}
	for i := 0; i < 6; i++ {
		clock.Add(9 * time.Minute)
		if signsIn() {
			t.Fatalf("session ended after %d min", (i+1)*9)
		}
	}
	clock.Add(9 * time.Minute) // 63 min
	if !signsIn() {
		t.Fatal("session outlived maximum_duration")
	}
}

func TestOIDCRecheck(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	edge := oidcEdge(t, p, clock, func(c *OIDCConfig) { c.CheckInterval = time.Minute })
	b := browser(t, edge)
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 {
		t.Fatal("sign-in")
	}
	n := p.tokens
	clock.Add(2 * time.Minute)
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 || p.tokens != n+1 {
		t.Fatalf("re-check by refresh: %d, %d token calls", resp.StatusCode, p.tokens-n)
	}
	// The provider revokes the user: the next re-check ends the session and signs in again
	// (here as another user).
	p.revokeAll()
	p.setUser(testUser{Sub: "u-9", Email: "zed@example.com"})
	clock.Add(2 * time.Minute)
	if resp, _ := get(t, b, edge.URL+"/"); resp.StatusCode != 200 || resp.Header.Get("X-Got-Email") != "zed@example.com" {
		t.Fatalf("after revocation: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestOIDCErrors(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	edge := oidcEdge(t, p, clock, nil)
	// A callback without its sign-in cookie, or with a made-up state.
	resp, _ := get(t, browser(t, edge), edge.URL+"/ngrok/oauth2/callback?code=x&state=forged")
	wantCode(t, resp, 400, "ERR_NGROK_5211")
	// The ID token's nonce is not the sign-in's.
	p.badNonce = true
	resp, _ = get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 401, "ERR_NGROK_5204")
	p.badNonce = false
	// No ID token.
	p.noIDTok = true
	resp, _ = get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 502, "ERR_NGROK_5203")
	p.noIDTok = false
	// A wrong client secret: the token endpoint refuses.
	bad := oidcEdge(t, p, clock, func(c *OIDCConfig) { c.ClientSecret = "wrong" })
	resp, _ = get(t, browser(t, bad), bad.URL+"/")
	wantCode(t, resp, 502, "ERR_NGROK_5211")
	// The ID token is for another audience.
	p.aud = "client-other"
	resp, _ = get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 401, "ERR_NGROK_5204")
	p.aud = ""
	// An ID token from another issuer.
	p.iss = "https://other-issuer.example"
	resp, _ = get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 401, "ERR_NGROK_5204")
	p.iss = ""
	// An ID token signed by a key outside the provider's key set.
	good := p.key
	p.key, _ = rsa.GenerateKey(rand.Reader, 2048)
	p.keepJWKS = &good.PublicKey
	resp, _ = get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 401, "ERR_NGROK_5204")
	p.key, p.keepJWKS = good, nil
	// An expired ID token.
	p.expired = true
	resp, _ = get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 401, "ERR_NGROK_5204")
	p.expired = false
	// The provider says no.
	nf := noFollow(browser(t, edge))
	resp, _ = get(t, nf, edge.URL+"/")
	loc, _ := url.Parse(resp.Header.Get("Location"))
	resp, _ = get(t, nf, edge.URL+"/ngrok/oauth2/callback?error=access_denied&state="+url.QueryEscape(loc.Query().Get("state")))
	wantCode(t, resp, 403, "ERR_NGROK_5211")
	// An unreachable issuer.
	dead := httptest.NewTLSServer(http.NotFoundHandler())
	dead.Close()
	st, err := NewOIDC(OIDCConfig{Issuer: dead.URL, ClientID: "a", ClientSecret: "b", Client: dead.Client(),
		Session: SessionConfig{Key: testKey, Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	st.Wrap(upstreamEcho()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 502 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_5211" {
		t.Fatalf("dead issuer: %d %v", rec.Code, rec.Header())
	}
	// Configuration refused.
	for _, c := range []OIDCConfig{
		{Issuer: "http://idp.example", ClientID: "a", ClientSecret: "b", Session: SessionConfig{Key: testKey}},
		{Issuer: "https://idp.example", ClientID: "", ClientSecret: "b", Session: SessionConfig{Key: testKey}},
		{Issuer: "https://idp.example", ClientID: "a", ClientSecret: "b"},
	} {
		if _, err := NewOIDC(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestOIDCOptionsPassthrough(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	on := oidcEdge(t, p, clock, func(c *OIDCConfig) { c.Session.OptionsPassthrough = true })
	off := oidcEdge(t, p, clock, nil)
	do := func(u string) *http.Response {
		req, _ := http.NewRequest("OPTIONS", u+"/api", nil)
		req.Header.Set("Origin", "https://app.example")
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("ngrok-auth-user-email", "spoof@example.com")
		resp, err := noFollow(&http.Client{Transport: on.Client().Transport}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := do(on.URL); resp.StatusCode != 200 || resp.Header.Get("X-Got-Email") != "" {
		t.Fatalf("preflight with passthrough: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := do(off.URL); resp.StatusCode != 302 {
		t.Fatalf("preflight without passthrough: %d", resp.StatusCode)
	}
}
