// Package pebbletest runs a real ACME server for the managed certificate tests: Debian's pebble
// package, started on 127.0.0.1 with its test DNS server (pebble-challtestsrv), which answers
// every name with 127.0.0.1, so the challenges of any name reach the challenge server under test
// (the edgeplane binary in cmd/edgeplane, a test's own listeners in certmgr). For DNS-01, a
// resolver follows the test DNS server's CNAME records into edgeplane's own DNS server. Pebble's validation
// authority connects to the ports its configuration names. The certmgr and cmd/edgeplane tests
// share it so that both start Pebble the same way; a test skips, saying why, where Pebble is not
// installed.
package pebbletest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Pebble is a running Pebble with its DNS server.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// RootsFile is a PEM file of the CA of Pebble's HTTPS, for --acme-ca-roots.
	RootsFile string
	// Roots is the same CA as a pool, for an ACME client in the test's process.
	Roots *x509.CertPool
	// dnsAdmin is the base URL of pebble-challtestsrv's management interface.
	dnsAdmin string
}

// Options configure a Pebble.
type Options struct {
	// HTTPPort and TLSPort are where the validation authority connects for HTTP-01 and
	// TLS-ALPN-01.
	HTTPPort, TLSPort int
	// Validity is the lifetime of the certificates it issues; 0 for Pebble's default.
	Validity time.Duration
	// VASleep bounds the random delay before each validation (whole seconds); 0 for none.
	VASleep time.Duration
	// Blocklist are names Pebble refuses to issue for (rejectedIdentifier on a new order).
	Blocklist []string
	// Zone and ZoneServer, when set, put a resolver between Pebble and its test DNS server that
	// follows a CNAME into Zone by asking ZoneServer (the address of edgeplane's DNS server,
	// UDP), as the recursive resolver of a real ACME server follows the zone's delegation; see
	// resolver.go.
	Zone, ZoneServer string
}

// handed are the ports FreePort has handed out in this test process.
var handed = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago, for the servers whose
// ports must be known before they start (Pebble validates challenges on fixed ports). It picks
// at random below Linux's ephemeral range (32768-60999), which outbound connections draw from:
// a port the kernel hands out for ":0" can be taken by any test's outgoing connection before
// the server binds it, and parallel tests make hundreds of those.
//
// A port is handed out once per test process: the probe's listener is closed before the server
// binds, so two draws in a row (Start takes four) could otherwise name the same free port, and
// Pebble then found its DNS server on its own port.
func FreePort(t testing.TB) int {
	t.Helper()
	handed.mu.Lock()
	defer handed.mu.Unlock()
	for range 100 {
		port := 20000 + mrand.IntN(12000)
		if handed.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ln.Close()
		handed.ports[port] = true
		return port
	}
	t.Fatal("no free port in 20000-31999 after 100 tries")
	return 0
}

// Start starts Pebble and its DNS server for the test, stopping them when it ends, or skips the
// test, saying why, where the pebble package is not installed.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		t.Skip("pebble is not installed (Debian: apt-get install pebble); the ACME tests need it")
	}
	dnsBin, err := exec.LookPath("pebble-challtestsrv")
	if err != nil {
		t.Skip("pebble-challtestsrv is not installed (Debian package pebble); the ACME tests need it")
	}
	dir := t.TempDir()
	certFile, keyFile := writeServerCert(t, dir)
	dnsPort, dnsAdminPort, acmePort, mgmtPort := FreePort(t), FreePort(t), FreePort(t), FreePort(t)
	dnsAddr := "127.0.0.1:" + strconv.Itoa(dnsPort)
	startBackground(t, exec.Command(dnsBin, "-dns01", dnsAddr, "-management", "127.0.0.1:"+strconv.Itoa(dnsAdminPort),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""), nil)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":             "127.0.0.1:" + strconv.Itoa(acmePort),
		"managementListenAddress":   "127.0.0.1:" + strconv.Itoa(mgmtPort),
		"certificate":               certFile,
		"privateKey":                keyFile,
		"httpPort":                  o.HTTPPort,
		"tlsPort":                   o.TLSPort,
		"ocspResponderURL":          "",
		"certificateValidityPeriod": int(o.Validity / time.Second),
		"domainBlocklist":           o.Blocklist,
	}}
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, mustJSON(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0"}
	if o.VASleep > 0 {
		env = append(env, "PEBBLE_VA_SLEEPTIME="+strconv.Itoa(int(o.VASleep/time.Second)))
	} else {
		env = append(env, "PEBBLE_VA_NOSLEEP=1")
	}
	resolverAddr := dnsAddr
	if o.ZoneServer != "" {
		resolverAddr = startResolver(t, dnsAddr, o.Zone, o.ZoneServer)
	}
	startBackground(t, exec.Command(bin, "-config", cfgFile, "-dnsserver", resolverAddr), env)
	pool := x509.NewCertPool()
	pemBytes, err := os.ReadFile(certFile)
	if err != nil || !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("pebble's certificate %s: %v", certFile, err)
	}
	p := &Pebble{Directory: fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort), RootsFile: certFile, Roots: pool,
		dnsAdmin: "http://127.0.0.1:" + strconv.Itoa(dnsAdminPort)}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(p.Directory)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not answer %s: %v", p.Directory, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

// SetA makes the test DNS server answer host with addr only; "" returns host to the default
// answer, 127.0.0.1.
func (p *Pebble) SetA(t testing.TB, host, addr string) {
	t.Helper()
	p.dnsAdminCall(t, "/clear-a", map[string]any{"host": host})
	if addr != "" {
		p.dnsAdminCall(t, "/add-a", map[string]any{"host": host, "addresses": []string{addr}})
	}
}

// SetCNAME makes the test DNS server answer host with a CNAME record to target; "" removes it.
func (p *Pebble) SetCNAME(t testing.TB, host, target string) {
	t.Helper()
	p.dnsAdminCall(t, "/clear-cname", map[string]any{"host": host})
	if target != "" {
		p.dnsAdminCall(t, "/set-cname", map[string]any{"host": host, "target": target})
	}
}

func (p *Pebble) dnsAdminCall(t testing.TB, path string, body any) {
	t.Helper()
	resp, err := http.Post(p.dnsAdmin+path, "application/json", bytes.NewReader(mustJSON(t, body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pebble-challtestsrv %s: %s", path, resp.Status)
	}
}

// startBackground starts cmd with env added, stopping it when the test ends; its output is
// logged when the test failed.
func startBackground(t testing.TB, cmd *exec.Cmd, env []string) {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out.String())
		}
	})
}

// lockedBuffer collects a subprocess's output; the cleanup reads it after Wait.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// writeServerCert writes a self-signed certificate for 127.0.0.1 and localhost (its own root)
// and its key, for Pebble's HTTPS.
func writeServerCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pebble test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
