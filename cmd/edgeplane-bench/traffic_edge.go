package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Names the benchmark serves: the HTTPS edge's host (a reserved domain of the account) and the
// https endpoint's, under edgeplane's default service domain.
const (
	edgeHost     = "bench.example.com"
	endpointHost = "bench.edgeplane.app"
	proxyHost    = "proxy.bench.test"
)

// worldOptions vary the edgeplane worlds of one run: name prefixes the files of a second one,
// serveArgs are added to its serve command, and extra adds the extra rows' edges.
type worldOptions struct {
	name      string
	serveArgs []string
	extra     bool
}

// edgeplaneWorld is a running `edgeplane serve` with its data plane, configured for the traffic
// benchmark, and the agent connected to it.
type edgeplaneWorld struct {
	srv, agent *child
	https      string // the public TLS listener
	ca         *x509.CertPool
	extra      *extraWorld // with -extra: the public HTTP listener and the TCP edge
}

var (
	dataPlaneLine = regexp.MustCompile(`msg="data plane listening" agents=(\S+) http=(\S*) https=(\S*)`)
	tokenSentence = "will not be shown again"
)

// startEdgeplaneWorld starts serve on a new SQLite database with the data plane on ephemeral
// ports, reads its CA and bootstrap API key, creates a credential, a reserved domain, a
// tunnel_group backend and an HTTPS edge with one route to it, starts the agent, and waits until
// both the edge and the https endpoint answer through it.
func (b *trafficRunner) startEdgeplaneWorld(ctx context.Context, upstream string, o worldOptions) (*edgeplaneWorld, error) {
	dsn := filepath.Join(b.work, o.name+"traffic.db")
	logPath := filepath.Join(b.work, "edgeplane-"+o.name+"traffic.log")
	srv, err := startChild("edgeplane", b.cfg.binary, append([]string{"serve", "--listen", "{addr}", "--db", dsn,
		"--agent-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0"}, o.serveArgs...),
		b.serverEnv, logPath)
	if err != nil {
		return nil, err
	}
	w := &edgeplaneWorld{srv: srv}
	fail := func(err error) (*edgeplaneWorld, error) {
		w.stop()
		return nil, err
	}
	var agentAddr, httpAddr, token string
	for deadline := time.Now().Add(30 * time.Second); agentAddr == "" || token == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("serve printed no data plane line or API key:\n%s", tail(logPath, 2000)))
		}
		log, _ := os.ReadFile(logPath)
		if m := dataPlaneLine.FindSubmatch(log); m != nil {
			agentAddr, httpAddr, w.https = string(m[1]), string(m[2]), string(m[3])
		}
		token = bootstrapToken(string(log))
	}
	out, err := exec.CommandContext(ctx, b.cfg.binary, "ca", "--db", dsn).Output()
	if err != nil {
		return fail(fmt.Errorf("edgeplane ca: %w", err))
	}
	w.ca = x509.NewCertPool()
	if !w.ca.AppendCertsFromPEM(out) {
		return fail(errors.New("edgeplane ca printed no certificate"))
	}
	caPath := filepath.Join(b.work, o.name+"edgeplane-ca.pem")
	if err := os.WriteFile(caPath, out, 0o644); err != nil {
		return fail(err)
	}

	api := &apiClient{base: "http://" + srv.addr, token: token}
	var cred struct{ Token string }
	steps := []struct {
		path string
		body any
		out  any
	}{
		{"/credentials", map[string]any{"acl": []string{}, "description": "traffic benchmark"}, &cred},
		{"/reserved_domains", map[string]any{"domain": edgeHost}, nil},
	}
	for _, s := range steps {
		if err := api.create(s.path, s.body, s.out); err != nil {
			return fail(err)
		}
	}
	var group, edge struct{ ID string }
	if err := api.create("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "bench"}}, &group); err != nil {
		return fail(err)
	}
	if err := api.create("/edges/https", map[string]any{"hostports": []string{edgeHost + ":443"}}, &edge); err != nil {
		return fail(err)
	}
	if err := api.create("/edges/https/"+edge.ID+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group.ID}}, nil); err != nil {
		return fail(err)
	}
	agentArgs := []string{"traffic-agent", "--listen", "{addr}", "--server", agentAddr,
		"--ca", caPath, "--upstream", upstream, "--label", "edge=bench", "--domain", endpointHost}
	hosts := []string{edgeHost, endpointHost}
	if o.extra {
		if w.extra, err = setupExtra(api, group.ID, httpAddr); err != nil {
			return fail(err)
		}
		agentArgs = append(agentArgs, "--http-domain", httpEndpointHost)
		hosts = append(hosts, modulesHost)
	}

	w.agent, err = startChild("agent", b.self, agentArgs, []string{"EDGEPLANE_BENCH_AUTHTOKEN=" + cred.Token}, filepath.Join(b.work, o.name+"agent.log"))
	if err != nil {
		return fail(err)
	}
	for _, host := range hosts {
		if err := w.waitServing(ctx, host); err != nil {
			return fail(err)
		}
	}
	return w, nil
}

// waitServing waits until a GET of / on host through the TLS listener answers 200 with the
// upstream's body (the plan holds the edge and the agent's binds are registered).
func (w *edgeplaneWorld) waitServing(ctx context.Context, host string) error {
	cfg := &tls.Config{RootCAs: w.ca, ServerName: host, NextProtos: []string{"http/1.1"}}
	r := request("GET", host, "/", "", nil)
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cl := &tlsClient{client: newClient(w.https), cfg: cfg}
		status, body, err := cl.do(r)
		cl.close()
		if err == nil && status == 200 && bytes.Equal(body, upstreamBody) {
			return nil
		}
		last = fmt.Sprintf("%d %v %.200s", status, err, body)
	}
	return fmt.Errorf("%s is not served through edgeplane within 30 s (last: %s)", host, last)
}

func (w *edgeplaneWorld) stop() {
	if w.agent != nil {
		w.agent.stop()
	}
	if w.srv != nil {
		w.srv.stop()
	}
}

// bootstrapToken returns the API key serve prints for an empty database: the first indented
// line after the sentence that says it will not be shown again.
func bootstrapToken(log string) string {
	i := strings.Index(log, tokenSentence)
	if i < 0 {
		return ""
	}
	for _, line := range strings.Split(log[i:], "\n")[1:] {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			return ""
		}
		return strings.TrimSpace(line)
	}
	return ""
}

// apiClient makes the few API calls that configure the benchmark.
type apiClient struct{ base, token string }

// create POSTs body as JSON to path, wants 201, and decodes the answer into out when not nil.
func (a *apiClient) create(path string, body, out any) error {
	return a.do("POST", path, body, http.StatusCreated, out)
}

// patch sends body as JSON with PATCH to path and wants 200.
func (a *apiClient) patch(path string, body any) error {
	return a.do("PATCH", path, body, http.StatusOK, nil)
}

// do sends body as JSON with method to path, wants the status, and decodes the answer into out
// when not nil.
func (a *apiClient) do(method, path string, body any, want int, out any) error {
	req, err := http.NewRequest(method, a.base+path, jsonBody(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, got)
	}
	if out != nil {
		return json.Unmarshal(got, out)
	}
	return nil
}

// selfSigned writes a self-signed ECDSA P-256 certificate for host and its key into dir (the
// kind of key edgeplane's CA issues), for the TLS listener of the one-hop reference, and returns
// the paths and a pool that trusts it.
func selfSigned(dir, host string) (certPath, keyPath string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certPath, keyPath = filepath.Join(dir, "proxy-cert.pem"), filepath.Join(dir, "proxy-key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	return certPath, keyPath, pool, nil
}
