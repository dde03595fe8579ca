// Command edgeplane is the self-hosted server for the Edge Ingress Management API.
//
//	edgeplane serve [--listen ADDR] [--db DSN] [--base-url URL] [flags: edgeplane serve -h]
//	edgeplane secrets new-key | rotate [--db DSN]
//	edgeplane export [--db DSN] [--key-file FILE] > backup.json
//	edgeplane import [--db DSN] [--key-file FILE] < backup.json
//	edgeplane apikey create [--db DSN] [--account NAME [--create-account]] [--description TEXT]
//	edgeplane ca [--db DSN] > edgeplane-ca.pem
//	edgeplane version
//
// Every flag of serve can also come from the environment (EDGEPLANE_LISTEN, EDGEPLANE_DB, …: the
// flag's help names its variable); a flag given on the command line wins. `edgeplane COMMAND -h`
// prints on stdout what a command does and its flags. A mistake in the command line exits 2, a
// failure of the work 1.
package main

import (
	"context"
	"errors"
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
	// defaultDrainTimeout is --drain-timeout's default: how long the old process of a handover
	// lets requests in flight and agents' open streams finish. Longer than shutdownTimeout,
	// since the new process already serves everything else meanwhile.
	defaultDrainTimeout = 30 * time.Second
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
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitStatus(err, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{err: errors.New("no command given"), showUsage: true}
	}
	switch args[0] {
	case "serve":
		return serveError(stderr, args[1:], serve(ctx, args[1:], stdout, stderr))
	case "apikey":
		if len(args) >= 2 && isHelp(args[1]) {
			fmt.Fprintln(stdout, usage)
			return nil
		}
		if len(args) < 2 {
			return &usageError{cmd: "apikey", err: errors.New("missing its command: apikey create"), showUsage: true}
		}
		if args[1] != "create" {
			return unknownWord("apikey", args[1], []string{"create"})
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
		fs := newFlags("version", stdout, stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if err := noArgs(fs, ""); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "edgeplane", versionString())
		return nil
	case "help", "-h", "--help":
		if len(args) > 1 && !isHelp(args[1]) {
			// "edgeplane help serve" is "edgeplane serve -h".
			return runIO(ctx, append(append([]string{}, args[1:]...), "-h"), stdin, stdout, stderr)
		}
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return unknownWord("", args[0], []string{"serve", "secrets", "export", "import", "apikey", "ca", "version", "help"})
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
