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
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"
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
