package main

// End-to-end tests of the command line: TestMain builds the real binary once, and every test runs
// it as a subprocess against its own SQLite database in t.TempDir().

import (
	"github.com/edgeplane/edgeplane/internal/testproc"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binPath is the edgeplane binary built by TestMain.
var binPath string

const (
	stopTimeout = testproc.StopTimeout // from a signal until the process has exited
	runTimeout  = 60 * time.Second     // one short command (apikey create, version, …), under load
)

func TestMain(m *testing.M) { testproc.Main(m, ".", &binPath) }

// cleanEnv is the environment without EDGEPLANE_* variables, plus extra.
func cleanEnv(extra ...string) []string { return testproc.CleanEnv(extra...) }

// proc is a running `edgeplane serve`.
type proc struct {
	*testproc.Process
	t  *testing.T
	db string
}

// startServe runs `edgeplane serve args...` with the extra environment and waits until it listens.
// dir, when not empty, is the working directory (so a default edgeplane.db lands in a temp dir).
func startServe(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	return &proc{Process: testproc.Serve(t, binPath, dir, env, args...), t: t}
}

// startServer runs `edgeplane serve --db db --listen 127.0.0.1:0` plus args.
func startServer(t *testing.T, db string, args ...string) *proc {
	t.Helper()
	p := startServe(t, "", nil, append([]string{"--db", db, "--listen", "127.0.0.1:0"}, args...)...)
	p.db = db
	return p
}

func (p *proc) url(path string) string { return "http://" + p.Addr + path }

// signal sends sig and waits for the exit; it returns the exit code.
func (p *proc) signal(sig os.Signal) int {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.Done:
	case <-time.After(stopTimeout):
		p.t.Fatalf("edgeplane serve did not exit within %v of %v; stderr:\n%s", stopTimeout, sig, p.Stderr)
	}
	return exitCode(p.t, p.Err())
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	t.Fatalf("running edgeplane: %v", err)
	return -1
}

var tokenSentence = testproc.TokenSentence

// bootstrapToken returns the token that serve printed on stderr for an empty database, and
// whether it printed one.
func bootstrapToken(t *testing.T, stderr string) (string, bool) {
	t.Helper()
	return testproc.BootstrapToken(t, stderr)
}

// serverToken starts a server on a new database and returns it with its bootstrap token.
func serverToken(t *testing.T) (*proc, string) {
	t.Helper()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"))
	tok, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("serve on an empty database printed no token; stderr:\n%s", p.Stderr)
	}
	return p, tok
}

// runBin runs the binary with args to completion and returns stdout, stderr and the exit code.
func runBin(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv(env...)
	cmd.Dir = t.TempDir() // a default edgeplane.db never lands in the package directory
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("edgeplane %q did not finish within %v; stderr:\n%s", args, runTimeout, errb.String())
	}
	return out.String(), errb.String(), exitCode(t, err)
}

// createKey runs `edgeplane apikey create` with args, requires success and returns the token,
// checking that stdout holds nothing but the token on exactly one line.
func createKey(t *testing.T, env []string, args ...string) string {
	t.Helper()
	stdout, stderr, code := runBin(t, env, append([]string{"apikey", "create"}, args...)...)
	if code != 0 {
		t.Fatalf("apikey create %q: exit %d; stderr:\n%s", args, code, stderr)
	}
	if !strings.HasSuffix(stdout, "\n") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("apikey create stdout is not exactly one line: %q", stdout)
	}
	tok := strings.TrimSuffix(stdout, "\n")
	if tok == "" || strings.TrimSpace(tok) != tok || strings.ContainsAny(tok, " \t\r") {
		t.Fatalf("apikey create stdout is not a bare token: %q", stdout)
	}
	return tok
}

var client = &http.Client{Timeout: 5 * time.Second}

// call sends an API request with the token and version header and returns status and body.
func call(t *testing.T, method, url, token string, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Ngrok-Version", "2")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, b
}

type keyList struct {
	Keys        []map[string]json.RawMessage `json:"keys"`
	URI         string                       `json:"uri"`
	NextPageURI json.RawMessage              `json:"next_page_uri"`
}

// listKeys GETs /api_keys with the token, requires 200 and decodes the list.
func listKeys(t *testing.T, p *proc, token string) keyList {
	t.Helper()
	status, body := call(t, "GET", p.url("/api_keys"), token, "")
	if status != http.StatusOK {
		t.Fatalf("GET /api_keys: status %d, want 200; body %s", status, body)
	}
	var l keyList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("GET /api_keys: decode %s: %v", body, err)
	}
	return l
}

// createIPPolicy POSTs an empty IP policy with the token and returns its id.
func createIPPolicy(t *testing.T, p *proc, token string) string {
	t.Helper()
	status, body := call(t, "POST", p.url("/ip_policies"), token, "{}")
	if status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("POST /ip_policies: status %d; body %s", status, body)
	}
	var doc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.ID == "" {
		t.Fatalf("POST /ip_policies: no id in %s (%v)", body, err)
	}
	return doc.ID
}

// getIPPolicy GETs /ip_policies/{id} and returns the status and, on an error, its error_code.
func getIPPolicy(t *testing.T, p *proc, token, id string) (int, string) {
	t.Helper()
	status, body := call(t, "GET", p.url("/ip_policies/"+id), token, "")
	if status == http.StatusOK {
		return status, ""
	}
	var e struct {
		ErrorCode  string `json:"error_code"`
		StatusCode int    `json:"status_code"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("GET /ip_policies/%s: status %d with a body that is not JSON: %s", id, status, body)
	}
	if e.StatusCode != status {
		t.Errorf("GET /ip_policies/%s: status_code %d in the body, %d on the response", id, e.StatusCode, status)
	}
	return status, e.ErrorCode
}

// --- 1. bootstrap ---------------------------------------------------------------------------

func TestServePrintsBootstrapTokenOnce(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServer(t, db)
	stderr := p.Stderr.String()
	tok, ok := bootstrapToken(t, stderr)
	if !ok {
		t.Fatalf("first start printed no sentence containing %q; stderr:\n%s", tokenSentence, stderr)
	}
	// The exact layout bootstrap() writes: sentence, blank line, token indented by four spaces.
	if want := tokenSentence + "):\n\n    " + tok + "\n\n"; !strings.Contains(stderr, want) {
		t.Errorf("token block is not laid out as %q; stderr:\n%s", want, stderr)
	}

	l := listKeys(t, p, tok)
	if len(l.Keys) != 1 {
		t.Fatalf("GET /api_keys: %d keys, want exactly 1: %+v", len(l.Keys), l.Keys)
	}
	raw, present := l.Keys[0]["token"]
	if !present || string(raw) != "null" {
		t.Errorf(`GET /api_keys: key "token" = %s (present %v), want null`, raw, present)
	}
	if got, want := string(l.Keys[0]["description"]), `"created at first start"`; got != want {
		t.Errorf("bootstrap key description = %s, want %s", got, want)
	}
	if strings.Contains(string(mustJSON(t, l)), tok) {
		t.Errorf("GET /api_keys shows the secret token")
	}
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", code, p.Stderr)
	}

	// Second start on the same, now non-empty, database: no new token, and the old one still works.
	p2 := startServer(t, db)
	stderr2 := p2.Stderr.String()
	if strings.Contains(stderr2, tokenSentence) || strings.Contains(stderr2, tok) {
		t.Errorf("second start printed a token; stderr:\n%s", stderr2)
	}
	if l := listKeys(t, p2, tok); len(l.Keys) != 1 {
		t.Errorf("after restart GET /api_keys: %d keys, want 1", len(l.Keys))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --- 2. health ------------------------------------------------------------------------------

func TestHealthzNeedsNoAuthOrVersion(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"))
	resp, err := client.Get(p.url("/healthz"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: status %d, want 200; body %s", resp.StatusCode, body)
	}
	if got := strings.TrimRight(string(body), "\n"); got != `{"status":"ok"}` {
		t.Errorf("GET /healthz body = %q, want %q", got, `{"status":"ok"}`)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("GET /healthz Content-Type = %q, want application/json", ct)
	}
}

// --- 3. apikey create -----------------------------------------------------------------------

func TestAPIKeyCreateWhileServing(t *testing.T) {
	t.Parallel()
	p, boot := serverToken(t)
	tok := createKey(t, nil, "--db", p.db)
	if tok == boot {
		t.Fatal("apikey create printed the bootstrap token")
	}
	// The new token works right away against the running server, in the same account.
	l := listKeys(t, p, tok)
	if len(l.Keys) != 2 {
		t.Fatalf("GET /api_keys with the new token: %d keys, want 2 (bootstrap + new)", len(l.Keys))
	}
	for _, k := range l.Keys {
		if string(k["token"]) != "null" {
			t.Errorf("listed key %s shows token %s, want null", k["id"], k["token"])
		}
	}
}

func TestAPIKeyCreateOtherAccountIsIsolated(t *testing.T) {
	t.Parallel()
	p, def := serverToken(t)
	other := createKey(t, nil, "--db", p.db, "--account", "other", "--create-account", "--description", "x")

	ol := listKeys(t, p, other)
	if len(ol.Keys) != 1 {
		t.Fatalf("other account lists %d keys, want exactly its own 1", len(ol.Keys))
	}
	if got := string(ol.Keys[0]["description"]); got != `"x"` {
		t.Errorf("other account's key description = %s, want \"x\"", got)
	}
	if dl := listKeys(t, p, def); len(dl.Keys) != 1 {
		t.Errorf("default account lists %d keys, want 1 (the other account's key must not show)", len(dl.Keys))
	}

	defPolicy := createIPPolicy(t, p, def)
	otherPolicy := createIPPolicy(t, p, other)
	for _, c := range []struct {
		name, token, id string
		status          int
		code            string
	}{
		{"default reads its own", def, defPolicy, 200, ""},
		{"other reads its own", other, otherPolicy, 200, ""},
		{"other reads default's", other, defPolicy, 404, "ERR_NGROK_404"},
		{"default reads other's", def, otherPolicy, 404, "ERR_NGROK_404"},
	} {
		status, code := getIPPolicy(t, p, c.token, c.id)
		if status != c.status || code != c.code {
			t.Errorf("%s: GET /ip_policies/%s = %d %q, want %d %q", c.name, c.id, status, code, c.status, c.code)
		}
	}
}

func TestAPIKeyCreateTwiceGivesTwoWorkingTokens(t *testing.T) {
	t.Parallel()
	p, _ := serverToken(t)
	a := createKey(t, nil, "--db", p.db)
	b := createKey(t, nil, "--db", p.db)
	if a == b {
		t.Fatalf("two apikey create runs printed the same token %q", a)
	}
	for _, tok := range []string{a, b} {
		if l := listKeys(t, p, tok); len(l.Keys) != 3 {
			t.Errorf("GET /api_keys: %d keys, want 3 (bootstrap + 2)", len(l.Keys))
		}
	}
}

// --- 4. PostgreSQL --------------------------------------------------------------------------

// closingServer accepts TCP connections and closes them at once: a PostgreSQL address that
// certainly fails, whatever runs on the machine's port 5432.
func closingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// An unusable PostgreSQL DSN makes serve and apikey create fail with a message that names
// PostgreSQL, without printing anything on stdout or leaking the password.
func TestPostgresDSNFailsWithMessage(t *testing.T) {
	t.Parallel()
	const literal = "postgres://x@127.0.0.1/db"
	closing := "postgres://x:s3cretpw@" + closingServer(t) + "/db"
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"serve", nil, []string{"serve", "--db", literal, "--listen", "127.0.0.1:0"}},
		{"serve postgresql scheme", nil, []string{"serve", "--db", "postgresql://x@127.0.0.1/db", "--listen", "127.0.0.1:0"}},
		{"serve closing server", nil, []string{"serve", "--db", closing, "--listen", "127.0.0.1:0"}},
		{"serve from env", []string{"EDGEPLANE_DB=" + literal, "EDGEPLANE_LISTEN=127.0.0.1:0"}, []string{"serve"}},
		{"apikey create", nil, []string{"apikey", "create", "--db", literal}},
		{"apikey create closing server", nil, []string{"apikey", "create", "--db", closing}},
		{"apikey create from env", []string{"EDGEPLANE_DB=" + literal}, []string{"apikey", "create"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runBin(t, c.env, c.args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stdout %q stderr %q", stdout, stderr)
			}
			if !strings.Contains(stderr, "PostgreSQL") {
				t.Errorf("stderr does not mention PostgreSQL: %q", stderr)
			}
			if strings.Contains(stderr, "s3cretpw") {
				t.Errorf("stderr shows the DSN's password: %q", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want empty", stdout)
			}
		})
	}
}

// --- 5. environment variables ---------------------------------------------------------------

func TestEnvironmentConfiguresServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "from-env.db")
	p := startServe(t, dir, []string{
		"EDGEPLANE_LISTEN=127.0.0.1:0",
		"EDGEPLANE_DB=" + db,
		"EDGEPLANE_BASE_URL=https://api.example.test/prefix",
	})
	p.db = db
	if _, err := os.Stat(db); err != nil {
		t.Errorf("EDGEPLANE_DB was not used: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "edgeplane.db")); err == nil {
		t.Errorf("the default database edgeplane.db was created although EDGEPLANE_DB was set")
	}
	// Port 0 gets an ephemeral port from the kernel, never serve's default 127.0.0.1:8080.
	if !strings.HasPrefix(p.Addr, "127.0.0.1:") || strings.HasSuffix(p.Addr, ":0") || p.Addr == "127.0.0.1:8080" {
		t.Errorf("EDGEPLANE_LISTEN=127.0.0.1:0 was not used: listening on %q", p.Addr)
	}
	tok, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	if got, want := listKeys(t, p, tok).URI, "https://api.example.test/prefix/api_keys"; got != want {
		t.Errorf("uri = %q, want %q (from EDGEPLANE_BASE_URL)", got, want)
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	envDB, flagDB := filepath.Join(dir, "env.db"), filepath.Join(dir, "flag.db")
	p := startServe(t, dir, []string{
		// Unusable if it were used: the flag must win.
		"EDGEPLANE_LISTEN=not-an-address",
		"EDGEPLANE_DB=" + envDB,
		"EDGEPLANE_BASE_URL=https://env.example.test/env",
	}, "--listen", "127.0.0.1:0", "--db", flagDB, "--base-url", "https://flag.example.test/flag")
	p.db = flagDB
	if _, err := os.Stat(flagDB); err != nil {
		t.Errorf("--db was not used: %v", err)
	}
	if _, err := os.Stat(envDB); err == nil {
		t.Errorf("EDGEPLANE_DB was used although --db was given")
	}
	tok, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	if got, want := listKeys(t, p, tok).URI, "https://flag.example.test/flag/api_keys"; got != want {
		t.Errorf("uri = %q, want %q (from --base-url)", got, want)
	}
}

func TestDefaultBaseURLIsListenAddress(t *testing.T) {
	t.Parallel()
	p, tok := serverToken(t)
	if got, want := listKeys(t, p, tok).URI, "http://"+p.Addr+"/api_keys"; got != want {
		t.Errorf("uri = %q, want %q", got, want)
	}
}

func TestBaseURLTrailingSlashIsTrimmed(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--base-url", "https://api.example.test/prefix/")
	tok, _ := bootstrapToken(t, p.Stderr.String())
	if got, want := listKeys(t, p, tok).URI, "https://api.example.test/prefix/api_keys"; got != want {
		t.Errorf("uri = %q, want %q", got, want)
	}
}

func TestEnvironmentConfiguresAPIKeyCreate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	envDB, flagDB := filepath.Join(dir, "env.db"), filepath.Join(dir, "flag.db")

	// EDGEPLANE_DB alone: the key lands in that database (apikey create makes none).
	p := startServer(t, envDB)
	tok := createKey(t, []string{"EDGEPLANE_DB=" + envDB})
	if l := listKeys(t, p, tok); len(l.Keys) != 2 {
		t.Errorf("GET /api_keys: %d keys, want 2 (bootstrap + apikey create)", len(l.Keys))
	}

	// --db wins over EDGEPLANE_DB.
	newDatabase(t, flagDB)
	otherDB := filepath.Join(t.TempDir(), "env.db")
	newDatabase(t, otherDB)
	flagTok := createKey(t, []string{"EDGEPLANE_DB=" + otherDB}, "--db", flagDB, "--create-account")
	q := startServer(t, flagDB)
	if l := listKeys(t, q, flagTok); len(l.Keys) != 1 {
		t.Errorf("--db was not used by apikey create: %d keys", len(l.Keys))
	}
	r := startServer(t, otherDB)
	if status, _ := call(t, "GET", r.url("/api_keys"), flagTok, ""); status != http.StatusUnauthorized {
		t.Errorf("EDGEPLANE_DB was used by apikey create although --db was given: status %d", status)
	}
}

// --- 6. invalid base URL --------------------------------------------------------------------

func TestInvalidBaseURLIsRejected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
		args []string
		bad  string
	}{
		{"not a url", nil, []string{"--base-url", "not a url"}, "not a url"},
		{"relative path", nil, []string{"--base-url", "/prefix"}, "/prefix"},
		{"ftp scheme", nil, []string{"--base-url", "ftp://example.test"}, "ftp://example.test"},
		{"no host", nil, []string{"--base-url", "http://"}, "http://"},
		{"from env", []string{"EDGEPLANE_BASE_URL=not a url"}, nil, "not a url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "edgeplane.db")
			args := append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, c.args...)
			stdout, stderr, code := runBin(t, c.env, args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stderr:\n%s", stderr)
			}
			want := fmt.Sprintf("--base-url %q must be an absolute http:// or https:// URL", c.bad)
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not contain %q:\n%s", want, stderr)
			}
			if strings.Contains(stderr, "edgeplane listening") {
				t.Errorf("server reported listening despite the invalid base URL:\n%s", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want empty", stdout)
			}
		})
	}
}

// --- 7. signals -----------------------------------------------------------------------------

func TestSignalsShutDownCleanly(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM/SIGINT delivery to a child process on Windows")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			p, tok := serverToken(t)
			listKeys(t, p, tok) // the server has served a request and touched the database
			if code := p.signal(sig); code != 0 {
				t.Fatalf("exit code %d after %v, want 0; stderr:\n%s", code, sig, p.Stderr)
			}
			stderr := p.Stderr.String()
			for _, msg := range []string{`msg="shutting down: finishing requests in flight"`, "msg=stopped"} {
				if !strings.Contains(stderr, msg) {
					t.Errorf("stderr lacks %s:\n%s", msg, stderr)
				}
			}
			if strings.Contains(stderr, "edgeplane: shutdown:") {
				t.Errorf("shutdown reported an error:\n%s", stderr)
			}
			// The database was closed cleanly: SQLite removes the WAL file when the last
			// connection closes, and the database opens again for another command.
			if _, err := os.Stat(p.db + "-wal"); err == nil {
				t.Errorf("%s-wal still exists after the server stopped: the database was not closed", p.db)
			}
			newTok := createKey(t, nil, "--db", p.db)
			if newTok == tok {
				t.Errorf("apikey create after shutdown printed the bootstrap token")
			}
		})
	}
}

// --- 8. version and usage -------------------------------------------------------------------

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		stdout, stderr, code := runBin(t, nil, arg)
		if code != 0 {
			t.Fatalf("%s: exit %d; stderr %q", arg, code, stderr)
		}
		if !strings.HasPrefix(stdout, "edgeplane ") || strings.Count(stdout, "\n") != 1 || !strings.HasSuffix(stdout, "\n") {
			t.Errorf("%s: stdout = %q, want one line starting with \"edgeplane \"", arg, stdout)
		}
		if v := strings.TrimSpace(strings.TrimPrefix(stdout, "edgeplane ")); v == "" {
			t.Errorf("%s: no version after the name in %q", arg, stdout)
		}
	}
}

func TestUnknownCommandPrintsUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"no command", nil, "usage:"},
		{"apikey without create", []string{"apikey"}, "usage:"},
		{"apikey unknown subcommand", []string{"apikey", "delete"}, "usage:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runBin(t, nil, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (a usage mistake); stdout %q", code, stdout)
			}
			for _, want := range []string{c.want, "usage:", "edgeplane serve", "edgeplane apikey create", "edgeplane version"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want empty", stdout)
			}
		})
	}
}
