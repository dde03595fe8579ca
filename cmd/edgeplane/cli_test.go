package main

// What a newcomer runs into on the command line: help, usage, the environment,
// mistyped database paths and the JSON log.

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/edgeplane/edgeplane/store"
)

// runIn runs the binary in dir with the clean environment plus env and stdin, and returns stdout,
// stderr and the exit code.
func runIn(t *testing.T, dir string, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv(env...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("edgeplane %q did not finish within %v", args, runTimeout)
	}
	return out.String(), errb.String(), exitCode(t, err)
}

// dirEntries lists the names in dir.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// newDatabase creates a migrated, empty SQLite database at path, as serve would.
func newDatabase(t *testing.T, path string) {
	t.Helper()
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// Every command but serve works on an existing database: a mistyped --db (or EDGEPLANE_DB) is
// refused with a message naming the path, and nothing is created, neither a database nor a key
// file. import creates a new database only when --db or EDGEPLANE_DB names it.
func TestCommandsRefuseMissingDatabase(t *testing.T) {
	t.Parallel()
	const stdin = "{}" // import must fail before it reads a backup
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"apikey create", nil, []string{"apikey", "create", "--db", "typo.db"}},
		{"apikey create from env", []string{"EDGEPLANE_DB=typo.db"}, []string{"apikey", "create"}},
		{"apikey create sqlite:", nil, []string{"apikey", "create", "--db", "sqlite:typo.db"}},
		{"export", nil, []string{"export", "--db", "typo.db"}},
		{"secrets rotate", []string{"EDGEPLANE_SECRET_KEY=" + store.NewSecretKey()}, []string{"secrets", "rotate", "--db", "typo.db"}},
		{"secrets rotate with a key file", nil, []string{"secrets", "rotate", "--db", "typo.db"}},
		{"import into the default path", nil, []string{"import"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			stdout, stderr, code := runIn(t, dir, c.env, stdin, c.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stdout %q stderr %q", code, stdout, stderr)
			}
			if !strings.Contains(stderr, "no such database") || !strings.Contains(stderr, ".db") {
				t.Errorf("stderr does not say which database is missing: %q", stderr)
			}
			if c.args[0] == "import" && !strings.Contains(stderr, "--db") {
				t.Errorf("import does not say how to restore into a new database: %q", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want empty", stdout)
			}
			if names := dirEntries(t, dir); len(names) != 0 {
				t.Errorf("a refused command left %q behind", names)
			}
		})
	}

	// Named explicitly, a new database is what import restores into.
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	newDatabase(t, src)
	backup, stderr, code := runBin(t, nil, "export", "--db", src)
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{{nil, []string{"import", "--db", "new.db"}}, {[]string{"EDGEPLANE_DB=new.db"}, []string{"import"}}} {
		dir := t.TempDir()
		if _, stderr, code := runIn(t, dir, c.env, backup, c.args...); code != 0 {
			t.Fatalf("%v %q: exit %d: %s", c.env, c.args, code, stderr)
		}
		if names := dirEntries(t, dir); !slices.Contains(names, "new.db") || !slices.Contains(names, "new.db.key") {
			t.Errorf("%v %q: the new database is not there: %q", c.env, c.args, names)
		}
	}
}

// A database path whose directory does not exist is reported as such by every command, not as
// an error about a temporary key file, and nothing is created.
func TestMissingDatabaseDirectory(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0"},
		{"apikey", "create"},
		{"export"},
		{"import"},
		{"secrets", "rotate"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			missing := filepath.Join(dir, "nodir")
			stdout, stderr, code := runIn(t, dir, nil, "", append(args, "--db", filepath.Join(missing, "edgeplane.db"))...)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stdout %q stderr %q", code, stdout, stderr)
			}
			if !strings.Contains(stderr, "the directory "+missing+" of the database") || !strings.Contains(stderr, "does not exist") {
				t.Errorf("stderr does not name the missing directory: %q", stderr)
			}
			if strings.Contains(stderr, "key file") || strings.Contains(stderr, ".edgeplane-key") {
				t.Errorf("stderr speaks of a key file: %q", stderr)
			}
			if names := dirEntries(t, dir); len(names) != 0 {
				t.Errorf("left %q behind", names)
			}
		})
	}
}

// apikey create on a database that serve never created is refused (it used to create one).
func TestAPIKeyCreateOnNeverServedDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, nil, "apikey", "create", "--db", filepath.Join(dir, "fresh.db"))
	if code != 1 || stdout != "" || !strings.Contains(stderr, "fresh.db: no such database") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Fatalf("left %q behind", names)
	}
}

// An empty environment variable means what the flag's empty value means where "" is a value:
// EDGEPLANE_CORS_ORIGINS="" allows no origin, as --cors-origins "" does. Where "" is no value,
// it still means unset: EDGEPLANE_DB="" is the default database.
func TestEmptyEnvironmentValue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir, []string{"EDGEPLANE_CORS_ORIGINS=", "EDGEPLANE_DB=", "EDGEPLANE_RATE_LIMIT=",
		"EDGEPLANE_LISTEN=127.0.0.1:0", "EDGEPLANE_METRICS_LISTEN="})
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no token; stderr:\n%s", p.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "edgeplane.db")); err != nil {
		t.Errorf("EDGEPLANE_DB=\"\" did not mean the default database: %v", err)
	}
	req, _ := http.NewRequest("GET", p.url("/ip_policies"), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("Origin", "https://evil.example")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("EDGEPLANE_CORS_ORIGINS=\"\": Access-Control-Allow-Origin %q, want none", got)
	}
	// /metrics stays on the main listener: EDGEPLANE_METRICS_LISTEN="" is --metrics-listen "".
	if res, err := client.Get(p.url("/metrics")); err != nil || res.StatusCode != 200 {
		t.Errorf("/metrics on the main listener: %v %v", err, res)
	} else {
		res.Body.Close()
	}
}

// A number setting that is not a number says what it was given, and where.
func TestNumberSettingsNameTheirValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"EDGEPLANE_MAX_CONNECTIONS=lots"}, nil, `EDGEPLANE_MAX_CONNECTIONS must be a whole number of at least 1, got "lots"`},
		{[]string{"EDGEPLANE_MAX_CONNECTIONS=0"}, nil, `EDGEPLANE_MAX_CONNECTIONS must be a whole number of at least 1, got "0"`},
		{[]string{"EDGEPLANE_DB_MAX_CONNS=16x"}, nil, `EDGEPLANE_DB_MAX_CONNS must be a whole number of at least 1, got "16x"`},
		{[]string{"EDGEPLANE_MAX_CONNECTIONS=lots"}, []string{"--max-connections", "0"}, "--max-connections must be at least 1, got 0"},
		{nil, []string{"--max-connections", "lots"}, `invalid value "lots" for flag -max-connections`},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db")}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		want := 1
		if c.env == nil { // a value the flag cannot parse is a mistake in the command line
			want = 2
		}
		if code != want || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %q: exit %d, stderr %q, want exit %d and %q", c.env, c.args, code, stderr, want, c.want)
		}
		if strings.Contains(stderr, "got -1") {
			t.Errorf("%v %q: stderr speaks of -1: %q", c.env, c.args, stderr)
		}
	}
}

// Help is asked for, so it exits 0 and goes to stdout, for every command and subcommand; a
// mistake goes to stderr, in two lines (the error and where the help is), and exits 2.
func TestHelpOnStdout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "edgeplane serve"},
		{[]string{"--help"}, "edgeplane serve"},
		{[]string{"-h"}, "edgeplane serve"},
		{[]string{"serve", "-h"}, "-cors-origins"},
		{[]string{"serve", "--help"}, "-cors-origins"},
		{[]string{"apikey", "-h"}, "edgeplane apikey create"},
		{[]string{"apikey", "create", "-h"}, "-account"},
		{[]string{"secrets", "-h"}, "edgeplane secrets"},
		{[]string{"secrets", "new-key", "-h"}, "edgeplane secrets new-key"},
		{[]string{"secrets", "rotate", "-h"}, "-db"},
		{[]string{"export", "-h"}, "-db"},
		{[]string{"import", "-h"}, "-db"},
	} {
		stdout, stderr, code := runBin(t, nil, c.args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, c.want) || !strings.Contains(stdout, "usage") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and %q on stdout only", c.args, code, stdout, stderr, c.want)
		}
	}
	for _, args := range [][]string{{"serve", "--nope"}, {"export", "--db"}, {"apikey", "create", "-x"}} {
		stdout, stderr, code := runBin(t, nil, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "flag") || !strings.Contains(stderr, "-h' for") || strings.Count(stderr, "\n") != 2 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and the error and where the help is on stderr", args, code, stdout, stderr)
		}
	}
}

// Every flag the usage text shows for a command is a flag of that command.
func TestUsageShowsOnlyRealFlags(t *testing.T) {
	t.Parallel()
	text, _, code := runBin(t, nil, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	checked := 0
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "edgeplane" {
			continue
		}
		var cmd []string
		for _, f := range fields[1:] {
			if f == "|" { // "secrets new-key | rotate [--db DSN]": the flags are rotate's
				cmd = cmd[:len(cmd)-1]
				continue
			}
			if strings.ContainsAny(f[:1], "[<>") {
				break
			}
			cmd = append(cmd, f)
		}
		var flags []string
		for _, f := range fields {
			if name, ok := strings.CutPrefix(strings.TrimLeft(f, "["), "--"); ok {
				flags = append(flags, strings.TrimRight(name, "]"))
			}
		}
		if len(flags) == 0 {
			continue
		}
		help, _, code := runBin(t, nil, append(cmd, "-h")...)
		if code != 0 {
			t.Errorf("%q -h: exit %d", cmd, code)
			continue
		}
		for _, f := range flags {
			checked++
			if !strings.Contains(help, "  -"+f+" ") && !strings.Contains(help, "  -"+f+"\n") {
				t.Errorf("usage shows %q for edgeplane %s, which has no such flag:\n%s", "--"+f, strings.Join(cmd, " "), help)
			}
		}
	}
	if checked < 8 {
		t.Fatalf("checked only %d flags: does the usage text still look like this test expects?\n%s", checked, text)
	}
}

// With --log-format json every line serve writes on stderr is a JSON object: the first API
// key's token is a field of one record (and works), and durations are Go durations ("15s"), not
// nanoseconds.
func TestJSONLogIsOnlyJSON(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--log-format", "json")
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no token; stderr:\n%s", p.Stderr)
	}
	createIPPolicy(t, p, token)
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var sawToken, sawTimeout bool
	for _, line := range strings.Split(strings.TrimSpace(p.Stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		if rec["token"] == token {
			sawToken = true
			if rec["level"] != "WARN" || !strings.Contains(rec["msg"].(string), "will not be shown again") {
				t.Errorf("token record: %s", line)
			}
		}
		if v, ok := rec["timeout"]; ok {
			sawTimeout = true
			if v != "15s" {
				t.Errorf("timeout logged as %v, want \"15s\": %s", v, line)
			}
		}
	}
	if !sawToken || !sawTimeout {
		t.Errorf("token record %v, shutdown timeout %v; stderr:\n%s", sawToken, sawTimeout, p.Stderr)
	}
}

// With JSON logs, the error that stops serve is a JSON record too (level ERROR, the error in
// err), not a plain "edgeplane: …" line after the JSON ones; the exit status is still 1.
func TestJSONLogServeErrorIsJSON(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	busy := ln.Addr().String()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--log-format", "json", "--listen", busy}, "address already in use"},
		{nil, []string{"--log-format=json", "--listen", "127.0.0.1:0", "--max-connections", "0"}, "--max-connections must be at least 1"},
		{[]string{"EDGEPLANE_LOG_FORMAT=json"}, []string{"--listen", "127.0.0.1:0", "--rate-limit", "fast"}, "--rate-limit"},
	} {
		args := append([]string{"serve", "--db", filepath.Join(t.TempDir(), "x.db")}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		if code != 1 {
			t.Errorf("%q: exit %d, want 1: %s", c.args, code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%q: not a JSON log line: %q", c.args, line)
			}
		}
		var last map[string]any
		_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
		if msg, _ := last["err"].(string); last["level"] != "ERROR" || !strings.Contains(msg, c.want) {
			t.Errorf("%q: last line %q, want an ERROR record whose err holds %q", c.args, lines[len(lines)-1], c.want)
		}
	}
}
