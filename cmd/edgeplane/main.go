// Command edgeplane is the self-hosted server for the Edge Ingress Management API.
//
//	edgeplane serve [--listen ADDR] [--db DSN] [--base-url URL] [--service-domains LIST] [--cname-zone ZONE]
//	edgeplane apikey create [--db DSN] [--account NAME] [--description TEXT]
//	edgeplane version
//
// Every flag can also come from the environment (EDGEPLANE_LISTEN, EDGEPLANE_DB,
// EDGEPLANE_BASE_URL, EDGEPLANE_SERVICE_DOMAINS, EDGEPLANE_CNAME_ZONE); a flag given on the
// command line wins.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	ep "github.com/edgeplane/edgeplane"
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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h printed the flags: asking for help is not a failure
		}
		fmt.Fprintln(os.Stderr, "edgeplane:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  edgeplane serve [--listen ADDR] [--db DSN] [--base-url URL] [flags: edgeplane serve -h]
  edgeplane secrets new-key | rotate [--db DSN]
  edgeplane export [--db DSN] > backup.json
  edgeplane import [--db DSN] < backup.json [--service-domains LIST] [--cname-zone ZONE]
  edgeplane apikey create [--db DSN] [--account NAME] [--description TEXT]
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
		return serve(ctx, args[1:], stderr)
	case "apikey":
		if len(args) < 2 || args[1] != "create" {
			return errors.New(usage)
		}
		return apikeyCreate(ctx, args[2:], stdout, stderr)
	case "secrets":
		return secretsCmd(ctx, args[1:], stdout, stderr)
	case "export":
		return export(ctx, args[1:], stdout, stderr)
	case "import":
		return importBackup(ctx, args[1:], stdin, stderr)
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

// env returns the environment variable's value, or def when it is unset or empty.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// secretsCmd manages the key that encrypts private keys at rest: new-key prints a fresh key for
// EDGEPLANE_SECRET_KEY; rotate re-encrypts every secret with the first key of
// EDGEPLANE_SECRET_KEY=NEW,OLD so the old key can be dropped.
func secretsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "new-key":
		if len(args) > 1 {
			return fmt.Errorf("secrets new-key takes no arguments")
		}
		fmt.Fprintln(stdout, store.NewSecretKey())
		return nil
	case "rotate":
		fs := newFlags("secrets rotate", stderr)
		dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database (env EDGEPLANE_DB)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("secrets rotate takes no arguments, got %q", fs.Args())
		}
		st, err := store.Open(ctx, *dsn)
		if err != nil {
			return err
		}
		defer st.Close()
		n, err := st.RotateSecrets(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "edgeplane: re-encrypted %d secrets with the first key of %s\n", n, store.SecretKeyEnv)
		return nil
	}
	return fmt.Errorf("unknown secrets command %q\n%s", args[0], usage)
}

// export writes a backup of the whole database to stdout.
func export(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("export", stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database to back up (env EDGEPLANE_DB)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("export takes no arguments, got %q; redirect stdout to a file", fs.Args())
	}
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Export(ctx, stdout)
}

// importBackup restores a backup from stdin into an empty database.
func importBackup(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) error {
	fs := newFlags("import", stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "empty database to restore into (env EDGEPLANE_DB)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("import takes no arguments, got %q; redirect stdin from a file", fs.Args())
	}
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Import(ctx, stdin); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "edgeplane: backup restored")
	return nil
}

// newLogger makes the process logger: text (logfmt-like) or JSON lines on stderr.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// envInt is env for a number; a value that is not one is reported when the flag is checked.
func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		return -1
	}
	return def
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("edgeplane "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
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
	rateLimit := fs.String("rate-limit", env("EDGEPLANE_RATE_LIMIT", "off"),
		"API requests allowed per key, like 120/60s; off for none (env EDGEPLANE_RATE_LIMIT)")
	var timeout struct{ readHeader, read, write, idle time.Duration }
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
	if *maxConnections < 1 {
		return fmt.Errorf("--max-connections must be at least 1, got %d", *maxConnections)
	}
	if *maxConns < 1 {
		return fmt.Errorf("--db-max-conns must be at least 1, got %d", *maxConns)
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
	settings.BaseURL = strings.TrimRight(base, "/") // for URLs rules generate, such as SAML's
	st.SetSettings(settings)
	if err := bootstrap(ctx, st, stderr); err != nil {
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
			WriteTimeout: timeout.write}),
		ReadHeaderTimeout: timeout.readHeader,
		ReadTimeout:       timeout.read,
		WriteTimeout:      timeout.write,
		IdleTimeout:       timeout.idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(server.LimitListener(ln, *maxConnections)) }()
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

// bootstrap gives an empty database its first account, admin and API key, and prints the token
// once. When several replicas start together on one empty database, only the one that created
// the account creates the key.
func bootstrap(ctx context.Context, st *store.Store, stderr io.Writer) error {
	if has, err := st.HasAccounts(ctx); err != nil || has {
		return err
	}
	admin, created, err := st.EnsureAccount(ctx, "default")
	if err != nil || !created {
		return err
	}
	token, err := newKey(ctx, st, admin, "created at first start")
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "edgeplane: this database was empty, so account \"default\" and its first admin API key were created.\n"+
		"API key token (save it now; it will not be shown again):\n\n    %s\n\n", token)
	return nil
}

func newKey(ctx context.Context, st *store.Store, admin ep.Caller, description string) (string, error) {
	doc, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{AnnotationFields: ep.AnnotationFields{Description: &description}})
	if err != nil {
		return "", err
	}
	return *doc.(*ep.APIKey).Token, nil
}

func apikeyCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apikey create", stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database: a SQLite path, sqlite:PATH or a postgres:// URL (env EDGEPLANE_DB)")
	account := fs.String("account", "default", "account name; created with its admin user when absent")
	description := fs.String("description", "", "description of the new key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("apikey create takes no arguments, got %q (did you mean --account %s?)", fs.Args(), fs.Arg(0))
	}
	if *account == "" {
		return errors.New("--account must not be empty")
	}
	if len(*description) > ep.MaxDescription {
		return fmt.Errorf("--description must be at most %d bytes", ep.MaxDescription)
	}
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	admin, _, err := st.EnsureAccount(ctx, *account)
	if err != nil {
		return err
	}
	token, err := newKey(ctx, st, admin, *description)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}
