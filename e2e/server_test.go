// Package e2e holds end-to-end compatibility tests: a real `edgeplane serve` driven by ngrok's
// official TypeScript API client (client_test.go, the suite in this directory's test/), and raw
// HTTP requests shaped like the other official clients' (habits_test.go).
//
// TestMain builds the binary once; every test starts its own server on 127.0.0.1:0 with a SQLite
// database in t.TempDir(), through internal/testproc, which the command-line tests share.
package e2e

import (
	"github.com/edgeplane/edgeplane/internal/testproc"

	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// binPath is the edgeplane binary built by TestMain.
var binPath string

const (
	runTimeout = 60 * time.Second // one short command (apikey create), under load
)

func TestMain(m *testing.M) { testproc.Main(m, "../cmd/edgeplane", &binPath) }

func cleanEnv(extra ...string) []string { return testproc.CleanEnv(extra...) }

// server is a running `edgeplane serve` with the token it printed at its first start.
type server struct {
	addr   string // the address it listens on
	base   string // the configured base URL (what every uri starts with)
	db     string
	token  string
	stderr *testproc.Output
}

// startServer runs `edgeplane serve` on 127.0.0.1:0 with a new SQLite database, plus args, waits
// until it listens and reads the bootstrap token it prints.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{db: filepath.Join(t.TempDir(), "edgeplane.db")}
	p := testproc.Serve(t, binPath, "", nil, append([]string{"--db", s.db, "--listen", "127.0.0.1:0"}, args...)...)
	s.addr, s.stderr = p.Addr, p.Stderr
	s.base = "http://" + s.addr
	for i, a := range args {
		if a == "--base-url" && i+1 < len(args) {
			s.base = strings.TrimRight(args[i+1], "/")
		}
	}
	s.token = bootstrapToken(t, s.stderr.String())
	return s
}

// bootstrapToken returns the token that serve printed on stderr for an empty database.
func bootstrapToken(t *testing.T, stderr string) string {
	t.Helper()
	tok, ok := testproc.BootstrapToken(t, stderr)
	if !ok {
		t.Fatalf("serve on an empty database printed no token; stderr:\n%s", stderr)
	}
	return tok
}

// apikeyCreate runs `edgeplane apikey create --db <the server's db>` with args while the server
// runs and returns the token it prints.
func (s *server) apikeyCreate(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"apikey", "create", "--db", s.db}, args...)...)
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("edgeplane apikey create %q: %v; stderr:\n%s", args, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// response is a decoded API response.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any // nil when the body is empty
}

// do sends an API request to the server's real address with the server's token. body is nil, a
// string sent as is, or a value sent as JSON.
func (s *server) do(t *testing.T, method, path string, body any) response {
	t.Helper()
	return s.doToken(t, s.token, method, path, body)
}

func (s *server) doToken(t *testing.T, token, method, path string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	url := path
	if !strings.HasPrefix(url, "http") {
		url = "http://" + s.addr + path
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Ngrok-Version", "2")
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	out := response{status: res.StatusCode, header: res.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			t.Fatalf("%s %s: response is not a JSON object: %v: %s", method, url, err, raw)
		}
	}
	return out
}

// must asserts the status and returns the response.
func (r response) must(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	return r
}

func (r response) str(key string) string {
	s, _ := r.body[key].(string)
	return s
}
