// Package server serves the Edge Ingress Management API over net/http. Its routes are not written
// by hand: New walks the resource table of package edgeplane and registers the generic create,
// get, list, update and delete handlers for every entry.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// DefaultMaxBody is the largest request body accepted (1 MiB); larger ones get 413.
const DefaultMaxBody = 1 << 20

// Config is what the server needs to know about its deployment.
type Config struct {
	// BaseURL is the public address of the API, with scheme and optional path prefix and without a
	// trailing slash. Every uri and next_page_uri starts with it exactly.
	BaseURL string
	// Logger receives one line per request; nil discards.
	Logger *slog.Logger
	// MaxBody overrides DefaultMaxBody when positive.
	MaxBody int64
	// RequestTimeout bounds the work of one API request, database included, so that a database
	// outage is answered with a fast 503 instead of a hang. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// WriteTimeout is the http.Server's WriteTimeout, when it has one. An answer not written
	// within it of the request's header is never sent, so work that ends after it would be done
	// for a client that is never told: a request's deadline is therefore at most nine tenths of
	// it (the rest is left for writing the answer), when that is shorter than RequestTimeout.
	WriteTimeout time.Duration
	// Metrics, when set, records every request; MetricsOnMain also serves GET /metrics on this
	// handler (without auth) rather than on a listener of its own.
	Metrics       *Metrics
	MetricsOnMain bool
	// CORSOrigins are the origins browsers may call the API from; "*" is any. None: no CORS.
	CORSOrigins []string
	// RateLimit is the per-API-key limit; the zero value is none.
	RateLimit RateLimit
	// Agents sends commands to online agent sessions (the data plane); nil answers every command
	// with 503.
	Agents Commander
	// ResponseBytes bounds the response bodies rendered at once (see bodyBudget); zero means
	// DefaultResponseBytes, a negative value no limit.
	ResponseBytes int64
}

// DefaultRequestTimeout is the default Config.RequestTimeout.
const DefaultRequestTimeout = 10 * time.Second

// readyTimeout bounds the database ping of /readyz, unless the request deadline is shorter.
const readyTimeout = 2 * time.Second

// Server is the API as an http.Handler.
type Server struct {
	store   *store.Store
	base    string
	log     *slog.Logger
	maxBody int64
	timeout time.Duration
	mux     *http.ServeMux
	metrics *Metrics
	cors    *cors
	limiter *limiter
	// gate queues API requests in arrival order beyond the store's ConnLimit (nil: no limit).
	gate chan struct{}
	// budget bounds the bytes of the response bodies rendered at once (nil: no limit); each
	// collection's sizes are the largest documents seen, which size a list's share of it.
	budget  *bodyBudget
	routes  []route
	openAPI []byte
	// router is route as a handler, made once; fast holds the GET-by-id routes it dispatches
	// itself, by the collection path with its trailing slash ("/ip_policy_rules/").
	router http.Handler
	fast   map[string]fastRoute
	// lines is log's handler when it writes request lines itself, else nil.
	lines requestLogger
}

// New builds the handler for every entry of the resource table.
func New(st *store.Store, cfg Config) *Server {
	s := &Server{store: st, base: strings.TrimRight(cfg.BaseURL, "/"), log: cfg.Logger, maxBody: cfg.MaxBody}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.lines, _ = s.log.Handler().(requestLogger)
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBody
	}
	s.timeout = cfg.RequestTimeout
	if s.timeout <= 0 {
		s.timeout = DefaultRequestTimeout
	}
	if w := cfg.WriteTimeout - cfg.WriteTimeout/10; w > 0 && w < s.timeout {
		s.timeout = w
	}
	s.metrics, s.cors, s.limiter = cfg.Metrics, newCORS(cfg.CORSOrigins), newLimiter(cfg.RateLimit)
	if cfg.ResponseBytes == 0 {
		cfg.ResponseBytes = DefaultResponseBytes
	}
	s.budget = newBodyBudget(cfg.ResponseBytes)
	if st != nil { // the fuzz targets build a server without a store
		if n := st.ConnLimit(); n > 0 {
			s.gate = make(chan struct{}, n)
		}
	}
	s.mux = http.NewServeMux()
	s.fast = map[string]fastRoute{}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if cfg.Metrics != nil && cfg.MetricsOnMain {
		s.mux.Handle("GET /metrics", cfg.Metrics.Handler())
	}
	collections := map[*ep.Resource]*collection{}
	for _, res := range ep.Resources {
		c := newCollection(res)
		collections[res] = c
		if res.Ops.Has(ep.OpCreate) {
			s.api(route{"POST", res.Path, ep.OpCreate, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.create(w, r, c) })
		}
		if res.Ops.Has(ep.OpList) {
			s.api(route{"GET", res.Path, ep.OpList, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.list(w, r, c) })
		}
		if res.Ops.Has(ep.OpGet) {
			s.api(route{"GET", res.Path + "/{id}", ep.OpGet, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.get(w, r, c) })
		}
		if res.Ops.Has(ep.OpUpdate) {
			s.api(route{"PATCH", res.Path + "/{id}", ep.OpUpdate, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.update(w, r, c) })
		}
		if res.Ops.Has(ep.OpDelete) {
			s.api(route{"DELETE", res.Path + "/{id}", ep.OpDelete, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.delete(w, r, c) })
		}
	}
	for _, c := range collections {
		if c.res.Embeds != nil {
			c.embeds = collections[c.res.Embeds]
		}
	}
	s.registerModules(collections)
	s.registerLive(cfg.Agents)
	s.openAPI = s.buildOpenAPI(cfg.Metrics != nil && cfg.MetricsOnMain)
	s.mux.HandleFunc("GET /openapi.json", s.serveOpenAPI)
	// Everything else: a JSON 404, or a JSON 405 with Allow when the path exists.
	s.mux.HandleFunc("/", s.unrouted)
	s.keepFastRoutes()
	s.router = http.HandlerFunc(s.route)
	return s
}

// route is one authenticated API operation: the generated OpenAPI document lists exactly these.
type route struct {
	method, path string
	op           ep.Ops
	c            *collection
	m            *ep.Module // for module operations
	action       string     // for a live collection's command (POST {path}/{id}/{action})
}

// fused reports whether the route authenticates in its own first query (Server.get) rather than
// before it: the GET of a stored object by id, the most frequent request.
func (rt route) fused() bool {
	return rt.op == ep.OpGet && rt.m == nil && rt.action == "" && !rt.c.live
}

// apiHandler is an API operation's handler: it writes the success answer itself and returns the
// error that replaces it, which api renders in one place (an *ep.Error as its status and code,
// anything else as a logged 500).
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// api registers an authenticated, versioned API route.
func (s *Server) api(rt route, h apiHandler) {
	s.routes = append(s.routes, rt)
	handler := s.authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	}), rt.fused())
	s.mux.Handle(rt.method+" "+rt.path, handler)
	if rt.fused() && rt.c.parentParam == "" {
		s.fast[rt.c.res.Path+"/"] = fastRoute{pattern: rt.method + " " + rt.path, h: handler}
	}
}

// ServeHTTP implements http.Handler: operation id, panic recovery and the request log line
// around the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.observe(w, r, s.router)
}

// healthz is liveness: the process is up and serving HTTP. It does not touch the database, so an
// orchestrator does not restart replicas during a database outage they will recover from.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is readiness: 200 while the database answers, 503 while it does not, so a load balancer
// sends traffic only to replicas that can serve it.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), min(readyTimeout, s.timeout))
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("not ready: database unreachable", "err", err)
		s.writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "database unreachable"})
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

var probeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// unrouted answers requests no API route matched. A path that some method serves gets 405 with
// the methods that do; anything else is 404.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range probeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		s.fail(w, r, &ep.Error{Status: http.StatusNotFound, Code: ep.CodeNotFound,
			Msg: "Not found: no API path " + r.URL.Path + "."})
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.fail(w, r, &ep.Error{Status: http.StatusMethodNotAllowed, Code: ep.CodeMethodNotAllowed,
		Msg: "Method " + r.Method + " is not allowed on " + r.URL.Path + "; allowed: " + strings.Join(allow, ", ") + "."})
}
