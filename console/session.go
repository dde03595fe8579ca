package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
)

// Sessions live in this process's memory: a cookie holds a random id only, and the API key it
// stands for never leaves the server. A session ends at sign-out, after sessionIdle without a
// request, sessionMax after sign-in, or as soon as its key no longer signs in (deleted, or its
// bot user deactivated): every request authenticates the key again, as an API request does.
const (
	sessionIdle = 8 * time.Hour
	sessionMax  = 24 * time.Hour
	maxSessions = 10000
	// signinTTL bounds the sign-in form's CSRF cookie.
	signinTTL = 30 * time.Minute
)

// Cookie names. Over https the session cookie carries the __Secure- prefix, which browsers
// accept only with the Secure attribute.
const (
	cookieName       = "edgeplane_console"
	secureCookieName = "__Secure-edgeplane_console"
	signinCookie     = "edgeplane_console_signin"
)

// session is one signed-in browser.
type session struct {
	id      string
	token   string
	csrf    string
	caller  ep.Caller
	created time.Time
	seen    time.Time
}

// checkCSRF compares a form's token with the session's in constant time.
func (s *session) checkCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf)) == 1
}

type sessions struct {
	mu   sync.Mutex
	byID map[string]*session
}

func newSessions() *sessions { return &sessions{byID: map[string]*session{}} }

// add keeps a new session, dropping the oldest when at the limit.
func (ss *sessions) add(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.byID) >= maxSessions {
		var oldest *session
		for _, o := range ss.byID {
			if oldest == nil || o.seen.Before(oldest.seen) {
				oldest = o
			}
		}
		delete(ss.byID, oldest.id)
	}
	ss.byID[s.id] = s
}

// get returns the live session with the id, touching it, or nil.
func (ss *sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[id]
	if s == nil {
		return nil
	}
	if now.Sub(s.seen) > sessionIdle || now.Sub(s.created) > sessionMax {
		delete(ss.byID, id)
		return nil
	}
	s.seen = now
	return s
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	delete(ss.byID, id)
	ss.mu.Unlock()
}

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// errNoSession is the reason of a request without a live session.
var errNoSession = errors.New("console: no session")

// session returns the request's session after checking its key again; errNoSession (or the
// authenticator's refusal) when there is none, an unavailable error when the key cannot be
// checked now.
func (h *Handler) session(r *http.Request) (*session, error) {
	c, err := r.Cookie(h.cookieName())
	if err != nil || c.Value == "" {
		return nil, errNoSession
	}
	s := h.sessions.get(c.Value, time.Now())
	if s == nil {
		return nil, errNoSession
	}
	caller, err := h.authenticate(r.Context(), s.token)
	if err != nil {
		if !isUnavailable(err) {
			h.sessions.remove(s.id) // the key was deleted or its owner deactivated
		}
		return nil, err
	}
	s.caller = caller
	netx.TrustContext(r.Context()) // the connection belongs to a key holder, as after an API request
	return s, nil
}

// authTimeout bounds checking a key, as an API request's deadline bounds its own check: a
// database that does not answer is a prompt 503, not a page that hangs.
const authTimeout = 10 * time.Second

func (h *Handler) authenticate(ctx context.Context, token string) (ep.Caller, error) {
	ctx, cancel := context.WithTimeout(ctx, authTimeout)
	defer cancel()
	caller, err := h.cfg.Auth.Authenticate(ctx, token)
	if err != nil && ctx.Err() != nil && !errors.Is(err, errNoSession) {
		return caller, &ep.Error{Status: http.StatusServiceUnavailable, Msg: "The key could not be checked in time."}
	}
	return caller, err
}

func (h *Handler) cookieName() string {
	if h.cfg.Secure {
		return secureCookieName
	}
	return cookieName
}

// setCookie sets a console cookie: HttpOnly, SameSite=Strict, for the console's path only, and
// Secure when the console is reached over https.
func (h *Handler) setCookie(w http.ResponseWriter, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: int(maxAge.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.cfg.Secure})
}

func (h *Handler) clearCookie(w http.ResponseWriter, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.cfg.Secure})
}

// sameOrigin refuses a request a browser sent from another site: Sec-Fetch-Site says so where
// the browser sends it, else the Origin header must name this host. A request with neither (not
// from a browser) is left to the CSRF token.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// refuseForm answers a form that did not come from this console's own page.
func (h *Handler) refuseForm(w http.ResponseWriter, r *http.Request) {
	h.renderError(w, r, nil, http.StatusForbidden,
		"This form was refused: it was not sent from this console's own page (another site, or a page open since before you signed in again). Reload the page and try again.")
}

// toSignin sends a browser without a session to the sign-in page, remembering where it was
// going.
func (h *Handler) toSignin(w http.ResponseWriter, r *http.Request, err error) {
	if isUnavailable(err) {
		h.renderError(w, r, nil, http.StatusServiceUnavailable, "edgeplane cannot check your session right now (the database is unreachable); try again shortly.")
		return
	}
	target := Prefix + "signin"
	if r.Method == http.MethodGet && r.URL.Path != Prefix {
		target += "?next=" + url.QueryEscape(r.URL.RequestURI())
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// safeNext is where to go after signing in: a path of the console, never another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

// signinPage shows the sign-in form, with a fresh CSRF token in a short-lived cookie.
func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request) {
	h.renderSignin(w, r, http.StatusOK, "")
}

func (h *Handler) renderSignin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	token := randomToken()
	h.setCookie(w, signinCookie, token, signinTTL)
	h.render(w, r, nil, "signin", status, struct {
		Token, Next, Problem string
	}{token, safeNext(r.FormValue("next")), problem})
}

// signin starts a session for a valid API key.
func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		h.renderSignin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	c, err := r.Cookie(signinCookie)
	if !sameOrigin(r) || err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostForm.Get("csrf"))) != 1 {
		h.refuseForm(w, r)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		h.renderSignin(w, r, http.StatusUnauthorized, "Enter an API key's token.")
		return
	}
	caller, err := h.authenticate(r.Context(), token)
	if err != nil {
		status, msg := errorStatus(err)
		if status == http.StatusInternalServerError {
			msg = "The key could not be checked."
		}
		h.renderSignin(w, r, status, msg)
		return
	}
	now := time.Now()
	s := &session{id: randomToken(), token: token, csrf: randomToken(), caller: caller, created: now, seen: now}
	h.sessions.add(s)
	h.clearCookie(w, signinCookie)
	h.setCookie(w, h.cookieName(), s.id, sessionMax)
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// signout ends the session.
func (h *Handler) signout(w http.ResponseWriter, r *http.Request, s *session) error {
	h.sessions.remove(s.id)
	h.clearCookie(w, h.cookieName())
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
	return nil
}
