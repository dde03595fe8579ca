// Command edgeplane is the self-hosted server for the Edge Ingress Management API.
//
//	edgeplane serve [--listen ADDR] [--db DSN] [--base-url URL] [flags: edgeplane serve -h]
//	edgeplane secrets new-key | rotate [--db DSN]
//	edgeplane export [--db DSN] > backup.json
//	edgeplane import [--db DSN] < backup.json
//	edgeplane apikey create [--db DSN] [--account NAME] [--description TEXT]
//	edgeplane version
//
// Every flag of serve can also come from the environment (EDGEPLANE_LISTEN, EDGEPLANE_DB, …: the
// flag's help names its variable); a flag given on the command line wins. `edgeplane COMMAND -h`
// prints a command's flags on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/internal/serving"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise it comes from the
// module's build information.
var version = ""

// Timeouts of the HTTP server: a slow or stalled client cannot hold a connection forever, and a
// shutdown waits a bounded time for requests in flight. The first four are the defaults of
// serve's --read-header-timeout, --read-timeout, --write-timeout and --idle-timeout.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 60 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 120 * time.Second
	shutdownTimeout   = 15 * time.Second
	// defaultMaxConnections bounds concurrent client connections (--max-connections).
	defaultMaxConnections = 1024
	// defaultMaxConnectionsPerIP bounds those from one client address
	// (--max-connections-per-ip): one address cannot take every slot.
	defaultMaxConnectionsPerIP = 256
	// unauthenticatedIdleTimeout is the default of --unauthenticated-idle-timeout: how long a
	// keep-alive connection that never sent a valid API key may wait for its next request.
	unauthenticatedIdleTimeout = 5 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h printed the flags: asking for help is not a failure
		}
		if errors.Is(err, errReported) {
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "edgeplane:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  edgeplane serve [--listen ADDR] [--db DSN] [--base-url URL] [flags: edgeplane serve -h]
  edgeplane secrets new-key | rotate [--db DSN]
  edgeplane export [--db DSN] > backup.json
  edgeplane import [--db DSN] < backup.json
  edgeplane apikey create [--db DSN] [--account NAME] [--description TEXT]
  edgeplane ca [--db DSN] > edgeplane-ca.pem
  edgeplane version`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "serve":
		return serveError(stderr, args[1:], serve(ctx, args[1:], stdout, stderr))
	case "apikey":
		if len(args) >= 2 && isHelp(args[1]) {
			fmt.Fprintln(stdout, usage)
			return nil
		}
		if len(args) < 2 || args[1] != "create" {
			return errors.New(usage)
		}
		return apikeyCreate(ctx, args[2:], stdout, stderr)
	case "secrets":
		return secretsCmd(ctx, args[1:], stdout, stderr)
	case "export":
		return export(ctx, args[1:], stdout, stderr)
	case "import":
		return importBackup(ctx, args[1:], stdin, stdout, stderr)
	case "ca":
		return printCA(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "edgeplane", versionString())
		return nil
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stdout, stderr)
	listen := fs.String("listen", env("EDGEPLANE_LISTEN", "127.0.0.1:8080"), "address to listen on (env EDGEPLANE_LISTEN)")
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database: a SQLite path, sqlite:PATH or a postgres:// URL (env EDGEPLANE_DB)")
	baseURL := fs.String("base-url", env("EDGEPLANE_BASE_URL", ""), "public base URL used in every uri (env EDGEPLANE_BASE_URL; default http://<listen address>)")
	serviceDomains := fs.String("service-domains", env("EDGEPLANE_SERVICE_DOMAINS", ep.DefaultServiceDomains),
		"comma-separated base domains the service owns: reserved domains under them need no CNAME (env EDGEPLANE_SERVICE_DOMAINS)")
	cnameZone := fs.String("cname-zone", env("EDGEPLANE_CNAME_ZONE", ep.DefaultCNAMEZone),
		"DNS zone of the CNAME targets generated for custom domains (env EDGEPLANE_CNAME_ZONE)")
	tcpHost := fs.String("tcp-addr-host", env("EDGEPLANE_TCP_ADDR_HOST", ep.DefaultTCPHost),
		"host name of the reserved TCP addresses this server assigns (env EDGEPLANE_TCP_ADDR_HOST)")
	tcpPorts := fs.String("tcp-port-range", env("EDGEPLANE_TCP_PORT_RANGE", fmt.Sprintf("%d-%d", ep.DefaultTCPPortMin, ep.DefaultTCPPortMax)),
		"LOW-HIGH ports of the reserved TCP addresses this server assigns (env EDGEPLANE_TCP_PORT_RANGE)")
	maxConns := fs.Int("db-max-conns", envInt("EDGEPLANE_DB_MAX_CONNS", store.DefaultPGMaxConns),
		"PostgreSQL: the most connections this process opens (env EDGEPLANE_DB_MAX_CONNS)")
	durabilityFlag := fs.String("durability", env("EDGEPLANE_DURABILITY", "normal"),
		"SQLite: normal (an acknowledged write survives a crash of the process) or full (also a power loss; fsync per commit, with group commit) (env EDGEPLANE_DURABILITY)")
	logFormat := fs.String("log-format", env("EDGEPLANE_LOG_FORMAT", "text"), "log format: text or json (env EDGEPLANE_LOG_FORMAT)")
	logLevel := fs.String("log-level", env("EDGEPLANE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env EDGEPLANE_LOG_LEVEL)")
	metricsListen := fs.String("metrics-listen", env("EDGEPLANE_METRICS_LISTEN", ""),
		"serve /metrics on this address instead of on --listen (env EDGEPLANE_METRICS_LISTEN)")
	corsOrigins := fs.String("cors-origins", env("EDGEPLANE_CORS_ORIGINS", "*"),
		"comma-separated origins browsers may call the API from; * for any, \"\" for none (env EDGEPLANE_CORS_ORIGINS)")
	maxConnections := fs.Int("max-connections", envInt("EDGEPLANE_MAX_CONNECTIONS", defaultMaxConnections),
		"most client connections served at once; more wait in the backlog (env EDGEPLANE_MAX_CONNECTIONS)")
	maxConnectionsPerIP := fs.Int("max-connections-per-ip", envInt("EDGEPLANE_MAX_CONNECTIONS_PER_IP", defaultMaxConnectionsPerIP),
		"most client connections open at once from one IP address (IPv6: one /64); more are closed at once; 0 for no limit (env EDGEPLANE_MAX_CONNECTIONS_PER_IP)")
	rateLimit := fs.String("rate-limit", env("EDGEPLANE_RATE_LIMIT", "off"),
		"API requests allowed per key, like 120/60s; off for none (env EDGEPLANE_RATE_LIMIT)")
	dpFlags := addDataPlaneFlags(fs)
	var timeout struct{ readHeader, read, write, idle, unauthIdle time.Duration }
	timeoutFlags := []struct {
		name, env, usage string
		def              time.Duration
		dst              *time.Duration
		value            *string
	}{
		{"read-header-timeout", "EDGEPLANE_READ_HEADER_TIMEOUT", "longest a client may take to send a request's header",
			readHeaderTimeout, &timeout.readHeader, nil},
		{"read-timeout", "EDGEPLANE_READ_TIMEOUT", "longest a client may take to send a whole request, body included",
			readTimeout, &timeout.read, nil},
		{"write-timeout", "EDGEPLANE_WRITE_TIMEOUT", "longest from the end of a request's header to the end of its response; nine tenths of it also bounds a request's work when shorter than 10s",
			writeTimeout, &timeout.write, nil},
		{"idle-timeout", "EDGEPLANE_IDLE_TIMEOUT", "longest a keep-alive connection may wait for its next request; keep it above a load balancer's idle timeout",
			idleTimeout, &timeout.idle, nil},
		{"unauthenticated-idle-timeout", "EDGEPLANE_UNAUTHENTICATED_IDLE_TIMEOUT", "longest a keep-alive connection that never sent a valid API key may wait for its next request",
			unauthenticatedIdleTimeout, &timeout.unauthIdle, nil},
	}
	for i := range timeoutFlags {
		f := &timeoutFlags[i]
		f.value = fs.String(f.name, env(f.env, f.def.String()), fmt.Sprintf("%s (env %s)", f.usage, f.env))
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range timeoutFlags {
		d, err := time.ParseDuration(*f.value)
		if err != nil || d <= 0 {
			return fmt.Errorf("--%s must be a positive duration like %s, got %q", f.name, f.def, *f.value)
		}
		*f.dst = d
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	settings, err := ep.ParseSettings(*serviceDomains, *cnameZone)
	if err != nil {
		return err
	}
	if err := settings.ParseTCPAddrs(*tcpHost, *tcpPorts); err != nil {
		return err
	}
	if err := atLeast(fs, "max-connections", "EDGEPLANE_MAX_CONNECTIONS", *maxConnections, 1); err != nil {
		return err
	}
	if err := atLeast(fs, "max-connections-per-ip", "EDGEPLANE_MAX_CONNECTIONS_PER_IP", *maxConnectionsPerIP, 0); err != nil {
		return err
	}
	if err := atLeast(fs, "db-max-conns", "EDGEPLANE_DB_MAX_CONNS", *maxConns, 1); err != nil {
		return err
	}
	durability, err := store.ParseDurability(*durabilityFlag)
	if err != nil {
		return fmt.Errorf("--durability: %w", err)
	}
	if *baseURL != "" {
		if u, err := url.Parse(*baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--base-url %q must be an absolute http:// or https:// URL", *baseURL)
		}
	}
	serving.SetGC()
	logOut := serving.NewLogWriter(stderr)
	defer logOut.Close()
	log, err := newLogger(logOut, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	limit, err := server.ParseRateLimit(*rateLimit)
	if err != nil {
		return fmt.Errorf("--rate-limit: %w", err)
	}

	// Everything that can fail on bad configuration is checked before the database is touched,
	// and the port is taken before the first API key is made, so a first start that fails never
	// prints a token nobody will see again.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	dp, err := dpFlags.listen()
	if err != nil {
		return err
	}
	defer dp.Close()
	var mln net.Listener
	if *metricsListen != "" {
		if mln, err = net.Listen("tcp", *metricsListen); err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer mln.Close()
	}
	base := *baseURL
	if base == "" {
		base = "http://" + ln.Addr().String()
	}

	st, err := store.OpenWith(ctx, *dsn, store.Options{MaxConns: *maxConns, Durability: durability})
	if err != nil {
		return err
	}
	defer st.Close()
	// A secret this process cannot decrypt would make every use of it a 500: refuse to start.
	if err := st.CheckSecrets(ctx); err != nil {
		return err
	}
	// Before the store closes: ending the agents' sessions deletes their rows.
	defer dp.Close()
	settings.BaseURL = strings.TrimRight(base, "/") // for URLs rules generate, such as SAML's
	st.SetSettings(settings)
	if err := bootstrap(ctx, st, tokenAnnouncer(stderr, log, *logFormat)); err != nil {
		return err
	}

	if err := dp.start(ctx, dpFlags, st, settings, log); err != nil {
		return err
	}
	metrics := server.NewMetrics(st)
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: timeout.readHeader}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		log.Info("metrics listening", "addr", mln.Addr().String())
	}
	srv := &http.Server{
		Handler: server.New(st, server.Config{BaseURL: base, Logger: log, Metrics: metrics,
			MetricsOnMain: *metricsListen == "", CORSOrigins: splitList(*corsOrigins), RateLimit: limit,
			WriteTimeout: timeout.write, Agents: dp.commander()}),
		ReadHeaderTimeout: timeout.readHeader,
		ReadTimeout:       timeout.read,
		WriteTimeout:      timeout.write,
		IdleTimeout:       timeout.idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Until a request of the connection presents a valid API key, it waits at most
		// --unauthenticated-idle-timeout between requests.
		ConnContext: netx.ConnContext,
		ConnState:   netx.ConnState,
	}
	limited := netx.Limit(ln, netx.Limits{Max: *maxConnections, PerAddr: *maxConnectionsPerIP, UntrustedIdle: timeout.unauthIdle})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	log.Info("edgeplane listening", "addr", ln.Addr().String(), "base_url", strings.TrimRight(base, "/"), "db", store.RedactDSN(*dsn), "version", versionString())

	select {
	case err := <-errc:
		return err
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
