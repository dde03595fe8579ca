package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/console"
	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/server"
)

// The web console's part of serve: --console serves it under /console/ on --listen, and the
// --inspect-* flags bound the traffic inspector's memory.

type consoleFlags struct {
	on                     *string
	entries                *int
	accountMiB, totalMiB   *int
	enabled                bool
	accountBytes, totalCap int64
	fs                     *flag.FlagSet
}

func addConsoleFlags(fs *flag.FlagSet) *consoleFlags {
	return &consoleFlags{
		on: fs.String("console", env("EDGEPLANE_CONSOLE", "true"),
			"serve the web console (sign-in with an API key, the account's agents, edges and reservations, the traffic inspector) under /console/ on --listen; false turns it and the inspector off (env EDGEPLANE_CONSOLE)"),
		entries: fs.Int("inspect-entries", envInt("EDGEPLANE_INSPECT_ENTRIES", inspect.DefaultEntries),
			"public requests and connections the traffic inspector keeps per account, in memory; 0 records none (env EDGEPLANE_INSPECT_ENTRIES)"),
		accountMiB: fs.Int("inspect-account-bytes", envInt("EDGEPLANE_INSPECT_ACCOUNT_BYTES", inspect.DefaultAccountBytes>>20),
			"MiB of memory the traffic inspector's entries of one account may use; older entries make room (env EDGEPLANE_INSPECT_ACCOUNT_BYTES)"),
		totalMiB: fs.Int("inspect-total-bytes", envInt("EDGEPLANE_INSPECT_TOTAL_BYTES", inspect.DefaultTotalBytes>>20),
			"MiB of memory the traffic inspector's entries of all accounts may use; the account using the most loses its oldest first (env EDGEPLANE_INSPECT_TOTAL_BYTES)"),
		fs: fs,
	}
}

// check reads the flags once parsed.
func (f *consoleFlags) check() error {
	on, err := strconv.ParseBool(*f.on)
	if err != nil {
		if flagGiven(f.fs, "console") {
			return fmt.Errorf("--console must be true or false, got %q", *f.on)
		}
		return fmt.Errorf("EDGEPLANE_CONSOLE must be true or false, got %q", os.Getenv("EDGEPLANE_CONSOLE"))
	}
	f.enabled = on
	if err := atLeast(f.fs, "inspect-entries", "EDGEPLANE_INSPECT_ENTRIES", *f.entries, 0); err != nil {
		return err
	}
	if err := atLeast(f.fs, "inspect-account-bytes", "EDGEPLANE_INSPECT_ACCOUNT_BYTES", *f.accountMiB, inspect.MinAccountBytes>>20); err != nil {
		return err
	}
	if err := atLeast(f.fs, "inspect-total-bytes", "EDGEPLANE_INSPECT_TOTAL_BYTES", *f.totalMiB, *f.accountMiB); err != nil {
		return err
	}
	f.accountBytes, f.totalCap = int64(*f.accountMiB)<<20, int64(*f.totalMiB)<<20
	return nil
}

// recorder is the inspector's configuration, or nil when nothing is recorded (the console off,
// or --inspect-entries 0).
func (f *consoleFlags) recorder() *inspect.Config {
	if !f.enabled || *f.entries == 0 {
		return nil
	}
	return &inspect.Config{Entries: *f.entries, AccountBytes: f.accountBytes, TotalBytes: f.totalCap}
}

// handler is the API's handler with the console mounted under /console/, or the API's alone
// when the console is off.
func (f *consoleFlags) handler(api *server.Server, d *dataPlane, base string, log *slog.Logger) (http.Handler, error) {
	if !f.enabled {
		return api, nil
	}
	cfg := console.Config{API: api, Auth: api, Replica: d.replica, Secure: strings.HasPrefix(base, "https://"), Logger: log,
		ReplayHTTP: addrOf(d.httpLn), ReplayHTTPS: addrOf(d.httpsLn), ReplayRoots: d.publicRoots}
	if d.rec != nil {
		cfg.Traffic, cfg.Entries, cfg.AccountBytes = d.rec, d.rec.Config().Entries, d.rec.Config().AccountBytes
	}
	c, err := console.New(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("web console", "url", strings.TrimRight(base, "/")+console.Prefix, "inspector", d.rec != nil)
	return console.Mount(api, c), nil
}
