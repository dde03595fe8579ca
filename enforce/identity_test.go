package enforce

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is an injectable clock the tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Unix(1_800_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

func newTestSessions(t *testing.T, clock *testClock, mut func(*SessionConfig)) *Sessions {
	t.Helper()
	cfg := SessionConfig{Key: testKey, CookiePrefix: "ngrok.", Scope: "test", Now: clock.Now}
	if mut != nil {
		mut(&cfg)
	}
	s, err := NewSessions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// carry copies the cookies a response set into a new request, as a browser would.
func carry(rec *httptest.ResponseRecorder, r *http.Request) {
	for _, c := range rec.Result().Cookies() {
		if c.MaxAge >= 0 && c.Value != "" {
			r.AddCookie(c)
		}
	}
}

func TestIdentitySessionRoundTrip(t *testing.T) {
	clock := newTestClock()
	s := newTestSessions(t, clock, nil)
	rec := httptest.NewRecorder()
	if _, err := s.Start(rec, httptest.NewRequest("GET", "/", nil), Identity{Provider: "oidc", UserID: "u1", Email: "a@example.com", Name: "A", RefreshToken: "rt"}); err != nil {
		t.Fatal(err)
	}
	c := rec.Result().Cookies()
	if len(c) != 1 || c[0].Name != "ngrok.session" || !c[0].HttpOnly || !c[0].Secure || c[0].SameSite != http.SameSiteLaxMode || c[0].Path != "/" {
		t.Fatalf("cookie %+v", c)
	}
	if strings.Contains(c[0].Value, "rt") && strings.Contains(c[0].Value, "a@example.com") {
		t.Fatal("cookie is not sealed")
	}
	r := httptest.NewRequest("GET", "/", nil)
	carry(rec, r)
	sess := s.Load(r)
	if sess == nil || sess.Email != "a@example.com" || sess.RefreshToken != "rt" {
		t.Fatalf("load: %+v", sess)
	}
	// The same host on another port opens it; another host, or a session of no host (made before
	// sessions were bound to theirs), does not.
	r.Host = "EXAMPLE.com:8443"
	if s.Load(r) == nil {
		t.Fatal("the session did not open on its host at another port")
	}
	elsewhere := httptest.NewRequest("GET", "https://other.example/", nil)
	carry(rec, elsewhere)
	if s.Load(elsewhere) != nil {
		t.Fatal("a session made on example.com opened on other.example")
	}
	hostless := httptest.NewRecorder()
	if err := s.Save(hostless, &Session{Identity: Identity{UserID: "u1"}, IssuedAt: clock.Now().Unix(), LastSeen: clock.Now().Unix()}); err != nil {
		t.Fatal(err)
	}
	r2 := httptest.NewRequest("GET", "/", nil)
	carry(hostless, r2)
	if s.Load(r2) != nil {
		t.Fatal("a session without a host opened")
	}
	// Another scope (another provider's route) does not open it.
	other := newTestSessions(t, clock, func(c *SessionConfig) { c.Scope = "other" })
	if other.Load(r) != nil {
		t.Fatal("a session opened in another scope")
	}
}

func TestIdentityTamperedCookie(t *testing.T) {
	clock := newTestClock()
	s := newTestSessions(t, clock, nil)
	rec := httptest.NewRecorder()
	if _, err := s.Start(rec, httptest.NewRequest("GET", "/", nil), Identity{UserID: "u1"}); err != nil {
		t.Fatal(err)
	}
	v := rec.Result().Cookies()[0].Value
	for _, bad := range []string{v[:len(v)-2] + "AA", "x" + v, "", "!!!", strings.Repeat("A", 5000), v[:10]} {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: "ngrok.session", Value: bad})
		if s.Load(r) != nil {
			t.Fatalf("tampered cookie %q loaded", bad)
		}
	}
}

func TestIdentityExpiry(t *testing.T) {
	clock := newTestClock()
	s := newTestSessions(t, clock, func(c *SessionConfig) {
		c.MaximumDuration = 100 * time.Second
		c.InactivityTimeout = 30 * time.Second
	})
	rec := httptest.NewRecorder()
	sess, _ := s.Start(rec, httptest.NewRequest("GET", "/", nil), Identity{UserID: "u1"})
	cookie := rec.Result().Cookies()[0]
	load := func(c *http.Cookie) *Session {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(c)
		return s.Load(r)
	}
	// Activity every 20 s keeps the session up to its maximum duration.
	for i := 0; i < 4; i++ {
		clock.Add(20 * time.Second)
		if sess = load(cookie); sess == nil {
			t.Fatalf("session ended early at step %d", i)
		}
		rec = httptest.NewRecorder()
		s.Touch(rec, sess)
		cookie = rec.Result().Cookies()[0]
	}
	clock.Add(20 * time.Second) // 100 s since issued
	if load(cookie) != nil {
		t.Fatal("session outlived maximum_duration")
	}
	// Inactivity.
	rec = httptest.NewRecorder()
	_, _ = s.Start(rec, httptest.NewRequest("GET", "/", nil), Identity{UserID: "u2"})
	cookie = rec.Result().Cookies()[0]
	clock.Add(29 * time.Second)
	if load(cookie) == nil {
		t.Fatal("session ended before inactivity_timeout")
	}
	clock.Add(time.Second)
	if load(cookie) != nil {
		t.Fatal("inactive session still loads")
	}
}

func TestIdentityFlowCookie(t *testing.T) {
	clock := newTestClock()
	s := newTestSessions(t, clock, nil)
	type flow struct{ Nonce, Verifier, Return string }
	rec := httptest.NewRecorder()
	if err := s.SaveFlow(rec, "state-1", flow{"n", "v", "/x"}); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	carry(rec, r)
	var got flow
	if s.OpenFlow(httptest.NewRecorder(), r, "state-2", &got) {
		t.Fatal("opened with another state")
	}
	rec2 := httptest.NewRecorder()
	if !s.OpenFlow(rec2, r, "state-1", &got) || got.Verifier != "v" || got.Return != "/x" {
		t.Fatalf("flow %+v", got)
	}
	if c := rec2.Result().Cookies(); len(c) != 1 || c[0].MaxAge >= 0 {
		t.Fatalf("flow cookie not cleared: %+v", c)
	}
	clock.Add(flowLifetime + time.Second)
	if s.OpenFlow(httptest.NewRecorder(), r, "state-1", &got) {
		t.Fatal("expired flow opened")
	}
}

func TestIdentityHelpers(t *testing.T) {
	h := http.Header{}
	h.Set("ngrok-auth-user-email", "evil@x")
	h.Set("NGROK-AUTH-USER-ID", "1")
	h.Set("Ngrok-Auth-User-Name", "root")
	StripIdentityHeaders(h)
	if len(h) != 0 {
		t.Fatalf("left %v", h)
	}
	SetIdentityHeaders(h, Identity{Email: "a@b.c", UserID: "7", Name: "A"})
	if h.Get("ngrok-auth-user-email") != "a@b.c" || h.Get("ngrok-auth-user-id") != "7" || h.Get("ngrok-auth-user-name") != "A" {
		t.Fatalf("headers %v", h)
	}
	cases := []struct {
		email     string
		addrs, ds []string
		ok        bool
	}{
		{"a@b.c", nil, nil, true},
		{"", nil, nil, true},
		{"", []string{"a@b.c"}, nil, false},
		{"A@B.c", []string{"a@b.c"}, nil, true},
		{"x@b.c", []string{"a@b.c"}, nil, false},
		{"x@b.c", nil, []string{"B.C"}, true},
		{"x@evil-b.c", nil, []string{"b.c"}, false},
		{"x@sub.b.c", nil, []string{"b.c"}, false},
	}
	for _, c := range cases {
		if EmailAllowed(c.email, c.addrs, c.ds) != c.ok {
			t.Errorf("EmailAllowed(%q, %v, %v) != %v", c.email, c.addrs, c.ds, c.ok)
		}
	}
	s := newTestSessions(t, newTestClock(), func(c *SessionConfig) { c.Base = "/app/" })
	for in, want := range map[string]string{"/x?y=1": "/x?y=1", "//evil.com/": "/app/", "https://evil.com/": "/app/", "/\\evil.com": "/app/", "": "/app/"} {
		if got := s.LocalPath(in); got != want {
			t.Errorf("LocalPath(%q) = %q, want %q", in, got, want)
		}
	}
	if s.Paths.Logout != "/app/ngrok/logout" || s.Paths.Callback != "/app/ngrok/oauth2/callback" {
		t.Fatalf("paths %+v", s.Paths)
	}
	rec := httptest.NewRecorder()
	s.Logout(rec, httptest.NewRequest("GET", "/app/ngrok/logout", nil))
	if c := rec.Result().Cookies(); rec.Code != 200 || len(c) != 1 || c[0].MaxAge >= 0 || c[0].Name != "ngrok.session" {
		t.Fatalf("logout %d %+v", rec.Code, c)
	}
	if _, err := NewSessions(SessionConfig{Key: []byte("short")}); err == nil {
		t.Fatal("short key accepted")
	}
	rec = httptest.NewRecorder()
	Denied(rec, httptest.NewRequest("GET", "http://app.example/", nil), "no")
	if rec.Code != 403 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3129" {
		t.Fatalf("denied %d %v", rec.Code, rec.Header())
	}
}

// TestIdentityLocalPathAfterRedirectCleaning: the return URL of a sign-in goes through
// http.Redirect, which cleans the path; what the browser gets must still be on this host (a
// leading "//" or "/\" is another host to a browser).
func TestIdentityLocalPathAfterRedirectCleaning(t *testing.T) {
	s := newTestSessions(t, newTestClock(), nil)
	for _, p := range []string{"/a/../\\evil.com", "/./\\evil.com/x", "/a/..\\/evil.com", "/\\/evil.com", "/ok/\\evil"} {
		rec := httptest.NewRecorder()
		http.Redirect(rec, httptest.NewRequest("GET", "/ngrok/oauth2/callback", nil), s.LocalPath(p), http.StatusFound)
		loc := rec.Header().Get("Location")
		if strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") || strings.Contains(loc, "\\") {
			t.Errorf("LocalPath(%q) redirects to %q", p, loc)
		}
	}
	if got := s.LocalPath("/a/b?c=%5Cd"); got != "/a/b?c=%5Cd" {
		t.Errorf("an escaped backslash in the query was refused: %q", got)
	}
}

// TestIdentityHeadersInjection: identity values come from the provider (a user's chosen name),
// and client-sent ngrok-auth-* headers of any name never reach the upstream.
func TestIdentityHeadersInjection(t *testing.T) {
	h := http.Header{}
	h.Set("Ngrok-Auth-User-Groups", "admins")
	h["ngrok-auth-user-email"] = []string{"raw@x"} // not canonicalized, as a map literal could be
	h.Set("Ngrok-Authz", "kept")                   // not of the ngrok-auth- family
	SetIdentityHeaders(h, Identity{UserID: "7\r\nX-Admin: 1", Name: "Eve\nSet-Cookie: a=b", Email: "\x00e@x.y\x7f"})
	if _, ok := h["Ngrok-Auth-User-Groups"]; ok {
		t.Errorf("a client's Ngrok-Auth-User-Groups was kept: %v", h)
	}
	if _, ok := h["ngrok-auth-user-email"]; ok {
		t.Errorf("a client's non-canonical ngrok-auth-user-email was kept: %v", h)
	}
	if h.Get("Ngrok-Authz") != "kept" {
		t.Errorf("an unrelated header was removed: %v", h)
	}
	for _, k := range []string{HeaderUserEmail, HeaderUserID, HeaderUserName} {
		if v := h.Get(k); strings.ContainsAny(v, "\r\n\x00\x7f") || v == "" {
			t.Errorf("%s = %q", k, v)
		}
	}
	var b strings.Builder
	if err := h.Write(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "\nX-Admin") || strings.Contains(b.String(), "\nSet-Cookie") {
		t.Errorf("header injection:\n%s", b.String())
	}
	h = http.Header{}
	SetIdentityHeaders(h, Identity{Name: "José \xff"})
	if got := h.Get(HeaderUserName); got != "José \uFFFD" {
		t.Errorf("name %q", got)
	}
	rec := httptest.NewRecorder()
	var seen http.Header
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Ngrok-Auth-User-Email", "ceo@victim.com")
	IdentityHeaderStrip{Module: "oauth"}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Header })).ServeHTTP(rec, r)
	if seen == nil || seen.Get("Ngrok-Auth-User-Email") != "" {
		t.Errorf("the disabled module's stage let the client's identity through: %v", seen)
	}
}
