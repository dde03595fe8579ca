package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testpki"
)

var httpsListenRE = regexp.MustCompile(`msg="data plane listening" agents=\S+ http=\S* https=(\S+)`)

// TestRestoreOnNewMachine: a backup and the key file `export --key-file` wrote beside it are all
// a new machine needs. Into a fresh directory holding only those two files, `import --key-file`
// restores the backup and encrypts its secrets again under the new database's own key, so that
// serve needs neither the carried key file nor EDGEPLANE_SECRET_KEY: the uploaded certificate's
// private key serves TLS for its domain, and the route's webhook secret verifies signatures.
func TestRestoreOnNewMachine(t *testing.T) {
	t.Parallel()
	const domain, webhookSecret = "restored.example.com", "whsec-carried-7d21"
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "restored upstream")
	}))
	t.Cleanup(upstream.Close)

	// The old machine: a certificate with its private key on a reserved domain, and an edge whose
	// route verifies GitHub webhooks with a secret.
	oldDir := t.TempDir()
	oldDB := filepath.Join(oldDir, "edgeplane.db")
	p := startServer(t, oldDB)
	token, _ := bootstrapToken(t, p.Stderr.String())
	certPEM, keyPEM := testpki.SelfSignedPEM(t, domain, false)
	cert := mustCall(t, p, "POST", "/tls_certificates", token, map[string]any{"certificate_pem": certPEM, "private_key_pem": keyPEM}, 201)["id"]
	mustCall(t, p, "POST", "/reserved_domains", token, map[string]any{"domain": domain, "certificate_id": cert}, 201)
	backend := mustCall(t, p, "POST", "/backends/static", token, map[string]any{"address": strings.TrimPrefix(upstream.URL, "http://")}, 201)["id"]
	edge := mustCall(t, p, "POST", "/edges/https", token, map[string]any{"hostports": []string{domain + ":443"}}, 201)["id"].(string)
	mustCall(t, p, "POST", "/edges/https/"+edge+"/routes", token, map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": backend}, "webhook_verification": map[string]any{"provider": "github", "secret": webhookSecret}}, 201)
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}

	carried := filepath.Join(oldDir, "backup.key")
	backup, stderr, code := runBin(t, nil, "export", "--db", oldDB, "--key-file", carried)
	if code != 0 || !strings.Contains(stderr, carried+" (mode 600)") || !strings.Contains(stderr, "import --key-file") {
		t.Fatalf("export --key-file: exit %d, stderr %q", code, stderr)
	}
	st, err := os.Stat(carried)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key file export wrote: %v, %v; want mode 600", err, st)
	}
	oldKey, _ := os.ReadFile(oldDB + ".key")
	if key, _ := os.ReadFile(carried); strings.TrimSpace(string(key)) != strings.TrimSpace(string(oldKey)) {
		t.Fatalf("the carried key %q is not the database's key", key)
	}
	if strings.Contains(backup, strings.TrimSpace(string(oldKey))) {
		t.Fatal("the backup holds its key")
	}
	// A key file is never written over another file.
	os.WriteFile(filepath.Join(oldDir, "taken"), []byte("precious"), 0o600)
	stdout, stderr, code := runBin(t, nil, "export", "--db", oldDB, "--key-file", filepath.Join(oldDir, "taken"))
	if b, _ := os.ReadFile(filepath.Join(oldDir, "taken")); code != 1 || stdout != "" || string(b) != "precious" ||
		!strings.HasPrefix(stderr, "edgeplane: --key-file: ") || !strings.Contains(stderr, "file exists") {
		t.Fatalf("export --key-file onto an existing file: exit %d, stderr %q, the file now %q", code, stderr, b)
	}

	// The new machine: a fresh directory with the backup and the carried key file only.
	newDir := t.TempDir()
	backupFile, keyFile := filepath.Join(newDir, "backup.json"), filepath.Join(newDir, "backup.key")
	os.WriteFile(backupFile, []byte(backup), 0o600)
	key, _ := os.ReadFile(carried)
	os.WriteFile(keyFile, key, 0o600)
	newDB := filepath.Join(newDir, "edgeplane.db")

	// Refused, leaving nothing new behind: no key; a key file others can read; another key.
	wrongKey := filepath.Join(t.TempDir(), "wrong.key")
	newKey, _, _ := runBin(t, nil, "secrets", "new-key")
	os.WriteFile(wrongKey, []byte(newKey), 0o600)
	os.Chmod(keyFile, 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "run import again with that key, either as --key-file FILE"},
		{[]string{"--key-file", keyFile}, "--key-file: store: secret key file " + keyFile + " is readable by others (mode -rw-r--r--); chmod 600 it"},
		{[]string{"--key-file", wrongKey}, "2 of 2 secrets do not decrypt"},
		{[]string{"--key-file", filepath.Join(newDir, "missing.key")}, "--key-file: store: secret key file"},
	} {
		_, stderr, code := runIn(t, newDir, nil, backup, append([]string{"import", "--db", newDB}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("import %q: exit %d, stderr %q; want exit 1 and %q", c.args, code, stderr, c.want)
		}
		if names := dirEntries(t, newDir); !slices.Equal(names, []string{"backup.json", "backup.key"}) {
			t.Fatalf("import %q left %q", c.args, names)
		}
	}
	os.Chmod(keyFile, 0o600)

	_, stderr, code = runIn(t, newDir, nil, backup, "import", "--db", newDB, "--key-file", keyFile)
	if code != 0 || stderr != "edgeplane: backup restored; its secrets are now encrypted under this database's own key (its key file "+newDB+".key), which serve needs, not "+keyFile+"\n" {
		t.Fatalf("import --key-file: exit %d, stderr %q", code, stderr)
	}
	if own, _ := os.ReadFile(newDB + ".key"); len(own) == 0 || bytes.Equal(own, key) {
		t.Fatalf("the new database's key file %q: want a key of its own", own)
	}
	// serve needs the new database's key only: the carried one goes.
	os.Remove(keyFile)
	q := startServe(t, newDir, nil, "--db", newDB, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
		"--http-listen", "", "--https-listen", "127.0.0.1:0", "--acme-directory", "",
		"--outbound-allow-private") // the static backend is on this host
	m := httpsListenRE.FindStringSubmatch(q.Stderr.String()) // logged before the API listens
	if m == nil {
		t.Fatalf("no data plane listening line; stderr:\n%s", q.Stderr)
	}
	httpsAddr := m[1]

	// The restored private key serves its certificate.
	block, _ := pem.Decode([]byte(certPEM))
	uploaded, _ := x509.ParseCertificate(block.Bytes)
	roots := x509.NewCertPool()
	roots.AddCert(uploaded)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", httpsAddr) },
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
	post := func(signature string) (int, string) {
		t.Helper()
		body := []byte(`{"zen":"restored"}`)
		req, _ := http.NewRequest("POST", "https://"+domain+"/hook", bytes.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", signature)
		var res *http.Response
		waitFor(t, "the restored edge", func() bool {
			var err error
			if res, err = client.Do(req.Clone(context.Background())); err != nil {
				req.Body = io.NopCloser(bytes.NewReader(body))
				return false
			}
			return res.StatusCode != http.StatusNotFound || res.Header.Get("Ngrok-Error-Code") == ""
		})
		defer res.Body.Close()
		got, _ := io.ReadAll(res.Body)
		if !res.TLS.PeerCertificates[0].Equal(uploaded) {
			t.Fatal("the restored domain was not served with its uploaded certificate")
		}
		return res.StatusCode, string(got)
	}
	// The restored webhook secret verifies a signature made with it, and refuses another.
	mac := hmac.New(sha256.New, []byte(webhookSecret))
	mac.Write([]byte(`{"zen":"restored"}`))
	if status, body := post("sha256=" + hex.EncodeToString(mac.Sum(nil))); status != 200 || body != "restored upstream" {
		t.Errorf("a webhook signed with the restored secret: %d %q", status, body)
	}
	if status, _ := post("sha256=" + strings.Repeat("0", 64)); status != http.StatusForbidden {
		t.Errorf("a webhook with a wrong signature: %d, want 403", status)
	}
}
