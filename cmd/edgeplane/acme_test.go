package main

// Managed certificates against a real ACME server (Pebble, pebble_test.go): issuance with RSA
// and ECDSA keys over HTTP-01 and TLS-ALPN-01, the certificate served on the TLS listener,
// renewal of short-lived certificates, a failing challenge, a restart in the middle of a job;
// and, without Pebble, the statuses of a disabled or unreachable directory and of a wildcard.
// Issuance runs on SQLite and, when EDGEPLANE_TEST_POSTGRES is set, on PostgreSQL; the crash
// takeover of a job is in acme_crash_test.go.

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// acmeServer is an edgeplane serve with its data plane on fixed ports and an ACME directory.
type acmeServer struct {
	*proc
	token             string
	httpPort, tlsPort int
	args, env         []string
	db                string
}

// startACMEServer starts edgeplane on a new SQLite database with --acme-directory directory (and
// --acme-ca-roots roots when not empty); withHTTP turns the HTTP listener on (HTTP-01) or off
// (TLS-ALPN-01).
func startACMEServer(t *testing.T, httpPort, tlsPort int, withHTTP bool, directory, roots string) *acmeServer {
	t.Helper()
	return startACMEServerOn(t, filepath.Join(t.TempDir(), "edgeplane.db"), httpPort, tlsPort, withHTTP, directory, roots)
}

// startACMEServerOn is startACMEServer on the database dsn, of either engine.
func startACMEServerOn(t *testing.T, dsn string, httpPort, tlsPort int, withHTTP bool, directory, roots string) *acmeServer {
	t.Helper()
	s := &acmeServer{httpPort: httpPort, tlsPort: tlsPort, db: dsn}
	httpListen := ""
	if withHTTP {
		httpListen = "127.0.0.1:" + strconv.Itoa(httpPort)
	}
	s.args = []string{"--db", dsn, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0", "--http-listen", httpListen,
		"--https-listen", "127.0.0.1:" + strconv.Itoa(tlsPort), "--acme-directory", directory}
	if roots != "" {
		s.args = append(s.args, "--acme-ca-roots", roots)
	}
	if store.IsPostgres(dsn) {
		s.env = append(s.env, testdb.SecretKeyEnvVar()) // a PostgreSQL store needs the key in the environment
	}
	s.proc = startServe(t, "", s.env, s.args...)
	tok, ok := bootstrapToken(t, s.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", s.Stderr)
	}
	s.token = tok
	return s
}

// restart stops the server with SIGTERM and starts it again on the same database and ports.
func (s *acmeServer) restart(t *testing.T) {
	t.Helper()
	if code := s.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, s.Stderr)
	}
	s.proc = startServe(t, "", s.env, s.args...)
}

// api calls the API and decodes the answer, requiring status want.
func (s *acmeServer) api(t *testing.T, method, path, body string, want int) map[string]any {
	t.Helper()
	code, b := call(t, method, s.url(path), s.token, body)
	if code != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, b)
	}
	if len(b) == 0 {
		return nil
	}
	return decodeJSON(t, b)
}

// reserve reserves host with a certificate management policy of keyType and returns its id.
func (s *acmeServer) reserve(t *testing.T, host, keyType string) string {
	t.Helper()
	d := s.api(t, "POST", "/reserved_domains", fmt.Sprintf(`{"domain": %q, "certificate_management_policy": {"private_key_type": %q}}`, host, keyType), 201)
	return d["id"].(string)
}

// waitDomain polls the domain until cond holds, for at most limit; it returns the domain.
func (s *acmeServer) waitDomain(t *testing.T, id string, limit time.Duration, what string, cond func(d map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		d := s.api(t, "GET", "/reserved_domains/"+id, "", 200)
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("domain %s: not %s within %v: %v\nedgeplane stderr:\n%s", id, what, limit, d, s.Stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// job returns the domain's provisioning job, or nil.
func job(d map[string]any) map[string]any {
	st, _ := d["certificate_management_status"].(map[string]any)
	j, _ := st["provisioning_job"].(map[string]any)
	return j
}

// certID returns the id of the domain's certificate, or "".
func certID(d map[string]any) string {
	c, _ := d["certificate"].(map[string]any)
	id, _ := c["id"].(string)
	return id
}

// issuedWith waits for the domain's certificate and checks it and its status: a TLS certificate
// with issued_at and the key type asked for, renews_at set a third of its lifetime before expiry,
// no job left, and the certificate presented on the TLS listener for host.
func (s *acmeServer) issuedWith(t *testing.T, id, host, keyType string) map[string]any {
	t.Helper()
	d := s.waitDomain(t, id, 60*time.Second, "certified", func(d map[string]any) bool { return certID(d) != "" })
	st := d["certificate_management_status"].(map[string]any)
	if st["provisioning_job"] != nil || st["renews_at"] == nil {
		t.Fatalf("status after issuance: %v", st)
	}
	c := s.api(t, "GET", "/tls_certificates/"+certID(d), "", 200)
	if c["issued_at"] == nil || c["private_key_type"] != keyType || !strings.Contains(fmt.Sprint(c["subject_alternative_names"]), host) {
		t.Fatalf("issued certificate: %v", c)
	}
	notBefore, _ := time.Parse(time.RFC3339, c["not_before"].(string))
	notAfter, _ := time.Parse(time.RFC3339, c["not_after"].(string))
	renews, _ := time.Parse(time.RFC3339, st["renews_at"].(string))
	if want := notAfter.Add(-notAfter.Sub(notBefore) / 3); renews.Sub(want).Abs() > 2*time.Second {
		t.Fatalf("renews_at %v, want %v (a third of the lifetime before %v)", renews, want, notAfter)
	}
	s.waitServed(t, host, c["serial_number"].(string))
	return c
}

// waitServed waits until the TLS listener presents the certificate with serial for host.
func (s *acmeServer) waitServed(t *testing.T, host, serial string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got = servedSerial(t, s.tlsPort, host)
		if got == serial {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("TLS listener presents serial %q for %s, want %q", got, host, serial)
}

// servedSerial returns the serial of the certificate the TLS listener presents for host.
func servedSerial(t *testing.T, port int, host string) string {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(&d, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{ServerName: host, InsecureSkipVerify: true})
	if err != nil {
		return "handshake failed: " + err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// pebbleAndServer starts Pebble and an edgeplane on a new SQLite database that it validates.
func pebbleAndServer(t *testing.T, withHTTP bool, o pebbleOptions) (*pebble, *acmeServer) {
	t.Helper()
	return pebbleAndServerOn(t, filepath.Join(t.TempDir(), "edgeplane.db"), withHTTP, o)
}

// pebbleAndServerOn is pebbleAndServer on the database dsn, of either engine.
func pebbleAndServerOn(t *testing.T, dsn string, withHTTP bool, o pebbleOptions) (*pebble, *acmeServer) {
	t.Helper()
	o.httpPort, o.tlsPort = freePort(t), freePort(t)
	pb := startPebble(t, o)
	return pb, startACMEServerOn(t, dsn, o.httpPort, o.tlsPort, withHTTP, pb.directory, pb.roots)
}

// Issuance runs on every engine of the run: the job's store (acme_jobs, the leases, the
// challenge answers the listeners read) on PostgreSQL as on SQLite.
func TestACMEIssuesRSAOverHTTP01(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		_, s := pebbleAndServerOn(t, testdb.Fresh(t, engine), true, pebbleOptions{})
		id := s.reserve(t, "rsa.example.com", "rsa")
		s.issuedWith(t, id, "rsa.example.com", "rsa")
		// The challenge path of a name with no challenge in progress is routed as usual.
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/.well-known/acme-challenge/nothing", s.httpPort))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown challenge: %s, want 404 (no endpoint)", resp.Status)
		}
	})
}

func TestACMEIssuesECDSAOverTLSALPN01(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		_, s := pebbleAndServerOn(t, testdb.Fresh(t, engine), false, pebbleOptions{})
		id := s.reserve(t, "ecdsa.example.com", "ecdsa")
		s.issuedWith(t, id, "ecdsa.example.com", "ecdsa")
	})
}

func TestACMERenewsShortLivedCertificate(t *testing.T) {
	t.Parallel()
	_, s := pebbleAndServer(t, true, pebbleOptions{validity: 24 * time.Second})
	host := "renew.example.com"
	id := s.reserve(t, host, "ecdsa")
	first := s.issuedWith(t, id, host, "ecdsa")
	// Renewal comes a third of the lifetime (8s) before expiry, and replaces the certificate.
	d := s.waitDomain(t, id, 40*time.Second, "renewed", func(d map[string]any) bool { return certID(d) != "" && certID(d) != first["id"] })
	second := s.issuedWith(t, id, host, "ecdsa")
	if second["id"] != certID(d) || second["serial_number"] == first["serial_number"] {
		t.Fatalf("renewal: first %v, second %v", first, second)
	}
	s.api(t, "GET", "/tls_certificates/"+first["id"].(string), "", 404) // the replaced one is gone
}

func TestACMEChallengeFailureIsDNSError(t *testing.T) {
	t.Parallel()
	pb, s := pebbleAndServer(t, true, pebbleOptions{})
	host := "unreachable.example.com"
	pb.setA(t, host, "127.0.0.2") // nothing listens there: the validation cannot reach edgeplane
	id := s.reserve(t, host, "rsa")
	d := s.waitDomain(t, id, 60*time.Second, "failing with DNS_ERROR", func(d map[string]any) bool {
		j := job(d)
		return j != nil && j["error_code"] == "DNS_ERROR"
	})
	j := job(d)
	msg, _ := j["msg"].(string)
	if j["retries_at"] != nil || certID(d) != "" || !strings.Contains(msg, host) || !strings.Contains(msg, "resolves to this edgeplane server") {
		t.Fatalf("failed job: %v", d)
	}
	// Once DNS is fixed, setting the policy again retries.
	pb.setA(t, host, "")
	s.api(t, "PATCH", "/reserved_domains/"+id, `{"certificate_management_policy": {"private_key_type": "rsa"}}`, 200)
	s.issuedWith(t, id, host, "rsa")
}

// A clean restart in the middle of a job releases its lease, and the restarted server resumes
// the same order at once. Pebble's validation is held at a gate (acme_crash_test.go) while the
// server restarts, so the job is certainly mid-order and the validation certainly reaches a
// running server.
func TestACMEResumesOrderAfterRestart(t *testing.T) {
	t.Parallel()
	httpPort, tlsPort := freePort(t), freePort(t)
	g := startGate(t, httpPort)
	pb := startPebble(t, pebbleOptions{httpPort: g.port, tlsPort: tlsPort})
	s := startACMEServer(t, httpPort, tlsPort, true, pb.directory, pb.roots)
	host := "restart.example.com"
	id := s.reserve(t, host, "rsa")
	select {
	case <-g.arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("Pebble never came to validate; stderr:\n%s", s.Stderr)
	}
	before := s.Stderr.String()
	s.restart(t)
	g.open()
	s.issuedWith(t, id, host, "rsa")
	if !strings.Contains(s.Stderr.String(), "resuming the order in progress") {
		t.Fatalf("the restarted server did not resume the order; stderr:\n%s", s.Stderr)
	}
	if n := strings.Count(before+s.Stderr.String(), "order placed"); n != 1 {
		t.Fatalf("%d orders placed, want 1; stderr after the restart:\n%s", n, s.Stderr)
	}
}

func TestACMEDisabledSaysSo(t *testing.T) {
	t.Parallel()
	s := startACMEServer(t, freePort(t), freePort(t), true, "", "")
	id := s.reserve(t, "off.example.com", "rsa")
	d := s.waitDomain(t, id, 30*time.Second, "disabled", func(d map[string]any) bool {
		return strings.Contains(fmt.Sprint(job(d)["msg"]), "--acme-directory is empty")
	})
	if j := job(d); j["error_code"] != nil || j["retries_at"] != nil {
		t.Fatalf("disabled job: %v", j)
	}
}

func TestACMEUnreachableDirectoryIsInternalError(t *testing.T) {
	t.Parallel()
	dir := fmt.Sprintf("https://127.0.0.1:%d/dir", freePort(t)) // nothing listens
	s := startACMEServer(t, freePort(t), freePort(t), true, dir, "")
	id := s.reserve(t, "later.example.com", "ecdsa")
	d := s.waitDomain(t, id, 30*time.Second, "failing with INTERNAL_ERROR", func(d map[string]any) bool {
		j := job(d)
		return j != nil && j["error_code"] == "INTERNAL_ERROR"
	})
	j := job(d)
	retries, err := time.Parse(time.RFC3339, fmt.Sprint(j["retries_at"]))
	if err != nil || time.Until(retries) < 30*time.Second || !strings.Contains(fmt.Sprint(j["msg"]), "retries at") {
		t.Fatalf("failing job: %v", j)
	}
}

func TestACMEWildcardExplainsDNS01(t *testing.T) {
	t.Parallel()
	s := startACMEServer(t, freePort(t), freePort(t), true, "https://127.0.0.1:1/dir", "")
	id := s.reserve(t, "*.wild.example.com", "rsa")
	d := s.waitDomain(t, id, 30*time.Second, "explained", func(d map[string]any) bool {
		j := job(d)
		return j != nil && j["error_code"] == "DNS_ERROR"
	})
	msg := fmt.Sprint(job(d)["msg"])
	if !strings.Contains(msg, "_acme-challenge.wild.example.com -> "+fmt.Sprint(d["acme_challenge_cname_target"])) || !strings.Contains(msg, "DNS-01") ||
		!strings.Contains(msg, "--dns-listen") || job(d)["retries_at"] != nil {
		t.Fatalf("wildcard job without --dns-listen: %v", job(d))
	}
}

func TestACMECARootsFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.pem"), "--acme-ca-roots"},
		{filepath.Join(dir, "empty.pem"), "holds no PEM certificate"},
	} {
		if strings.HasSuffix(c.file, "empty.pem") {
			if err := os.WriteFile(c.file, []byte("not a certificate"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, stderr, code := runBin(t, nil, "serve", "--db", filepath.Join(dir, "x.db"), "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
			"--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0", "--acme-ca-roots", c.file)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Fatalf("--acme-ca-roots %s: exit %d, stderr:\n%s", c.file, code, stderr)
		}
	}
}
