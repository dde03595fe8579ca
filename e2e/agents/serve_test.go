package agents

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testproc"
	"github.com/edgeplane/edgeplane/pki"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// runFail runs the edgeplane binary with a clean environment and returns its output, failing the
// test unless it exits with an error within 10 seconds.
func runFail(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = testproc.CleanEnv()
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("edgeplane %q: err %v (want a failure, promptly); output:\n%s", args, err, out)
	}
	return string(out)
}

// TestServeDataPlaneFlags: bad data plane configuration stops serve with an error naming the
// flag, before anything is created.
func TestServeDataPlaneFlags(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := []string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--https-listen", ""}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--agent-listen", busy.Addr().String()}, "--agent-listen"},
		{[]string{"--agent-listen", "127.0.0.1:0", "--http-listen", busy.Addr().String()}, "--http-listen"},
		{[]string{"--agent-listen", "127.0.0.1:0", "--agent-tls-cert", "x.pem"}, "--agent-tls-cert and --agent-tls-key go together"},
		{[]string{"--agent-listen", "127.0.0.1:0", "--agent-tls-cert", "x.pem", "--agent-tls-key", "y.pem"}, "--agent-tls-cert/--agent-tls-key"},
	} {
		out := runFail(t, append(append([]string{}, base...), c.args...)...)
		if !strings.Contains(out, c.want) {
			t.Errorf("%q: output does not name %q:\n%s", c.args, c.want, out)
		}
	}
	if out := runFail(t, "ca", "--db", filepath.Join(t.TempDir(), "missing.db")); !strings.Contains(out, "missing.db") {
		t.Errorf("edgeplane ca on a missing database: %s", out)
	}
}

// TestOperatorAgentCertificate: with --agent-tls-cert/--agent-tls-key the agent listener
// presents the operator's certificate, and agents trust the operator's CA instead.
func TestOperatorAgentCertificate(t *testing.T) {
	certPEM, keyPEM, err := pki.NewCA("operator CA")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "agent.pem"), filepath.Join(dir, "agent.key")
	if err := os.WriteFile(certFile, pemChain(leaf.Certificate), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pemKey(t, leaf.PrivateKey), 0o600); err != nil {
		t.Fatal(err)
	}
	w := start(t, "--agent-tls-cert", certFile, "--agent-tls-key", keyFile)
	_, token := w.credential()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// edgeplane's own CA no longer verifies the agent listener...
	if _, err := ngrok.Connect(ctx, ngrok.WithServer(w.agent), ngrok.WithCA(w.ca), ngrok.WithAuthtoken(token)); err == nil {
		t.Errorf("an agent trusting edgeplane's CA connected to a listener with the operator's certificate")
	}
	// ...the operator's does.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	sessCtx, stop := context.WithCancel(context.Background())
	defer stop()
	sess, err := ngrok.Connect(sessCtx, ngrok.WithServer(w.agent), ngrok.WithCA(pool), ngrok.WithAuthtoken(token))
	if err != nil {
		t.Fatalf("connect with the operator's CA: %v", err)
	}
	defer sess.Close()
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("op.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	if st, _, _ := get(t, w.httpClient(), "http://op.edgeplane.app/"); st != 200 {
		t.Errorf("request through the operator-certified listener: %d", st)
	}
}

// TestTCPPortInUse: a reserved address whose port something else holds fails the bind at once,
// with an error naming the port.
func TestTCPPortInUse(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	port := squatter.Addr().(*net.TCPAddr).Port
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", fmt.Sprintf("%d-%d", port, port))
	_, token := w.credential()
	var ra struct{ Addr string }
	if st := w.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
		t.Fatalf("reserve: %d", st)
	}
	sess := w.mustConnect(token)
	start := time.Now()
	_, err = sess.Listen(context.Background(), config.TCPEndpoint(config.WithRemoteAddr(ra.Addr)))
	if got := ngrokCode(err); got != "ERR_NGROK_301" || !strings.Contains(err.Error(), fmt.Sprint(port)) {
		t.Errorf("bind on a port in use: %v (%s)", err, got)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the refused bind took %v", time.Since(start))
	}
	// The random range has no other port: a random bind is refused as well, not hung.
	_, err = sess.Listen(context.Background(), config.TCPEndpoint())
	if got := ngrokCode(err); got != "ERR_NGROK_325" {
		t.Errorf("random bind with no free port: %v (%s)", err, got)
	}
}
