// Package console is edgeplane's web console, served under /console/ on the API's listener: a
// sign-in with an API key, pages showing the signed-in account's agents, tunnels, edges and
// reservations, and the traffic inspector (the public requests and connections the data plane
// recorded, live, with their detail and a replay).
//
// The console holds no authority of its own. Every object it shows or changes comes from the
// API, called in process with the signed-in key (api.go), so the API's rules about whose objects
// a key reaches are the console's; the inspector's entries are read through the account the API
// authenticated the key to. Pages are html/template, assets are embedded, nothing is loaded from
// elsewhere, and a Content-Security-Policy allows no inline script.
package console

import (
	"context"
	"crypto/x509"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/inspect"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// Authenticator checks an API key as the API does and returns whose it is (server.Server).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (ep.Caller, error)
}

// Traffic is the inspector as the console uses it: the recorded traffic, and each account's
// choice to keep bodies (inspect.Recorder).
type Traffic interface {
	inspect.Source
	Bodies(account string) bool
	SetBodies(account string, on bool)
}

// Config is what the console needs of its deployment.
type Config struct {
	// API is the Edge Ingress Management API's handler, which the console calls in process with
	// the signed-in key for every object it shows or changes.
	API http.Handler
	// Auth checks API keys at sign-in and on every request after it.
	Auth Authenticator
	// Traffic is the inspector; nil when it is off (the data plane is off, or recording is).
	Traffic Traffic
	// Entries and AccountBytes are the inspector's bounds per account, shown on its page.
	Entries      int
	AccountBytes int64
	// Replica names this process; the inspector shows this replica's traffic.
	Replica string
	// ReplayHTTP and ReplayHTTPS are the public HTTP and TLS listeners' addresses a replay is
	// sent to ("" when that listener is off); ReplayRoots the CAs its TLS is verified with.
	ReplayHTTP, ReplayHTTPS string
	ReplayRoots             *x509.CertPool
	// Secure marks the session cookie Secure: the console is reached over https (the API's base
	// URL is https, as behind a TLS-terminating proxy).
	Secure bool
	// Logger receives the console's errors; nil discards.
	Logger *slog.Logger
}

// Handler serves the console.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	mux      *http.ServeMux
	pages    map[string]*template.Template
	sessions *sessions
	static   http.Handler
	// routes lists what the console serves, each with the kind of refusal it gives without a
	// session (the security tests walk it).
	routes []route
}

// route is one registered console path.
type route struct {
	method, path string
	kind         routeKind
}

type routeKind int

const (
	kindPage   routeKind = iota // HTML: without a session, a redirect to the sign-in page
	kindForm                    // a POST from a page: a session, the origin and the CSRF token are checked
	kindData                    // JSON or an event stream: without a session, 401
	kindPublic                  // the sign-in page and the assets
)

// New builds the console.
func New(cfg Config) (*Handler, error) {
	if cfg.API == nil || cfg.Auth == nil {
		return nil, errors.New("console: the API handler and an authenticator are required")
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), sessions: newSessions()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	h.register()
	return h, nil
}

func (h *Handler) register() {
	h.handle(kindPublic, "GET", "signin", h.signinPage)
	h.handle(kindPublic, "POST", "signin", h.signin)
	h.handle(kindPublic, "GET", "static/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.static.ServeHTTP(w, r)
	})
	h.page("{$}", h.overview)
	h.page("agents", h.agents)
	h.page("edges", h.edges)
	h.page("domains", h.domains)
	h.page("traffic", h.traffic)
	h.page("traffic/{replica}/{id}", h.entry)
	h.form("signout", h.signout)
	h.form("agents/{id}/{command}", h.command)
	h.form("modules", h.toggleModule)
	h.form("traffic/bodies", h.setBodies)
	h.form("traffic/{replica}/{id}/replay", h.replay)
	h.data("api/traffic", h.trafficJSON)
	h.data("api/traffic/stream", h.stream)
	h.data("api/traffic/{replica}/{id}", h.entryJSON)
	h.mux.HandleFunc("/console/", h.notFound)
	h.mux.HandleFunc("/console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
}

func (h *Handler) handle(kind routeKind, method, path string, fn http.HandlerFunc) {
	h.routes = append(h.routes, route{method, Prefix + path, kind})
	h.mux.HandleFunc(method+" "+Prefix+path, fn)
}

// page registers an HTML page that needs a session.
func (h *Handler) page(path string, fn func(w http.ResponseWriter, r *http.Request, s *session) error) {
	h.handle(kindPage, "GET", path, func(w http.ResponseWriter, r *http.Request) {
		s, err := h.session(r)
		if err != nil {
			h.toSignin(w, r, err)
			return
		}
		if err := fn(w, r, s); err != nil {
			h.fail(w, r, s, err)
		}
	})
}

// form registers a form's POST: it needs a session, a same-origin request and the session's
// CSRF token; it answers with a redirect to a page.
func (h *Handler) form(path string, fn func(w http.ResponseWriter, r *http.Request, s *session) error) {
	h.handle(kindForm, "POST", path, func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			h.refuseForm(w, r)
			return
		}
		s, err := h.session(r)
		if err != nil {
			h.toSignin(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, s, badRequest("The form could not be read: it is malformed or larger than 64 KiB."))
			return
		}
		if !s.checkCSRF(r.PostForm.Get("csrf")) {
			h.refuseForm(w, r)
			return
		}
		if err := fn(w, r, s); err != nil {
			h.fail(w, r, s, err)
		}
	})
}

// data registers a data call (JSON, or an event stream): without a session it is 401.
func (h *Handler) data(path string, fn func(w http.ResponseWriter, r *http.Request, s *session) error) {
	h.handle(kindData, "GET", path, func(w http.ResponseWriter, r *http.Request) {
		s, err := h.session(r)
		if err != nil {
			if isUnavailable(err) {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "edgeplane cannot check the session right now; try again shortly"})
				return
			}
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "sign in to the console first"})
			return
		}
		if err := fn(w, r, s); err != nil {
			status, msg := errorStatus(err)
			writeJSON(w, status, map[string]string{"error": msg})
		}
	})
}

// maxForm bounds a form's body: the largest is a replay, with a body of up to 16 KiB and its
// headers.
const maxForm = 64 << 10

// contentSecurityPolicy allows the console's own scripts, styles and images only, no inline
// script or style, no framing and no form sent elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP serves the console with its security headers on every answer.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, Prefix+"static/") {
		hd.Set("Cache-Control", "no-store")
	}
	h.mux.ServeHTTP(w, r)
}

// Mount serves the console under Prefix and everything else with api.
func Mount(api, console http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, Prefix) {
			console.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// sessionCheckInterval is how often a live view checks again that its key still signs in.
const sessionCheckInterval = 30 * time.Second
