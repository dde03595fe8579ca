package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// npmTimeout is a safety net far above npm ci's usual few seconds (when it runs at all): it may
// download, and an unreachable registry must not hang go test.
const npmTimeout = 3 * time.Minute

// reportMargin is the time kept before the test binary's deadline to report a suite that did
// not finish: its output and the server's log.
const reportMargin = 30 * time.Second

// untilTestDeadline is a context that ends reportMargin before t's deadline (go test -timeout),
// the safety net of a process the test waits for: a hung request cannot hang go test, and the
// test fails with the process's output instead of a bare timeout panic. A fixed bound does not
// fit: the node suite takes some 15 s of CPU, ten seconds on a quiet machine and over two
// minutes on two cores shared with twenty-odd busy processes. Without a deadline (-timeout 0)
// nothing bounds the process but the caller's cancel.
func untilTestDeadline(t *testing.T) (context.Context, context.CancelFunc) {
	if deadline, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), deadline.Add(-reportMargin))
	}
	return context.WithCancel(context.Background())
}

// TestOfficialTypeScriptClient runs the suite in test/ (node's built-in test runner) against a
// real `edgeplane serve`: ngrok's official TypeScript client @ngrok/ngrok-api, pinned in
// package-lock.json and installed here with npm ci, drives every collection and edge module it
// has that edgeplane serves, and every response it receives is validated against the published
// schema. See the "Compatibility" section of docs/api.md.
func TestOfficialTypeScriptClient(t *testing.T) {
	node, nodeErr := exec.LookPath("node")
	npm, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		t.Skip("SKIPPED: node and npm are needed to run the @ngrok/ngrok-api end-to-end suite " +
			"(install Node.js 20 or newer); the compatibility suite did not run")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	if major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), "."); atoi(major) < 20 {
		t.Skipf("SKIPPED: Node.js 20 or newer is needed to run the @ngrok/ngrok-api end-to-end suite, found %s; "+
			"the compatibility suite did not run", version)
	}
	spec := specFile(t)

	npmCtx, cancelNPM := context.WithTimeout(context.Background(), npmTimeout)
	defer cancelNPM()
	installOrSkip(t, npmCtx, npm, ".")

	s := startServer(t)
	pagingToken := s.apikeyCreate(t, "--account", "e2e-paging", "--create-account", "--description", "e2e paging test")
	fixtures := filepath.Join(t.TempDir(), "fixtures.json")
	writeFixtures(t, fixtures)
	coverage := t.TempDir()

	ctx, cancel := untilTestDeadline(t)
	defer cancel()
	began := time.Now()
	files, err := filepath.Glob("test/*.test.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in e2e/test (%v)", err)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Env = cleanEnv(
		"EDGEPLANE_E2E_BASE_URL="+s.base,
		"EDGEPLANE_E2E_TOKEN="+s.token,
		"EDGEPLANE_E2E_PAGING_TOKEN="+pagingToken,
		"EDGEPLANE_E2E_FIXTURES="+fixtures,
		"EDGEPLANE_E2E_SPEC="+spec,
		"EDGEPLANE_E2E_COVERAGE="+coverage,
		"NO_COLOR=1",
	)
	out, err = cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the node suite did not finish within %v, before the test's deadline; output:\n%s\nserver stderr:\n%s",
			time.Since(began).Round(time.Second), out, tail(s.stderr.String(), 40))
	}
	if err != nil {
		t.Fatalf("the node suite failed (%v); output:\n%s", err, out)
	}
	t.Logf("node suite passed:\n%s", summary(string(out)))
	checkCoverage(t, coverage)
}

// notValidatedByTheSuite are operations edgeplane serves that the node suite does not exercise,
// with the reason; everything else must have had a success response validated against the
// schema.
var notValidatedByTheSuite = map[string]string{
	"PUT /edges/https/{}/routes/{}/jwt_validation":    "not in the schema nor the client (habits_test.go covers it)",
	"GET /edges/https/{}/routes/{}/jwt_validation":    "not in the schema nor the client (habits_test.go covers it)",
	"DELETE /edges/https/{}/routes/{}/jwt_validation": "not in the schema nor the client (habits_test.go covers it)",
}

var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// servedOperations lists every operation the resource and module tables serve, as
// "METHOD /path/{}" with path parameters blanked.
func servedOperations() []string {
	var ops []string
	add := func(method, path string) { ops = append(ops, method+" "+pathParam.ReplaceAllString(path, "{}")) }
	type op struct {
		op     ep.Ops
		method string
		suffix string
	}
	for _, r := range ep.Resources {
		for _, o := range []op{{ep.OpCreate, "POST", ""}, {ep.OpList, "GET", ""}, {ep.OpGet, "GET", "/{id}"},
			{ep.OpUpdate, "PATCH", "/{id}"}, {ep.OpDelete, "DELETE", "/{id}"}} {
			if r.Ops.Has(o.op) {
				add(o.method, r.Path+o.suffix)
			}
		}
	}
	for _, m := range ep.Modules {
		for _, o := range []op{{ep.OpUpdate, "PUT", ""}, {ep.OpGet, "GET", ""}, {ep.OpDelete, "DELETE", ""}} {
			if m.Ops.Has(o.op) {
				add(o.method, m.Parent.Path+"/{id}/"+m.Name)
			}
		}
	}
	return ops
}

// checkCoverage requires that every operation edgeplane serves had a success response validated
// against the schema by some process of the node suite (each wrote its list to dir).
func checkCoverage(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	validated := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ops []string
		if err := json.Unmarshal(b, &ops); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, op := range ops {
			validated[op] = true
		}
	}
	var missing []string
	for _, op := range servedOperations() {
		if !validated[op] && notValidatedByTheSuite[op] == "" {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d served operations had no success response validated by the node suite (drive them from e2e/test, or list them in notValidatedByTheSuite with the reason):\n  %s",
			len(missing), strings.Join(missing, "\n  "))
	}
	t.Logf("%d operations had a success response validated against the schema", len(validated))
}

// specFile returns the published schema: EDGEPLANE_E2E_SPEC, else the copy kept in the
// repository (testdata/spec, with its license).
func specFile(t *testing.T) string {
	t.Helper()
	p := os.Getenv("EDGEPLANE_E2E_SPEC")
	if p == "" {
		p = filepath.Join("..", "testdata", "spec", "ngrok-openapi.yaml")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("the published schema is needed to validate responses: %v (set EDGEPLANE_E2E_SPEC to ngrok-openapi.yaml)", err)
	}
	return abs
}

// installOrSkip installs the pinned packages of dir with npmCI, and skips the test, saying why,
// when npm cannot install them (no network, no registry, a proxy refusing): the suite cannot run
// without them, and a machine without a registry is not a failure of edgeplane.
func installOrSkip(t testing.TB, ctx context.Context, npm, dir string) {
	t.Helper()
	if err := npmCI(ctx, npm, dir); err != nil {
		t.Skipf("SKIPPED: npm could not install the packages of the @ngrok/ngrok-api end-to-end suite, "+
			"so the compatibility suite did not run: %v", err)
	}
}

// npmCI installs the pinned packages of dir with npm ci, unless node_modules was installed from
// the same package.json and package-lock.json already (a stamp file records their hash).
func npmCI(ctx context.Context, npm, dir string) error {
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".edgeplane-e2e-installed")
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == sum {
		return nil
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci: %v\n%s", err, tail(string(out), 20))
	}
	if err := os.WriteFile(stamp, []byte(sum+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", stamp, err)
	}
	return nil
}

// writeFixtures writes keyMaterial to a JSON file for the node suite.
func writeFixtures(t *testing.T, path string) {
	t.Helper()
	data, err := json.Marshal(keyMaterial(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// keyMaterial makes what the tests need and node cannot make: a CA certificate ("ca_pem"), a
// leaf certificate it signed with the CA after it ("certificate_pem") and the leaf's private key
// ("private_key_pem"), and an SSH public key ("ssh_public_key").
func keyMaterial(t *testing.T) map[string]string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "edgeplane e2e CA", Organization: []string{"edgeplane"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "app.example.com"},
		DNSNames:     []string{"app.example.com", "www.example.com"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafPKCS8, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := func(der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	return map[string]string{
		"ca_pem":          certPEM(caDER),
		"certificate_pem": certPEM(leafDER) + certPEM(caDER),
		"private_key_pem": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: leafPKCS8})),
		"ssh_public_key":  sshAuthorizedKey(sshPub),
	}
}

// sshAuthorizedKey is the authorized_keys line of an Ed25519 public key (RFC 8709 wire format).
func sshAuthorizedKey(pub ed25519.PublicKey) string {
	var b []byte
	for _, field := range [][]byte{[]byte("ssh-ed25519"), pub} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(field)))
		b = append(b, field...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(b) + " e2e@edgeplane"
}

// summary is the node runner's closing counts ("ℹ tests 42" …), or the whole output if absent.
func summary(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ℹ ") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return out
	}
	return strings.Join(lines, "\n")
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
