package enforce

// The session half of the sign-in modules (oauth, oidc, saml), shared by all three.
//
// API for a sign-in module (what saml.go needs):
//
//	s, err := NewSessions(SessionConfig{Key: env key (32 bytes), CookiePrefix: m.CookiePrefix,
//	    Scope: "saml|"+entityID, InactivityTimeout: ..., MaximumDuration: ..., OptionsPassthrough: ...})
//	In Wrap, on every request:
//	    StripIdentityHeaders(r.Header)                  // first: a client must not spoof them
//	    if s.Passthrough(r) { next.ServeHTTP(w, r) }    // CORS preflight with options_passthrough
//	    if r.URL.Path == s.Paths.Logout { s.Logout(w, r) }
//	    sess := s.Load(r)                               // nil: no session, tampered, expired or inactive
//	    if sess == nil { /* start the sign-in; at its end: */ s.Start(w, Identity{...}) then redirect }
//	    if !allowed(sess.Identity) { Denied(w, r, "...") } // 403 ERR_NGROK_3129
//	    s.Touch(w, sess)                                // refreshes last-seen (inactivity_timeout)
//	    SetIdentityHeaders(r.Header, sess.Identity); next.ServeHTTP(w, r)
//	A sign-in in progress keeps its state (relay state, request id, return URL…) in a short-lived
//	sealed cookie bound to its state value: s.SaveFlow(w, state, v) and s.OpenFlow(w, r, state, &v)
//	(which also clears it). Authorization helpers: EmailAllowed(email, addresses, domains).
//	Codes: CodeDenied (403), CodeSignInFailed (400/502 when the provider's answer is unusable).
//
// Cookies are sealed with AES-256-GCM under the deployment's identity-sessions key, with the
// cookie's name and the module's Scope as additional data: a cookie cannot be moved to another
// name or another provider's route, and a changed byte makes it no session at all.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Error codes of the sign-in modules. ngrok's published error list has no code for a visitor
// who signed in but is not allowed; edgeplane uses ERR_NGROK_3129 for it. A sign-in that cannot
// complete (a missing or expired sign-in cookie, a provider error, an unusable answer) uses
// ngrok's ERR_NGROK_5211 ("the OIDC provider returned the error code…").
const (
	CodeDenied       = 3129
	CodeSignInFailed = 5211
)

// The paths the sign-in modules serve themselves, below the route's path prefix: ngrok's
// documented /ngrok/login and /ngrok/logout, and the OAuth callback (ngrok's is
// https://idp.ngrok.com/oauth2/callback; edgeplane has no central host, so it serves
// /oauth2/callback under the /ngrok/ namespace of the endpoint's own host, never shadowing an
// upstream's own /oauth2/callback).
const (
	LoginPath    = "/ngrok/login"
	LogoutPath   = "/ngrok/logout"
	CallbackPath = "/ngrok/oauth2/callback"
)

// Identity headers sent to the upstream (ngrok's documented names).
const (
	HeaderUserEmail = "Ngrok-Auth-User-Email"
	HeaderUserID    = "Ngrok-Auth-User-Id"
	HeaderUserName  = "Ngrok-Auth-User-Name"
)

// Bounds of the cookies: a cookie value longer than maxCookieValue is not opened, and a session
// that would seal to more than that is stored without its access token.
const (
	maxCookieValue = 4000
	flowLifetime   = 10 * time.Minute
)

// Identity is who signed in, as the provider said.
type Identity struct {
	Provider string `json:"p"`
	UserID   string `json:"u"`
	Email    string `json:"e,omitempty"`
	Name     string `json:"n,omitempty"`
	// Groups are SAML groups, GitHub organizations ("org") and teams ("org/team").
	Groups []string `json:"g,omitempty"`
	// AccessToken and RefreshToken are what a re-check with the provider needs; they only ever
	// leave edgeplane sealed inside the cookie.
	AccessToken  string `json:"a,omitempty"`
	RefreshToken string `json:"r,omitempty"`
	// SessionIndex is the SAML IdP's index of its session, which its single logout names.
	SessionIndex string `json:"si,omitempty"`
}

// Session is an identity with the times its checks need (Unix seconds).
type Session struct {
	Identity
	IssuedAt    int64 `json:"iat"`
	LastSeen    int64 `json:"ls"`
	LastChecked int64 `json:"lc"`
	// Host is the host name the session was made on; it opens on no other. The upstream sees
	// the visitor's cookies, and two endpoints of different accounts may share a provider
	// configuration (the operator's managed OAuth application, one IdP): without the host, an
	// account's agent could replay a visitor's cookie on another account's endpoint.
	Host string `json:"h"`
}

// SessionConfig is the session settings of a sign-in module.
type SessionConfig struct {
	// Key is the 32-byte AES-256 key every replica shares (the store's identity-sessions secret).
	Key []byte
	// CookiePrefix starts the cookies' names: <prefix>session and <prefix>signin-<id>.
	CookiePrefix string
	// Scope binds the cookies to one provider configuration ("oidc|issuer|client_id"): a
	// session made for one provider does not open on a route of another.
	Scope string
	// Base is the route's path prefix the special paths live under ("" for "/").
	Base string
	// InactivityTimeout and MaximumDuration end sessions (0: no limit).
	InactivityTimeout, MaximumDuration time.Duration
	// OptionsPassthrough lets CORS preflight requests through without a session.
	OptionsPassthrough bool
	// Now is the clock (time.Now when nil), injectable for tests.
	Now func() time.Time
}

// Paths are the special paths of a module, with the route's prefix.
type Paths struct{ Login, Logout, Callback string }

// Sessions seals, opens and checks the cookies of one sign-in module.
type Sessions struct {
	cfg   SessionConfig
	aead  cipher.AEAD
	Paths Paths
}

// NewSessions builds the session half of a module; it refuses a key that is not 32 bytes.
func NewSessions(cfg SessionConfig) (*Sessions, error) {
	if len(cfg.Key) != 32 {
		return nil, errors.New("no session key: the identity-sessions secret must be 32 bytes")
	}
	if cfg.CookiePrefix == "" {
		cfg.CookiePrefix = "ngrok."
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Base = strings.TrimSuffix(cfg.Base, "/")
	block, err := aes.NewCipher(cfg.Key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sessions{cfg: cfg, aead: aead,
		Paths: Paths{Login: cfg.Base + LoginPath, Logout: cfg.Base + LogoutPath, Callback: cfg.Base + CallbackPath}}, nil
}

// Now is the sessions' clock.
func (s *Sessions) Now() time.Time { return s.cfg.Now() }

func (s *Sessions) sessionCookie() string { return s.cfg.CookiePrefix + "session" }

// seal encrypts v as JSON for the cookie called name.
func (s *Sessions) seal(name string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := s.aead.Seal(nonce, nonce, plain, []byte(name+"\x00"+s.cfg.Scope))
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// open decrypts the cookie called name into v; false for a missing, oversized or tampered one.
func (s *Sessions) open(r *http.Request, name string, v any) bool {
	c, err := r.Cookie(name)
	if err != nil || len(c.Value) > maxCookieValue {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(raw) < s.aead.NonceSize()+s.aead.Overhead() {
		return false
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(name+"\x00"+s.cfg.Scope))
	if err != nil {
		return false
	}
	return json.Unmarshal(plain, v) == nil
}

func (s *Sessions) setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
}

// Load returns the request's session, or nil when it has none or its cookie was tampered with,
// was made for another scope, or its maximum duration or inactivity timeout has passed.
func (s *Sessions) Load(r *http.Request) *Session {
	var sess Session
	if !s.open(r, s.sessionCookie(), &sess) || sess.UserID == "" && sess.Email == "" || sess.Host != sessionHost(r) {
		return nil
	}
	now := s.cfg.Now().Unix()
	if d := s.cfg.MaximumDuration; d > 0 && now-sess.IssuedAt >= int64(d/time.Second) {
		return nil
	}
	if d := s.cfg.InactivityTimeout; d > 0 && now-sess.LastSeen >= int64(d/time.Second) {
		return nil
	}
	return &sess
}

// Save seals sess into the session cookie. A session too large for a cookie is stored without
// its access token (a refresh token, when there is one, still allows re-checks).
func (s *Sessions) Save(w http.ResponseWriter, sess *Session) error {
	v, err := s.seal(s.sessionCookie(), sess)
	if err == nil && len(v) > maxCookieValue && sess.AccessToken != "" {
		cp := *sess
		cp.AccessToken = ""
		v, err = s.seal(s.sessionCookie(), &cp)
	}
	if err != nil {
		return err
	}
	if len(v) > maxCookieValue {
		return errors.New("the identity is too large for a session cookie")
	}
	maxAge := 0
	if d := s.cfg.MaximumDuration; d > 0 {
		maxAge = int(d / time.Second)
	}
	s.setCookie(w, s.sessionCookie(), v, maxAge)
	return nil
}

// Start makes a new session for id on r's host, issued now, and saves it.
func (s *Sessions) Start(w http.ResponseWriter, r *http.Request, id Identity) (*Session, error) {
	now := s.cfg.Now().Unix()
	sess := &Session{Identity: id, IssuedAt: now, LastSeen: now, LastChecked: now, Host: sessionHost(r)}
	return sess, s.Save(w, sess)
}

// sessionHost is the host name a request was made to, lower case and without a port: the
// browser keeps the cookie for that name whatever the port.
func sessionHost(r *http.Request) string {
	h := r.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.ToLower(h)
}

// Touch records a request of the session (for inactivity_timeout), saving the cookie again when
// the second changed.
func (s *Sessions) Touch(w http.ResponseWriter, sess *Session) {
	if now := s.cfg.Now().Unix(); s.cfg.InactivityTimeout > 0 && now != sess.LastSeen {
		sess.LastSeen = now
		_ = s.Save(w, sess)
	}
}

// Clear removes the session cookie.
func (s *Sessions) Clear(w http.ResponseWriter) { s.setCookie(w, s.sessionCookie(), "", -1) }

// Logout ends the session and says so (ngrok's /ngrok/logout).
func (s *Sessions) Logout(w http.ResponseWriter, r *http.Request) {
	s.Clear(w)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("<!DOCTYPE html>\n<html><head><title>Signed out</title></head><body>\n<h1>Signed out</h1>\n<p>You are signed out. <a href=\"" +
		s.cfg.Base + "/\">Sign in again</a></p>\n</body></html>\n"))
}

// flowCookie names the cookie of the sign-in whose state is state: one per sign-in, so two tabs
// signing in at once do not overwrite each other.
func (s *Sessions) flowCookie(state string) string {
	sum := sha256.Sum256([]byte(state))
	return s.cfg.CookiePrefix + "signin-" + hex.EncodeToString(sum[:6])
}

// flowEnvelope binds a sign-in's values to its state and its expiry.
type flowEnvelope struct {
	State   string          `json:"s"`
	Expires int64           `json:"x"`
	Value   json.RawMessage `json:"v"`
}

// SaveFlow keeps v, the secrets of a sign-in in progress (nonce, PKCE verifier, return URL), in
// a sealed cookie bound to state, valid for ten minutes.
func (s *Sessions) SaveFlow(w http.ResponseWriter, state string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	name := s.flowCookie(state)
	sealed, err := s.seal(name, flowEnvelope{State: state, Expires: s.cfg.Now().Add(flowLifetime).Unix(), Value: raw})
	if err != nil {
		return err
	}
	s.setCookie(w, name, sealed, int(flowLifetime/time.Second))
	return nil
}

// OpenFlow reads the sign-in of state into v and clears its cookie (a state is used once);
// false when there is none, it expired, or it belongs to another state.
func (s *Sessions) OpenFlow(w http.ResponseWriter, r *http.Request, state string, v any) bool {
	if state == "" || len(state) > 256 {
		return false
	}
	name := s.flowCookie(state)
	var env flowEnvelope
	if !s.open(r, name, &env) {
		return false
	}
	s.setCookie(w, name, "", -1)
	if env.State != state || s.cfg.Now().Unix() > env.Expires {
		return false
	}
	return json.Unmarshal(env.Value, v) == nil
}

// Passthrough reports whether r is a CORS preflight the module lets through unauthenticated
// (options_passthrough).
func (s *Sessions) Passthrough(r *http.Request) bool {
	return s.cfg.OptionsPassthrough && r.Method == http.MethodOptions
}

// ReturnTo is where the browser goes back to after signing in: the request's own path and query
// for GET and HEAD, the route's root for other methods (their body cannot be replayed).
func (s *Sessions) ReturnTo(r *http.Request) string {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return r.URL.RequestURI()
	}
	return s.cfg.Base + "/"
}

// LocalPath returns p when it is a path on this host (not "//host" nor an absolute URL), else
// the route's root: the return URL of a sign-in never sends the browser elsewhere. A backslash
// anywhere is refused: browsers read it as "/", and http.Redirect cleans "/a/../\\evil.com" to
// "/\\evil.com", which they follow to evil.com.
func (s *Sessions) LocalPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || p == "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsRune(p, '\\') ||
		u.Scheme != "" || u.Host != "" {
		return s.cfg.Base + "/"
	}
	return p
}

// RandomToken returns 32 random bytes, base64url-encoded (states and nonces).
func RandomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// StripIdentityHeaders removes every ngrok-auth-* header a client sent, in every spelling that
// folds to one (any case, '_' for '-': see HeaderNameHasPrefix), so the upstream only ever sees
// the ones edgeplane set.
func StripIdentityHeaders(h http.Header) {
	for k := range h {
		if HeaderNameHasPrefix(k, identityHeaderPrefix) {
			delete(h, k)
		}
	}
}

// headerValue makes an identity value (the provider's or the IdP's, so the user's own choice for
// a name) safe as a header value: control characters (CR, LF, NUL…) become spaces, invalid
// UTF-8 is replaced, and surrounding space is trimmed. Valid non-ASCII names are kept as UTF-8.
func headerValue(v string) string {
	v = strings.ToValidUTF8(v, "\uFFFD")
	v = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, v)
	return strings.TrimSpace(v)
}

// SetIdentityHeaders tells the upstream who signed in.
func SetIdentityHeaders(h http.Header, id Identity) {
	StripIdentityHeaders(h)
	if v := headerValue(id.Email); v != "" {
		h.Set(HeaderUserEmail, v)
	}
	if v := headerValue(id.UserID); v != "" {
		h.Set(HeaderUserID, v)
	}
	if v := headerValue(id.Name); v != "" {
		h.Set(HeaderUserName, v)
	}
}

// IdentityHeaderStrip is the stage of a sign-in module that is configured but disabled: it signs
// no one in, but still removes the ngrok-auth-* headers a client sent, so an upstream that trusts
// them while the module is on is not told a name of the client's choosing while it is off.
type IdentityHeaderStrip struct{ Module string }

// Name is the module's name.
func (s IdentityHeaderStrip) Name() string { return s.Module }

// Wrap removes the client's identity headers.
func (s IdentityHeaderStrip) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		StripIdentityHeaders(r.Header)
		next.ServeHTTP(w, r)
	})
}

// EmailAllowed reports whether email passes email_addresses and email_domains: with neither
// configured everyone passes; otherwise the address must be listed or its domain must be
// (case-insensitively). An empty email passes only when neither is configured.
func EmailAllowed(email string, addresses, domains []string) bool {
	if len(addresses) == 0 && len(domains) == 0 {
		return true
	}
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" {
		return false
	}
	if slices.ContainsFunc(addresses, func(a string) bool { return strings.EqualFold(a, email) }) {
		return true
	}
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return false
	}
	domain := email[at+1:]
	return slices.ContainsFunc(domains, func(d string) bool { return strings.EqualFold(d, domain) })
}

// Denied answers a signed-in visitor who is not allowed on the route: 403 ERR_NGROK_3129.
func Denied(w http.ResponseWriter, r *http.Request, msg string) {
	ErrorPage(w, r, http.StatusForbidden, CodeDenied, msg)
}

// SignInFailed answers a sign-in that cannot complete, with its status and ERR_NGROK_5211.
func SignInFailed(w http.ResponseWriter, r *http.Request, status int, msg string) {
	ErrorPage(w, r, status, CodeSignInFailed, msg)
}

// redirectURL is the absolute URL of path on the request's host, for the provider's callback.
func redirectURL(r *http.Request, path string) string {
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + r.Host + path
}
