package enforce

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// jwksServer serves a key set over TLS and counts its fetches; keys can be added while it runs.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...jose.JSONWebKey) *jwksServer {
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) add(k jose.JSONWebKey) {
	s.mu.Lock()
	s.keys = append(s.keys, k)
	s.mu.Unlock()
}

// testKeys are an RSA and a P-256 key with their kids.
type testKeys struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
}

func newTestKeys(t *testing.T) testKeys {
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{rsa: r, ec: e}
}

func (k testKeys) public() []jose.JSONWebKey {
	return []jose.JSONWebKey{
		{Key: &k.rsa.PublicKey, KeyID: "rsa1", Use: "sig"},
		{Key: &k.ec.PublicKey, KeyID: "ec1", Algorithm: "ES256"},
		{Key: []byte("a symmetric key a JWKS must not carry"), KeyID: "oct1"},
	}
}

// sign makes a token with alg, key and kid, a typ header and claims.
func sign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid, typ string, claims any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType(jose.ContentType(typ))
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claimsAt are valid claims for the test's issuer and audience, changed by edit.
func claimsAt(edit func(*jwt.Claims)) jwt.Claims {
	now := time.Now()
	c := jwt.Claims{Issuer: "https://idp.example.com/", Audience: jwt.Audience{"api://edge"}, Subject: "alice",
		Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)), IssuedAt: jwt.NewNumericDate(now)}
	if edit != nil {
		edit(&c)
	}
	return c
}

// jwtStage builds the stage in front of an upstream that echoes the body it got.
func jwtStage(t *testing.T, srv *jwksServer, tokens ...JWTToken) http.Handler {
	t.Helper()
	if tokens == nil {
		tokens = []JWTToken{{Type: "jwt", Method: "header", Name: "Authorization", Prefix: "Bearer "}}
	}
	j, err := NewJWT(JWTConfig{Issuers: []string{"https://idp.example.com/"}, Audiences: []string{"api://edge", "api://other"},
		Tokens: tokens, Algorithms: []string{"RS256", "ES256", "HS256"}, JKUs: []string{srv.URL + "/keys"}, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return j.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append([]byte("upstream:"), b...))
	}))
}

func bearer(h http.Handler, header string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestJWT: RS256 and ES256 tokens from the key set are admitted; a missing token gets 401
// ERR_NGROK_3406, and every invalid one (wrong issuer, audience, algorithm, key, expired, not
// yet valid, no exp, garbage, an HMAC token) 401 ERR_NGROK_3401 with an invalid_token challenge.
func TestJWT(t *testing.T) {
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	h := jwtStage(t, srv)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)

	for name, tok := range map[string]string{
		"RS256":               sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil)),
		"ES256":               sign(t, jose.ES256, k.ec, "ec1", "JWT", claimsAt(nil)),
		"ES256 without a kid": sign(t, jose.ES256, k.ec, "", "JWT", claimsAt(nil)),
		"a second audience":   sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Audience = jwt.Audience{"x", "api://other"} })),
		"within the skew":     sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(time.Now().Add(-10 * time.Second)) })),
	} {
		if rec := bearer(h, "Bearer "+tok); rec.Code != 200 || rec.Body.String() != "upstream:" {
			t.Errorf("%s: %d %q, want it admitted", name, rec.Code, rec.Body)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Errorf("the key set was fetched %d times, want once (cached)", n)
	}

	for name, header := range map[string]string{
		"no header":      "",
		"another scheme": "Basic YWxpY2U6c2VjcmV0",
		"empty bearer":   "Bearer ",
	} {
		rec := bearer(h, header)
		if rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3406" || rec.Header().Get("WWW-Authenticate") != `Bearer realm="edgeplane"` {
			t.Errorf("%s: %d %q %q, want 401 ERR_NGROK_3406 with a Bearer challenge", name, rec.Code, rec.Header().Get("ngrok-error-code"), rec.Header().Get("WWW-Authenticate"))
		}
	}

	hmacKey := []byte("0123456789abcdef0123456789abcdef")
	for name, c := range map[string]struct{ tok, reason string }{
		"wrong issuer":       {sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Issuer = "https://evil.example.com/" })), "issuer"},
		"wrong audience":     {sign(t, jose.ES256, k.ec, "ec1", "JWT", claimsAt(func(c *jwt.Claims) { c.Audience = jwt.Audience{"api://elsewhere"} })), "audience"},
		"expired":            {sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(time.Now().Add(-2 * time.Minute)) })), "expired"},
		"not yet valid":      {sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.NotBefore = jwt.NewNumericDate(time.Now().Add(2 * time.Minute)) })), "not valid yet"},
		"issued later":       {sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.IssuedAt = jwt.NewNumericDate(time.Now().Add(2 * time.Minute)) })), "future"},
		"no exp":             {sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Expiry = nil })), "no exp"},
		"alg not allowed":    {sign(t, jose.PS256, k.rsa, "rsa1", "JWT", claimsAt(nil)), "allowed algorithm"},
		"alg of another key": {sign(t, jose.RS256, k.rsa, "ec1", "JWT", claimsAt(nil)), "signature"},
		"unknown key":        {sign(t, jose.RS256, other, "rsa1", "JWT", claimsAt(nil)), "signature"},
		"HMAC":               {sign(t, jose.HS256, hmacKey, "oct1", "JWT", claimsAt(nil)), "allowed algorithm"},
		"garbage":            {"not.a.token", "allowed algorithm"},
	} {
		rec := bearer(h, "Bearer "+c.tok)
		ch := rec.Header().Get("WWW-Authenticate")
		if rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3401" ||
			!strings.HasPrefix(ch, `Bearer realm="edgeplane", error="invalid_token"`) || !strings.Contains(ch, c.reason) {
			t.Errorf("%s: %d %q %q, want 401 ERR_NGROK_3401 naming %q", name, rec.Code, rec.Header().Get("ngrok-error-code"), ch, c.reason)
		}
		if strings.Contains(rec.Body.String(), "upstream") {
			t.Errorf("%s reached the upstream", name)
		}
	}
}

// TestJWTLocations: a token in a JSON or form body field is found (and the upstream gets the
// body unchanged), a header's prefix is matched case-insensitively, and an at+jwt location
// requires the typ header.
func TestJWTLocations(t *testing.T) {
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	tok := sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))
	h := jwtStage(t, srv, JWTToken{Type: "jwt", Method: "body", Name: "access_token"}, JWTToken{Type: "jwt", Method: "header", Name: "X-Token", Prefix: "Token "})

	for ct, body := range map[string]string{
		"application/json":                  `{"access_token":"` + tok + `","x":1}`,
		"application/x-www-form-urlencoded": "x=1&access_token=" + tok,
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 200 || rec.Body.String() != "upstream:"+body {
			t.Errorf("%s body: %d %q, want the body carried unchanged", ct, rec.Code, rec.Body)
		}
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"other":"x"}`))
	r.Header.Set("X-Token", "token "+tok)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 200 || rec.Body.String() != `upstream:{"other":"x"}` {
		t.Errorf("header with a lower-case prefix after a body without the field: %d %q", rec.Code, rec.Body)
	}
	r = httptest.NewRequest("POST", "/", strings.NewReader(`{"access_token":42}`))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3406" {
		t.Errorf("a body field that is not a string: %d %q, want 401 ERR_NGROK_3406", rec.Code, rec.Header().Get("ngrok-error-code"))
	}

	at := jwtStage(t, srv, JWTToken{Type: "at+jwt", Method: "header", Name: "Authorization", Prefix: "Bearer "})
	if rec := bearer(at, "Bearer "+sign(t, jose.RS256, k.rsa, "rsa1", "at+jwt", claimsAt(nil))); rec.Code != 200 {
		t.Errorf("an at+jwt token: %d", rec.Code)
	}
	if rec := bearer(at, "Bearer "+tok); rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3401" || !strings.Contains(rec.Header().Get("WWW-Authenticate"), "at+jwt") {
		t.Errorf("a plain JWT where an access token is expected: %d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

// TestJWKSRefresh: a token naming a kid the cached set lacks fetches the set again (the provider
// rotated its keys), at most once per jwksMinRefresh however many such tokens come; a key set
// that cannot be fetched refuses with 401 ERR_NGROK_3401 saying so.
func TestJWKSRefresh(t *testing.T) {
	clock := newFakeClock()
	jwksNow = clock.now
	defer func() { jwksNow = time.Now }()
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	h := jwtStage(t, srv)
	if rec := bearer(h, "Bearer "+sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))); rec.Code != 200 {
		t.Fatalf("first token: %d", rec.Code)
	}
	rotated, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv.add(jose.JSONWebKey{Key: &rotated.PublicKey, KeyID: "ec2"})
	tok := sign(t, jose.ES256, rotated, "ec2", "JWT", claimsAt(nil))
	for range 5 {
		if rec := bearer(h, "Bearer "+tok); rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3401" {
			t.Fatalf("a kid unknown within the refresh interval: %d", rec.Code)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Errorf("%d fetches within the refresh interval, want 1", n)
	}
	clock.add(jwksMinRefresh)
	if rec := bearer(h, "Bearer "+tok); rec.Code != 200 {
		t.Errorf("the rotated key after the refresh interval: %d", rec.Code)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2", n)
	}

	gone := newJWKSServer(t)
	gone.Close()
	down := jwtStage(t, gone)
	rec := bearer(down, "Bearer "+sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil)))
	if rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3401" || !strings.Contains(rec.Header().Get("WWW-Authenticate"), "could not be fetched") {
		t.Errorf("an unreachable key set: %d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

// TestJWTConfig: configurations that would admit no one, or anyone, are refused when the stage
// is built (the route then fails closed).
func TestJWTConfig(t *testing.T) {
	ok := JWTConfig{Issuers: []string{"https://idp.example.com/"}, Tokens: []JWTToken{{Name: "Authorization"}},
		Algorithms: []string{"RS256"}, JKUs: []string{"https://idp.example.com/keys"}}
	if _, err := NewJWT(ok); err != nil {
		t.Fatalf("a valid configuration: %v", err)
	}
	for name, edit := range map[string]func(*JWTConfig){
		"no token location":   func(c *JWTConfig) { c.Tokens = nil },
		"no issuer":           func(c *JWTConfig) { c.Issuers = nil },
		"no key set":          func(c *JWTConfig) { c.JKUs = nil },
		"a key set over http": func(c *JWTConfig) { c.JKUs = []string{"http://idp.example.com/keys"} },
		"only HMAC":           func(c *JWTConfig) { c.Algorithms = []string{"HS256"} },
		"no algorithm":        func(c *JWTConfig) { c.Algorithms = nil },
	} {
		c := ok
		edit(&c)
		if _, err := NewJWT(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestJWKSNoRedirectToHTTP: a key set URL is https, and a redirect from it to an http URL
// (where anyone on the path could serve their own keys) is not followed.
func TestJWKSNoRedirectToHTTP(t *testing.T) {
	k := newTestKeys(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.rsa.Public(), KeyID: "forged", Algorithm: "RS256", Use: "sig"}}})
	}))
	defer plain.Close()
	redir := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/keys", http.StatusFound))
	defer redir.Close()
	if keys, err := fetchJWKS(context.Background(), redir.Client(), redir.URL+"/jwks"); err == nil {
		t.Fatalf("followed a redirect to http and got %d keys", len(keys))
	}
	// The identity providers' client (oauth, oidc) refuses it too.
	if resp, err := boundedClient(redir.Client()).Get(redir.URL + "/token"); err == nil {
		resp.Body.Close()
		t.Fatal("the providers' client followed a redirect to http")
	}
	// A redirect to https is still followed.
	good := newJWKSServer(t, jose.JSONWebKey{Key: k.rsa.Public(), KeyID: "r", Algorithm: "RS256", Use: "sig"})
	hop := httptest.NewTLSServer(http.RedirectHandler(good.URL+"/keys", http.StatusFound))
	defer hop.Close()
	client := hop.Client()
	client.Transport.(*http.Transport).TLSClientConfig.RootCAs.AddCert(good.Certificate())
	if keys, err := fetchJWKS(context.Background(), client, hop.URL+"/jwks"); err != nil || len(keys) != 1 {
		t.Fatalf("https redirect: %v %d", err, len(keys))
	}
}
