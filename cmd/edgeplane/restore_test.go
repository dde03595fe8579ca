package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testpki"
	"github.com/edgeplane/edgeplane/store"
	"golang.org/x/crypto/ssh"
)

// keyID is the id edgeplane gives a secret key: the first 8 hex digits of its SHA-256.
func keyID(t *testing.T, key string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(key))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:4])
}

// signUserCert asks the server to sign a new SSH user key with the CA: the first use of the
// CA's private key, which was the 500 of a restore under the wrong key.
func signUserCert(t *testing.T, p *proc, token, ca string) {
	t.Helper()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sshPub, _ := ssh.NewPublicKey(pub)
	mustCall(t, p, "POST", "/ssh_user_certificates", token, map[string]any{"ssh_certificate_authority_id": ca,
		"public_key": string(ssh.MarshalAuthorizedKey(sshPub))}, 201)
}

// TestRestoreNeedsTheSourceKey: a backup holds its secrets (objects' private keys, module secrets
// inside route documents, edgeplane's CA key) encrypted under the source's key, and says so; importing it into a new database with
// another key is refused with what to do, leaving no database and no key file behind; with the
// source's key (in EDGEPLANE_SECRET_KEY, or its key file copied next to the new database) the
// restore succeeds and the restored keys work. serve refuses to start when it cannot decrypt the
// stored secrets: under a wrong key, and when the key file is missing (and makes none).
func TestRestoreNeedsTheSourceKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	p := startServer(t, src)
	token, _ := bootstrapToken(t, p.Stderr.String())
	certPEM, keyPEM := testpki.SelfSignedPEM(t, "app.example.com", false)
	mustCall(t, p, "POST", "/tls_certificates", token, map[string]any{"certificate_pem": certPEM, "private_key_pem": keyPEM}, 201)
	ca := mustCall(t, p, "POST", "/ssh_certificate_authorities", token, map[string]any{"private_key_type": "ed25519"}, 201)["id"].(string)
	edge := mustCall(t, p, "POST", "/edges/https", token, map[string]any{}, 201)["id"].(string)
	routePath := "/edges/https/" + edge + "/routes/" + mustCall(t, p, "POST", "/edges/https/"+edge+"/routes", token, map[string]any{
		"match_type": "path_prefix", "match": "/", "webhook_verification": map[string]any{"provider": "stripe", "secret": "whsec-restored"},
		"oidc": map[string]any{"issuer": "https://id.example.com", "client_id": "cid", "client_secret": "oidc-restored"}}, 201)["id"].(string)
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	caPEM, stderr, code := runBin(t, nil, "ca", "--db", src) // makes the deployment's CA: a system secret
	if code != 0 {
		t.Fatalf("ca: %d %s", code, stderr)
	}
	srcKey, err := os.ReadFile(src + ".key")
	if err != nil {
		t.Fatal(err)
	}
	withSrcKey := []string{store.SecretKeyEnv + "=" + strings.TrimSpace(string(srcKey))}

	// The export says which secrets it holds and how they are protected, and not the key.
	backup, stderr, code := runBin(t, nil, "export", "--db", src)
	if code != 0 {
		t.Fatalf("export: %d %s", code, stderr)
	}
	var head struct {
		Version    int                    `json:"version"`
		Protection store.SecretProtection `json:"secret_protection"`
	}
	if err := json.Unmarshal([]byte(backup), &head); err != nil {
		t.Fatal(err)
	}
	pr := head.Protection
	if head.Version != store.BackupVersion || pr.KeysIncluded || strings.Join(pr.KeyIDs, ",") != keyID(t, string(srcKey)) ||
		pr.ObjectSecrets["tls_certificate"] != 1 || pr.ObjectSecrets["ssh_certificate_authority"] != 1 || len(pr.ObjectSecrets) != 2 ||
		strings.Join(pr.SystemSecrets, ",") != "edgeplane-ca" || !strings.Contains(pr.Encryption, "AES-256-GCM") ||
		pr.DocumentSecrets["https_edge_route"]["webhook_verification.secret"] != 1 || pr.DocumentSecrets["https_edge_route"]["oidc.client_secret"] != 1 ||
		!strings.Contains(pr.Summary, "5 secrets (") || !strings.Contains(pr.Summary, "sealed with AES-256-GCM under key id "+keyID(t, string(srcKey))) ||
		!strings.Contains(pr.Restore, store.SecretKeyEnv) || !strings.Contains(pr.Tokens, "SHA-256") {
		t.Fatalf("secret_protection: %+v (version %d)", pr, head.Version)
	}
	if strings.Contains(backup, strings.TrimSpace(string(srcKey))) || strings.Contains(backup, "PRIVATE KEY") ||
		strings.Contains(backup, "whsec-restored") || strings.Contains(backup, "oidc-restored") {
		t.Fatal("the backup holds the key, a private key or a module secret in the clear")
	}

	// Into a new database with its own new key: refused, saying what to do, leaving nothing.
	dst := filepath.Join(dir, "dst.db")
	_, stderr, code = runIn(t, dir, nil, backup, "import", "--db", dst)
	for _, want := range []string{"secrets cannot be decrypted", "5 of 5 secrets", "encrypted with key ids " + keyID(t, string(srcKey)) + " (5)",
		"Nothing was restored", store.SecretKeyEnv + "=SOURCE_KEY", "key file"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("import under another key: stderr does not say %q:\n%s", want, stderr)
		}
	}
	if code != 1 {
		t.Fatalf("import under another key: exit %d, want 1", code)
	}
	for _, f := range []string{dst, dst + ".key", dst + "-wal", dst + "-shm"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("the refused import left %s behind", f)
		}
	}

	// With the source's key in the environment: restored, and the keys work under serve.
	if _, stderr, code = runIn(t, dir, withSrcKey, backup, "import", "--db", dst); code != 0 || !strings.Contains(stderr, "backup restored") {
		t.Fatalf("import with the source's key: %d %s", code, stderr)
	}
	q := startServe(t, "", withSrcKey, "--db", dst, "--listen", "127.0.0.1:0")
	signUserCert(t, q, token, ca)
	if wh := mustCall(t, q, "GET", routePath, token, nil, 200)["webhook_verification"].(map[string]any); wh["secret"] != "whsec-restored" {
		t.Fatalf("the restored route shows %v", wh)
	}
	if code := q.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got, _, _ := runBin(t, withSrcKey, "ca", "--db", dst); got != caPEM {
		t.Fatalf("the restored CA differs:\n%s\nwant\n%s", got, caPEM)
	}

	// Without the key, serve refuses to start, and does not make a new key file.
	_, stderr, code = runBin(t, nil, "serve", "--db", dst, "--listen", "127.0.0.1:0")
	for _, want := range []string{"5 encrypted secrets", "key file " + dst + ".key does not exist", "a new key would not decrypt them", store.SecretKeyEnv} {
		if !strings.Contains(stderr, want) {
			t.Errorf("serve without its key file: stderr does not say %q:\n%s", want, stderr)
		}
	}
	if code != 1 {
		t.Fatalf("serve without its key file: exit %d, want 1", code)
	}
	if _, err := os.Stat(dst + ".key"); err == nil {
		t.Fatal("serve made a new key file for a database that holds secrets")
	}

	// Under a wrong key, serve refuses to start.
	wrong := []string{store.SecretKeyEnv + "=" + store.NewSecretKey()}
	_, stderr, code = runBin(t, wrong, "serve", "--db", dst, "--listen", "127.0.0.1:0")
	for _, want := range []string{"secrets cannot be decrypted", "5 of 5 secrets do not decrypt with the keys from " + store.SecretKeyEnv,
		"Start with the key that encrypted them", "secrets rotate"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("serve under a wrong key: stderr does not say %q:\n%s", want, stderr)
		}
	}
	if code != 1 {
		t.Fatalf("serve under a wrong key: exit %d, want 1", code)
	}
	// And rotation under a wrong key rewrites nothing.
	_, stderr, code = runBin(t, wrong, "secrets", "rotate", "--db", dst)
	if code != 1 || !strings.Contains(stderr, "nothing was re-encrypted") || !strings.Contains(stderr, "not among the keys") {
		t.Fatalf("rotate under a wrong key: %d %s", code, stderr)
	}

	// The other remedy: the source's key file copied next to the new database.
	dst2 := filepath.Join(dir, "dst2.db")
	if err := os.WriteFile(dst2+".key", srcKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code = runIn(t, dir, nil, backup, "import", "--db", dst2); code != 0 {
		t.Fatalf("import next to the source's key file: %d %s", code, stderr)
	}
	r := startServe(t, "", nil, "--db", dst2, "--listen", "127.0.0.1:0")
	signUserCert(t, r, token, ca)
}
