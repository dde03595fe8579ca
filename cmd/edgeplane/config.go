package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/serving"
)

// emptyIsValue lists the environment variables whose empty value means something of its own, as
// the flag's empty value does: no CORS origins, no rate limit, /metrics on --listen, the base URL
// derived from the listen address, the built-in service domains, CNAME zone and TCP addresses.
// Such a variable, once set, is the value even when it is "". For the others, "" is no valid
// value (a listen address, a database, a format, a duration), so an empty variable counts as
// unset and the default applies.
var emptyIsValue = map[string]bool{
	"EDGEPLANE_CORS_ORIGINS":    true,
	"EDGEPLANE_RATE_LIMIT":      true,
	"EDGEPLANE_METRICS_LISTEN":  true,
	"EDGEPLANE_BASE_URL":        true,
	"EDGEPLANE_SERVICE_DOMAINS": true,
	"EDGEPLANE_CNAME_ZONE":      true,
	"EDGEPLANE_TCP_ADDR_HOST":   true,
	"EDGEPLANE_TCP_PORT_RANGE":  true,
	// "" turns the data plane, or one public listener, off.
	"EDGEPLANE_AGENT_LISTEN": true,
	"EDGEPLANE_HTTP_LISTEN":  true,
	"EDGEPLANE_HTTPS_LISTEN": true,
	// "" disables managed certificate issuance.
	"EDGEPLANE_ACME_DIRECTORY": true,
}

// env returns the environment variable's value, or def when it is unset, or empty where "" is no
// valid value (see emptyIsValue).
func env(name, def string) string {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" && !emptyIsValue[name] {
		return def
	}
	return v
}

// envInt is env for a number. A value that is not a whole number reads as -1, which the flag's
// check refuses; atLeast then reports the text the variable held.
func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		return -1
	}
	return def
}

// atLeast checks the number v of the int flag name, whose default came from the environment
// variable envName: below low, the error names where the value came from, the command line or
// the variable and the text it held (which may be no number at all).
func atLeast(fs *flag.FlagSet, name, envName string, v, low int) error {
	if v >= low {
		return nil
	}
	if flagGiven(fs, name) {
		return fmt.Errorf("--%s must be at least %d, got %d", name, low, v)
	}
	return fmt.Errorf("%s must be a whole number of at least %d, got %q", envName, low, os.Getenv(envName))
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
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

// newLogger makes the process logger: text (logfmt-like) or JSON lines, written by w. Durations
// are written as Go durations ("15s") in both formats; slog's JSON handler would write
// nanoseconds.
func newLogger(w *serving.LogWriter, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format != "text" && format != "json" {
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	return serving.NewLogger(w, format, lv)
}

// errReported is returned by run when the error has already been written (as a JSON log
// record): main then exits 1 without printing it again.
var errReported = errors.New("error already reported")

// logFormatOf returns the log format serve's arguments and environment ask for, without parsing
// its other flags: the last --log-format given, else EDGEPLANE_LOG_FORMAT, else text.
func logFormatOf(args []string) string {
	format := env("EDGEPLANE_LOG_FORMAT", "text")
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-"), "=")
		if !strings.HasPrefix(args[i], "-") || name != "log-format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		format = value
	}
	return format
}

// serveError writes the error that ended serve as one JSON log record when the log is JSON, so
// that the log holds nothing but JSON lines, and returns it wrapped in errReported (a usage
// mistake keeps its exit status); otherwise it returns err for main to print.
func serveError(stderr io.Writer, args []string, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) || logFormatOf(args) != "json" {
		return err
	}
	rec := slog.NewRecord(time.Now(), slog.LevelError, "edgeplane serve stopped", 0)
	rec.AddAttrs(slog.String("err", err.Error()))
	_ = slog.NewJSONHandler(stderr, nil).Handle(context.Background(), rec)
	return fmt.Errorf("%w: %w", errReported, err)
}
