package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testpki"
	"golang.org/x/crypto/ssh"
)

func mustCall(t *testing.T, p *proc, method, path, token string, body any, want int) map[string]any {
	t.Helper()
	data, _ := json.Marshal(body)
	status, out := call(t, method, p.url(path), token, string(data))
	if status != want {
		t.Fatalf("%s %s: %d %s", method, path, status, out)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

// TestNoSecretAtRest dumps the database files after a session that created every kind of secret,
// and finds no token, no private key and no module secret (webhook secret, OAuth and OIDC client
// secrets) in them, nor in an export; the key file is private, and secrets can be re-encrypted
// under a new key, after which the module secrets still reach the data plane.
func TestNoSecretAtRest(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServer(t, db)
	token, _ := bootstrapToken(t, p.Stderr.String())
	secrets := []string{token[strings.Index(token, "_")+1:]}

	key := mustCall(t, p, "POST", "/api_keys", token, map[string]any{}, 201)["token"].(string)
	cred := mustCall(t, p, "POST", "/credentials", token, map[string]any{}, 201)["token"].(string)
	secrets = append(secrets, key[strings.Index(key, "_")+1:], cred[strings.Index(cred, "_")+1:])
	certPEM, keyPEM := testpki.SelfSignedPEM(t, "app.example.com", false)
	mustCall(t, p, "POST", "/tls_certificates", token, map[string]any{"certificate_pem": certPEM, "private_key_pem": keyPEM}, 201)
	body := strings.Join(strings.Split(strings.TrimSpace(keyPEM), "\n")[1:2], "") // a line of the key's base64
	secrets = append(secrets, body)
	ca := mustCall(t, p, "POST", "/ssh_certificate_authorities", token, map[string]any{"private_key_type": "ed25519"}, 201)["id"].(string)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sshPub, _ := ssh.NewPublicKey(pub)
	mustCall(t, p, "POST", "/ssh_user_certificates", token, map[string]any{"ssh_certificate_authority_id": ca,
		"public_key": string(ssh.MarshalAuthorizedKey(sshPub))}, 201)
	// A route's SAML request signing key.
	edge := mustCall(t, p, "POST", "/edges/https", token, map[string]any{}, 201)["id"].(string)
	mustCall(t, p, "POST", "/edges/https/"+edge+"/routes", token, map[string]any{"match_type": "path_prefix", "match": "/",
		"saml": map[string]any{"idp_metadata": `<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="urn:idp"/>`}}, 201)
	// Module secrets: a webhook secret and an OAuth client secret on one route, an OIDC client
	// secret on another.
	const webhookSecret, oauthSecret, oidcSecret = "whsec-at-rest-4e1f0b", "oauth-at-rest-9a2c7d", "oidc-at-rest-63b8e5"
	secrets = append(secrets, webhookSecret, oauthSecret, oidcSecret)
	withModules := mustCall(t, p, "POST", "/edges/https/"+edge+"/routes", token, map[string]any{"match_type": "path_prefix", "match": "/hooks",
		"webhook_verification": map[string]any{"provider": "github", "secret": webhookSecret},
		"oauth":                map[string]any{"provider": map[string]any{"google": map[string]any{"client_id": "cid", "client_secret": oauthSecret}}}}, 201)
	if withModules["webhook_verification"].(map[string]any)["secret"] != webhookSecret ||
		withModules["oauth"].(map[string]any)["provider"].(map[string]any)["google"].(map[string]any)["client_secret"] != nil {
		t.Fatalf("the route as created shows %v and %v", withModules["webhook_verification"], withModules["oauth"])
	}
	mustCall(t, p, "POST", "/edges/https/"+edge+"/routes", token, map[string]any{"match_type": "path_prefix", "match": "/sso",
		"oidc": map[string]any{"issuer": "https://id.example.com", "client_id": "cid", "client_secret": oidcSecret}}, 201)
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	backup, stderr, code := runBin(t, nil, "export", "--db", db)
	if code != 0 {
		t.Fatalf("export: %d %s", code, stderr)
	}
	for _, s := range secrets {
		if strings.Contains(backup, s) {
			t.Errorf("the export contains %q", s)
		}
	}

	var dump []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(db + suffix)
		if err == nil {
			dump = append(dump, b...)
		}
	}
	if len(dump) == 0 {
		t.Fatal("nothing to dump")
	}
	for _, s := range append(secrets, "PRIVATE KEY", "openssh-key-v1") {
		if bytes.Contains(dump, []byte(s)) {
			t.Errorf("the database files contain %q", s)
		}
	}
	if !bytes.Contains(dump, []byte("ep1:")) {
		t.Error("no encrypted secret in the database: the test proves nothing")
	}
	st, err := os.Stat(db + ".key")
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, st)
	}

	// Rotation: NEW,OLD re-encrypts; afterwards NEW alone serves, and the CA still signs.
	old, _ := os.ReadFile(db + ".key")
	newKey, _, _ := runBin(t, nil, "secrets", "new-key")
	both := "EDGEPLANE_SECRET_KEY=" + strings.TrimSpace(newKey) + "," + strings.TrimSpace(string(old))
	if out, code := runEnv(t, []string{both}, "secrets", "rotate", "--db", db); code != 0 || !strings.Contains(out, "re-encrypted 6 secrets (of objects and of the deployment)") {
		t.Fatalf("rotate: %d %s", code, out)
	}
	q := startServe(t, "", []string{"EDGEPLANE_SECRET_KEY=" + strings.TrimSpace(newKey)}, "--db", db, "--listen", "127.0.0.1:0")
	pub2, _, _ := ed25519.GenerateKey(rand.Reader)
	sshPub2, _ := ssh.NewPublicKey(pub2)
	mustCall(t, q, "POST", "/ssh_user_certificates", token, map[string]any{"ssh_certificate_authority_id": ca,
		"public_key": string(ssh.MarshalAuthorizedKey(sshPub2))}, 201)
	// The webhook secret, re-encrypted under NEW, is still shown as given.
	route := mustCall(t, q, "GET", "/edges/https/"+edge+"/routes/"+withModules["id"].(string), token, nil, 200)
	if route["webhook_verification"].(map[string]any)["secret"] != webhookSecret {
		t.Fatalf("after the rotation the route shows %v", route["webhook_verification"])
	}
}

func runEnv(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	stdout, stderr, code := runBin(t, env, args...)
	return stdout + stderr, code
}
