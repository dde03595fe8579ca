package main

// A Pebble ACME server for the managed certificate tests: Debian's pebble package, started on
// 127.0.0.1 with its test DNS server (pebble-challtestsrv), which answers every name with
// 127.0.0.1, so the challenges of any reserved domain reach the edgeplane under test. Pebble's
// validation authority connects to the ports its configuration names: edgeplane's HTTP and TLS
// listeners.

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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// pebble is a running Pebble with its DNS server.
type pebble struct {
	directory string // the ACME directory URL
	roots     string // PEM file of the CA of its HTTPS, for --acme-ca-roots
	dnsAdmin  string // base URL of pebble-challtestsrv's management interface
}

// pebbleOptions configure a Pebble.
type pebbleOptions struct {
	httpPort, tlsPort int           // where the validation authority reaches edgeplane
	validity          time.Duration // lifetime of the certificates it issues; 0 for Pebble's default
	vaSleep           time.Duration // delay before each validation; 0 for none
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startPebble starts Pebble and its DNS server for the test, or skips the test, saying why, where
// the pebble package is not installed.
func startPebble(t *testing.T, o pebbleOptions) *pebble {
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
	certFile, keyFile := writeTestServerCert(t, dir)
	dnsPort, dnsAdminPort, acmePort, mgmtPort := freePort(t), freePort(t), freePort(t), freePort(t)
	dnsAddr := "127.0.0.1:" + strconv.Itoa(dnsPort)
	startBackground(t, exec.Command(dnsBin, "-dns01", dnsAddr, "-management", "127.0.0.1:"+strconv.Itoa(dnsAdminPort),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""), nil)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":             "127.0.0.1:" + strconv.Itoa(acmePort),
		"managementListenAddress":   "127.0.0.1:" + strconv.Itoa(mgmtPort),
		"certificate":               certFile,
		"privateKey":                keyFile,
		"httpPort":                  o.httpPort,
		"tlsPort":                   o.tlsPort,
		"ocspResponderURL":          "",
		"certificateValidityPeriod": int(o.validity / time.Second),
	}}
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, mustJSON(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0"}
	if o.vaSleep > 0 {
		env = append(env, "PEBBLE_VA_SLEEPTIME="+strconv.Itoa(int(o.vaSleep/time.Second)))
	} else {
		env = append(env, "PEBBLE_VA_NOSLEEP=1")
	}
	startBackground(t, exec.Command(bin, "-config", cfgFile, "-dnsserver", dnsAddr), env)
	p := &pebble{directory: fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort), roots: certFile,
		dnsAdmin: "http://127.0.0.1:" + strconv.Itoa(dnsAdminPort)}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(certFile)
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := hc.Get(p.directory)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not answer %s: %v", p.directory, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

// setA makes the test DNS server answer host with addr only; "" returns host to the default
// answer, 127.0.0.1.
func (p *pebble) setA(t *testing.T, host, addr string) {
	t.Helper()
	p.dnsAdminCall(t, "/clear-a", map[string]any{"host": host})
	if addr != "" {
		p.dnsAdminCall(t, "/add-a", map[string]any{"host": host, "addresses": []string{addr}})
	}
}

func (p *pebble) dnsAdminCall(t *testing.T, path string, body any) {
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

// startBackground starts cmd, stopping it when the test ends; its output is logged on failure.
func startBackground(t *testing.T, cmd *exec.Cmd, env []string) {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
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

// writeTestServerCert writes a self-signed certificate for 127.0.0.1 and localhost (its own
// root) and its key, for Pebble's HTTPS.
func writeTestServerCert(t *testing.T, dir string) (certFile, keyFile string) {
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

// decodeJSON decodes an API response body.
func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}
