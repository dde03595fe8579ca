package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/internal/serving"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// serveConfig is serve's configuration, parsed from its flags and environment and checked:
// everything that can be wrong in it is refused before a socket or the database is touched.
type serveConfig struct {
	listen, dsn, baseURL, metricsListen string
	logFormat, logLevel                 string
	corsOrigins                         []string
	maxConns, maxConnections, perIP     int
	responseBudgetMiB                   int
	memoryLimitMiB                      int
	durability                          store.Durability
	settings                            ep.Settings
	limit                               server.RateLimit
	dp                                  *dataPlaneFlags
	// drainTimeout bounds a handover's drain of this process (handover.go).
	drainTimeout time.Duration
	console      *consoleFlags
	timeout      struct{ readHeader, read, write, idle, unauthIdle time.Duration }
}

// parseServe reads serve's flags (each with its EDGEPLANE_ variable) and checks them.
func parseServe(args []string, stdout, stderr io.Writer) (*serveConfig, error) {
	c := &serveConfig{}
	fs := newFlags("serve", stdout, stderr)
	fs.StringVar(&c.listen, "listen", env("EDGEPLANE_LISTEN", "127.0.0.1:8080"), "address to listen on (env EDGEPLANE_LISTEN)")
	fs.StringVar(&c.dsn, "db", env("EDGEPLANE_DB", "edgeplane.db"), "database: a SQLite path, sqlite:PATH or a postgres:// URL (env EDGEPLANE_DB)")
	fs.StringVar(&c.baseURL, "base-url", env("EDGEPLANE_BASE_URL", ""), "public base URL used in every uri (env EDGEPLANE_BASE_URL; default http://<listen address>)")
	serviceDomains := fs.String("service-domains", env("EDGEPLANE_SERVICE_DOMAINS", ep.DefaultServiceDomains),
		"comma-separated base domains the service owns: reserved domains under them need no CNAME (env EDGEPLANE_SERVICE_DOMAINS)")
	cnameZone := fs.String("cname-zone", env("EDGEPLANE_CNAME_ZONE", ep.DefaultCNAMEZone),
		"DNS zone of the CNAME targets generated for custom domains (env EDGEPLANE_CNAME_ZONE)")
	tcpHost := fs.String("tcp-addr-host", env("EDGEPLANE_TCP_ADDR_HOST", ep.DefaultTCPHost),
		"host name of the reserved TCP addresses this server assigns (env EDGEPLANE_TCP_ADDR_HOST)")
	tcpPorts := fs.String("tcp-port-range", env("EDGEPLANE_TCP_PORT_RANGE", fmt.Sprintf("%d-%d", ep.DefaultTCPPortMin, ep.DefaultTCPPortMax)),
		"LOW-HIGH ports of the reserved TCP addresses this server assigns (env EDGEPLANE_TCP_PORT_RANGE)")
	fs.IntVar(&c.maxConns, "db-max-conns", envInt("EDGEPLANE_DB_MAX_CONNS", store.DefaultPGMaxConns),
		"PostgreSQL: the most connections this process opens (env EDGEPLANE_DB_MAX_CONNS)")
	durability := fs.String("durability", env("EDGEPLANE_DURABILITY", "normal"),
		"SQLite: normal (an acknowledged write survives a crash of the process) or full (also a power loss; fsync per commit, with group commit) (env EDGEPLANE_DURABILITY)")
	fs.StringVar(&c.logFormat, "log-format", env("EDGEPLANE_LOG_FORMAT", "text"), "log format: text or json (env EDGEPLANE_LOG_FORMAT)")
	fs.StringVar(&c.logLevel, "log-level", env("EDGEPLANE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env EDGEPLANE_LOG_LEVEL)")
	fs.StringVar(&c.metricsListen, "metrics-listen", env("EDGEPLANE_METRICS_LISTEN", ""),
		"serve /metrics on this address instead of on --listen (env EDGEPLANE_METRICS_LISTEN)")
	corsOrigins := fs.String("cors-origins", env("EDGEPLANE_CORS_ORIGINS", "*"),
		"comma-separated origins browsers may call the API from; * for any, \"\" for none (env EDGEPLANE_CORS_ORIGINS)")
	fs.IntVar(&c.maxConnections, "max-connections", envInt("EDGEPLANE_MAX_CONNECTIONS", defaultMaxConnections),
		"most client connections served at once; at the limit the one unproductive longest (request head unfinished, or idle) is closed for a new client, and while every one has a request in progress more wait in the backlog (env EDGEPLANE_MAX_CONNECTIONS)")
	fs.IntVar(&c.perIP, "max-connections-per-ip", envInt("EDGEPLANE_MAX_CONNECTIONS_PER_IP", defaultMaxConnectionsPerIP),
		"most client connections open at once from one IP address (IPv6: one /64); more are closed at once; 0 for no limit (env EDGEPLANE_MAX_CONNECTIONS_PER_IP)")
	fs.IntVar(&c.responseBudgetMiB, "response-budget", envInt("EDGEPLANE_RESPONSE_BUDGET", server.DefaultResponseBytes>>20),
		"MiB of API response bodies rendered at once; a request waits for its share, and is answered 503 when its deadline passes first; 0 for no limit (env EDGEPLANE_RESPONSE_BUDGET)")
	fs.IntVar(&c.memoryLimitMiB, "memory-limit", envInt("EDGEPLANE_MEMORY_LIMIT", serving.DefaultMemoryLimit>>20),
		"MiB of the garbage collector's soft memory limit while what is live fits under it; above, the limit follows what is live plus an eighth; GOMEMLIMIT, if set, replaces both (env EDGEPLANE_MEMORY_LIMIT)")
	rateLimit := fs.String("rate-limit", env("EDGEPLANE_RATE_LIMIT", "off"),
		"API requests allowed per key, like 120/60s; off for none (env EDGEPLANE_RATE_LIMIT)")
	c.dp = addDataPlaneFlags(fs)
	c.console = addConsoleFlags(fs)
	timeoutFlags := []struct {
		name, env, usage string
		def              time.Duration
		dst              *time.Duration
		value            *string
	}{
		{"read-header-timeout", "EDGEPLANE_READ_HEADER_TIMEOUT", "longest a client may take to send a request's header",
			readHeaderTimeout, &c.timeout.readHeader, nil},
		{"read-timeout", "EDGEPLANE_READ_TIMEOUT", "longest a client may take to send a whole request, body included",
			readTimeout, &c.timeout.read, nil},
		{"write-timeout", "EDGEPLANE_WRITE_TIMEOUT", "longest from the end of a request's header to the end of its response; nine tenths of it also bounds a request's work when shorter than 10s",
			writeTimeout, &c.timeout.write, nil},
		{"idle-timeout", "EDGEPLANE_IDLE_TIMEOUT", "longest a keep-alive connection may wait for its next request; keep it above a load balancer's idle timeout",
			idleTimeout, &c.timeout.idle, nil},
		{"unauthenticated-idle-timeout", "EDGEPLANE_UNAUTHENTICATED_IDLE_TIMEOUT", "longest a keep-alive connection that never sent a valid API key may wait for its next request",
			unauthenticatedIdleTimeout, &c.timeout.unauthIdle, nil},
		{"drain-timeout", "EDGEPLANE_DRAIN_TIMEOUT", "after a handover (SIGUSR2), longest the old process waits for the requests in flight and the agents' streams before it ends what is left and exits",
			defaultDrainTimeout, &c.drainTimeout, nil},
	}
	for i := range timeoutFlags {
		f := &timeoutFlags[i]
		f.value = fs.String(f.name, env(f.env, f.def.String()), fmt.Sprintf("%s (env %s)", f.usage, f.env))
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	for _, f := range timeoutFlags {
		d, err := time.ParseDuration(*f.value)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--%s must be a positive duration like %s, got %q", f.name, f.def, *f.value)
		}
		*f.dst = d
	}
	if err := noArgs(fs, ""); err != nil {
		return nil, err
	}
	var err error
	if c.settings, err = ep.ParseSettings(*serviceDomains, *cnameZone); err != nil {
		return nil, err
	}
	if err := c.settings.ParseTCPAddrs(*tcpHost, *tcpPorts); err != nil {
		return nil, err
	}
	if err := atLeast(fs, "max-connections", "EDGEPLANE_MAX_CONNECTIONS", c.maxConnections, 1); err != nil {
		return nil, err
	}
	if err := atLeast(fs, "max-connections-per-ip", "EDGEPLANE_MAX_CONNECTIONS_PER_IP", c.perIP, 0); err != nil {
		return nil, err
	}
	if err := atLeast(fs, "db-max-conns", "EDGEPLANE_DB_MAX_CONNS", c.maxConns, 1); err != nil {
		return nil, err
	}
	if err := atLeast(fs, "response-budget", "EDGEPLANE_RESPONSE_BUDGET", c.responseBudgetMiB, 0); err != nil {
		return nil, err
	}
	if err := atLeast(fs, "memory-limit", "EDGEPLANE_MEMORY_LIMIT", c.memoryLimitMiB, minMemoryLimitMiB); err != nil {
		return nil, err
	}
	if c.durability, err = store.ParseDurability(*durability); err != nil {
		return nil, fmt.Errorf("--durability: %w", err)
	}
	if c.baseURL != "" {
		if u, err := url.Parse(c.baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--base-url %q must be an absolute http:// or https:// URL", c.baseURL)
		}
	}
	if err := c.console.check(); err != nil {
		return nil, err
	}
	if c.limit, err = server.ParseRateLimit(*rateLimit); err != nil {
		return nil, fmt.Errorf("--rate-limit: %w", err)
	}
	c.corsOrigins = splitList(*corsOrigins)
	return c, nil
}

// sockets are the listeners serve owns: the API's, the optional metrics one and the data
// plane's. They are all taken before the database is opened, so that a port in use stops serve
// before a first start makes (and prints) an API key nobody will see again; close releases them.
type sockets struct {
	api, metrics net.Listener
	dp           *dataPlane
	// set opened them, from the sockets a handover passed to this process where it did.
	set *socketSet
}

// openSockets takes every port of the configuration, or none.
func (c *serveConfig) openSockets() (_ *sockets, err error) {
	in, err := parseInherited(os.Getenv(inheritEnv), os.Getenv(inheritTCPEnv))
	if err != nil {
		return nil, usageErrorf("serve", "%v", err)
	}
	s := &sockets{set: &socketSet{in: in}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.api, err = s.set.listen("api", c.listen); err != nil {
		return nil, err
	}
	if s.dp, err = c.dp.listen(s.set); err != nil {
		return nil, err
	}
	if c.metricsListen != "" {
		if s.metrics, err = s.set.listen("metrics", c.metricsListen); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *sockets) close() {
	for _, l := range []net.Listener{s.api, s.metrics} {
		if l != nil {
			l.Close()
		}
	}
	if s.dp != nil {
		s.dp.Close()
	}
	s.set.in.close()
}

// httpServer is the API's HTTP server with the configured timeouts and limits.
func (c *serveConfig) httpServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.timeout.readHeader,
		ReadTimeout:       c.timeout.read,
		WriteTimeout:      c.timeout.write,
		IdleTimeout:       c.timeout.idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Until a request of the connection presents a valid API key, it waits at most
		// --unauthenticated-idle-timeout between requests.
		ConnContext: netx.ConnContext,
		ConnState:   netx.ConnState,
	}
}

// minMemoryLimitMiB is the least --memory-limit: below it the collector would run after every
// few allocations of even a small server, whose live heap alone is some 10 MiB.
const minMemoryLimitMiB = 32

// serve runs the server until ctx ends, then shuts it down gracefully: cmd only wires the
// configuration, the sockets, the store and the servers together.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, stdout, stderr)
	if err != nil {
		return err
	}
	serving.SetGC(int64(cfg.memoryLimitMiB) << 20)
	logOut := serving.NewLogWriter(stderr)
	defer logOut.Close()
	log, err := newLogger(logOut, cfg.logFormat, cfg.logLevel)
	if err != nil {
		return err
	}
	socks, err := cfg.openSockets()
	if err != nil {
		return err
	}
	defer socks.close()
	for _, w := range socks.set.in.warnings {
		log.Warn("handover: " + w)
	}
	base := cfg.baseURL
	if base == "" {
		base = "http://" + socks.api.Addr().String()
	}

	st, err := store.OpenWith(ctx, cfg.dsn, store.Options{MaxConns: cfg.maxConns, Durability: cfg.durability})
	if err != nil {
		return err
	}
	defer st.Close()
	// A secret this process cannot decrypt would make every use of it a 500: refuse to start.
	if err := st.CheckSecrets(ctx); err != nil {
		return err
	}
	// Before the store closes: ending the agents' sessions deletes their rows.
	defer socks.dp.Close()
	settings := cfg.settings
	settings.BaseURL = strings.TrimRight(base, "/") // for URLs rules generate, such as SAML's
	st.SetSettings(settings)
	if err := bootstrap(ctx, st, tokenAnnouncer(stderr, log, cfg.logFormat)); err != nil {
		return err
	}
	socks.dp.inspect = cfg.console.recorder()
	if socks.set.in.ready != nil {
		// The TCP sockets inherited wait for their endpoints' agents, which move once the
		// predecessor sees this process ready and drains; those not back by then are closed.
		n := socks.set.in.tcp.size()
		socks.set.in.tcp.expireAfter(handoverReadyTimeout+cfg.drainTimeout+tcpSpanMargin, func(left int) {
			log.Info("handover: closed the inherited TCP ports no endpoint or edge took", "ports", left)
		})
		if n > 0 {
			log.Info("handover: inherited TCP ports", "ports", n)
		}
	}
	if err := socks.dp.start(ctx, cfg.dp, st, settings, log); err != nil {
		return err
	}
	metrics := server.NewMetrics(st)
	// At --max-connections, the connection unproductive longest (a request head never finished,
	// or idle between requests; a key holder's idle one last) is closed for a newcomer.
	apiConns := netx.NewLimiter(netx.Limits{Max: cfg.maxConnections, PerAddr: cfg.perIP, UntrustedIdle: cfg.timeout.unauthIdle,
		Evict: true, OnEvict: evictionLogger(log, "api")})
	if err := socks.dp.registerMetrics(metrics, apiConns); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	var msrv *http.Server
	if socks.metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: cfg.timeout.readHeader}
		go func() { _ = msrv.Serve(socks.metrics) }()
		defer msrv.Close()
		log.Info("metrics listening", "addr", socks.metrics.Addr().String())
	}
	api := server.New(st, server.Config{BaseURL: base, Logger: log, Metrics: metrics,
		MetricsOnMain: cfg.metricsListen == "", CORSOrigins: cfg.corsOrigins, RateLimit: cfg.limit,
		WriteTimeout: cfg.timeout.write, Agents: socks.dp.commander(), ResponseBytes: cfg.responseBytes()})
	handler, err := cfg.console.handler(api, socks.dp, base, log)
	if err != nil {
		return err
	}
	srv := cfg.httpServer(handler, log)
	limited := apiConns.ListenPending(socks.api)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	// SIGUSR2 is caught before the line that says the server listens: a supervisor (or a test)
	// that signals once it reads that line would otherwise kill it, SIGUSR2's default action.
	handedOver := make(chan int, 1)
	stopUSR2 := listenForHandover(&handover{socks: socks.set, log: log, endpoints: socks.dp.onlineKeys, tcp: socks.dp.tcpListeners}, handedOver)
	defer stopUSR2()
	log.Info("edgeplane listening", "addr", socks.api.Addr().String(), "base_url", strings.TrimRight(base, "/"), "db", store.RedactDSN(cfg.dsn), "version", versionString())
	if socks.set.in.ready != nil {
		if err := socks.set.in.signalReady(); err != nil {
			log.Warn("handover: cannot tell the old process this one is ready", "err", err)
		}
		// The old process names this one systemd's main process (listenForHandover).
		log.Info("handover: serving on the inherited sockets", "pid", os.Getpid())
	} else {
		sdNotify("READY=1")
	}

	select {
	case err := <-errc:
		return err
	case pid := <-handedOver:
		return drainAfterHandover(cfg, log, pid, srv, msrv, socks.dp)
	case <-ctx.Done():
	}
	// A second SIGINT or SIGTERM during the graceful wait ends the process at once.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	log.Info("shutting down: finishing requests in flight", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// responseBytes is --response-budget as server.Config.ResponseBytes: 0 (no limit) is negative
// there.
func (c *serveConfig) responseBytes() int64 {
	if c.responseBudgetMiB == 0 {
		return -1
	}
	return int64(c.responseBudgetMiB) << 20
}
