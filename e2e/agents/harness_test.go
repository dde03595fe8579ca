// Package agents tests edgeplane's data plane end to end: a real `edgeplane serve` with its
// agent, HTTP and TLS listeners, ngrok's own Go SDK as the agent, and real public clients.
package agents

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"github.com/edgeplane/edgeplane/internal/testproc"
	"golang.ngrok.com/ngrok"
)

var binPath string

func TestMain(m *testing.M) { testproc.Main(m, "../../cmd/edgeplane", &binPath) }

// world is one running edgeplane with its data plane on ephemeral ports.
type world struct {
	t                       *testing.T
	proc                    *testproc.Process
	db                      string
	api, agent, http, https string
	token                   string // the bootstrap API key
	ca                      *x509.CertPool
	caPEM                   []byte
	extraArgs               []string
	env                     []string // extra environment of the server and its commands
}

var dataPlaneRE = regexp.MustCompile(`msg="data plane listening" agents=(\S+) http=(\S*) https=(\S*)`)

// start runs edgeplane serve on a new SQLite database with the data plane on, and reads its CA.
func start(t *testing.T, args ...string) *world {
	t.Helper()
	return startOn(t, filepath.Join(t.TempDir(), "edgeplane.db"), nil, "", args...)
}

// startOn runs edgeplane serve on the database dsn with extra environment; token is the API key
// to use when the database is not new (a second replica), "" to read the bootstrap key.
func startOn(t *testing.T, dsn string, env []string, token string, args ...string) *world {
	t.Helper()
	w := &world{t: t, db: dsn, extraArgs: args, env: env}
	w.run()
	if token == "" {
		tok, ok := testproc.BootstrapToken(t, w.proc.Stderr.String())
		if !ok {
			t.Fatalf("no bootstrap token; stderr:\n%s", w.proc.Stderr)
		}
		token = tok
	}
	w.token = token
	cmd := exec.Command(binPath, "ca", "--db", w.db)
	cmd.Env = testproc.CleanEnv(env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("edgeplane ca: %v", err)
	}
	w.caPEM = out
	w.ca = x509.NewCertPool()
	if !w.ca.AppendCertsFromPEM(out) {
		t.Fatalf("edgeplane ca printed no certificate: %q", out)
	}
	return w
}

// run starts (or restarts) the server on the same database, with the agent listener on the same
// port after a restart so agents reconnect to it.
func (w *world) run() {
	agentAddr := "127.0.0.1:0"
	if w.agent != "" {
		agentAddr = w.agent
	}
	args := append([]string{"--db", w.db, "--listen", "127.0.0.1:0", "--agent-listen", agentAddr,
		"--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0", "--log-level", "debug"}, w.extraArgs...)
	w.proc = w.serve(agentAddr != "127.0.0.1:0", args)
	w.api = "http://" + w.proc.Addr
	deadline := time.Now().Add(testproc.StartTimeout)
	for {
		if m := dataPlaneRE.FindStringSubmatch(w.proc.Stderr.String()); m != nil {
			w.agent, w.http, w.https = m[1], m[2], m[3]
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no data plane listening line; stderr:\n%s", w.proc.Stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve starts the server. On a restart (again, on the agent port of before) it tries again
// for a few seconds while that port is in use: the agents reconnecting to a port nothing listens
// on make connections from the ephemeral range, which includes it, and the kernel may give one
// of them that very port as its source (a TCP self-connect), holding it until the connection
// fails its handshake with itself.
func (w *world) serve(again bool, args []string) *testproc.Process {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p, err := testproc.TryServe(w.t, binPath, "", w.env, args...)
		if err == nil {
			return p
		}
		if !again || !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			w.t.Fatal(err)
		}
		w.t.Logf("restart: the agent port is taken for now, trying again: %v", err)
	}
}

// stop ends the server process.
func (w *world) stop() {
	_ = w.proc.Cmd.Process.Kill()
	<-w.proc.Done
}

// call makes an API request and decodes the JSON answer into out (when not nil); it returns the
// status.
func (w *world) call(method, path string, body any, out any) int {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, w.api+path, rd)
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Ngrok-Version", "2")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			w.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// credential makes a credential with the ACL and returns its id and token.
func (w *world) credential(acl ...string) (id, token string) {
	w.t.Helper()
	var cr struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if acl == nil {
		acl = []string{}
	}
	if st := w.call("POST", "/credentials", map[string]any{"acl": acl}, &cr); st != 201 {
		w.t.Fatalf("create credential: %d", st)
	}
	return cr.ID, cr.Token
}

// reserveDomain reserves a domain and returns its id.
func (w *world) reserveDomain(name string) string {
	w.t.Helper()
	var d struct{ ID string }
	if st := w.call("POST", "/reserved_domains", map[string]any{"domain": name}, &d); st != 201 {
		w.t.Fatalf("reserve %s: %d", name, st)
	}
	return d.ID
}

// connect opens an agent session with the token.
func (w *world) connect(ctx context.Context, token string, opts ...ngrok.ConnectOption) (ngrok.Session, error) {
	base := []ngrok.ConnectOption{ngrok.WithServer(w.agent), ngrok.WithCA(w.ca), ngrok.WithAuthtoken(token)}
	return ngrok.Connect(ctx, append(base, opts...)...)
}

// mustConnect is connect that fails the test on error and closes the session at the end.
func (w *world) mustConnect(token string, opts ...ngrok.ConnectOption) ngrok.Session {
	w.t.Helper()
	// The context of Connect is the session's lifetime (ngrok-go closes the session when it ends).
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := w.connect(ctx, token, opts...)
	if err != nil {
		cancel()
		w.t.Fatalf("connect: %v", err)
	}
	w.t.Cleanup(func() { sess.Close(); cancel() })
	return sess
}

// serveTunnel answers every request on the tunnel with handler.
func serveTunnel(t *testing.T, tun net.Listener, handler http.Handler) {
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(acceptguard.Listener{Listener: tun}) }()
	t.Cleanup(func() { srv.Close() })
}

// httpClient is a public client of the HTTP listener: every request goes to it, whatever the
// URL's host (which becomes the Host header).
func (w *world) httpClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, w.http)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// httpsClient is a public client of the TLS listener trusting edgeplane's CA.
func (w *world) httpsClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, w.https)
			},
			TLSClientConfig:   &tls.Config{RootCAs: w.ca},
			ForceAttemptHTTP2: true,
		},
	}
}

// get makes a GET and returns the status, the body and the headers.
func get(t *testing.T, c *http.Client, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// tryGet is get that returns the error instead of failing the test. Conditions of eventually
// use it: a name created through the API reaches the plan after the API answered, and until then
// its handshake or connection can fail, which is a reason to wait, not to fail.
func tryGet(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// ngrokCode returns the ERR_NGROK code of an agent error, or the error text when it has none.
func ngrokCode(err error) string {
	if err == nil {
		return "<nil>"
	}
	var ne ngrok.Error
	if errorsAs(err, &ne) && ne.ErrorCode() != "" {
		return ne.ErrorCode()
	}
	if m := regexp.MustCompile(`ERR_NGROK_\d+`).FindString(err.Error()); m != "" {
		return m
	}
	return strings.TrimSpace(err.Error())
}

// eventually polls cond every 20 ms until it holds, and returns how long it took. expected is
// how soon it should hold on a quiet machine; the test waits up to eventuallyFloor at least,
// because CI runs every package at once on two shared cores and a loaded machine delays a
// plan swap or a handshake by seconds. Latency is measured by the traffic benchmark, not here:
// callers log what took longer than expected instead of failing on it.
func eventually(t *testing.T, expected time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	budget := max(expected, eventuallyFloor)
	start := time.Now()
	for !cond() {
		if time.Since(start) > budget {
			t.Fatalf("%s: not within %v", what, budget)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	if took > expected {
		t.Logf("%s took %v, expected within %v", what, took, expected)
	}
	return took
}

// eventuallyFloor is the least time eventually waits before failing.
const eventuallyFloor = 20 * time.Second
