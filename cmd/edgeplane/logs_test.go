package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/internal/testpki"
	"golang.org/x/crypto/ssh"
)

// TestNoSecretInLogs runs a full API session against the binary with --log-level debug: API keys,
// credentials, TLS certificates with private keys (also a refused one), SSH certificate
// authorities of every key type and the certificates they sign, OAuth and OIDC modules with
// client secrets, webhook verification with a secret (also a refused one), and requests with
// wrong and malformed credentials. No token, secret or private key appears in the captured log,
// except the first API key's token in the one message printed at first start.
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	secretKey, _, code := runBin(t, nil, "secrets", "new-key")
	secretKey = strings.TrimSpace(secretKey)
	if code != 0 || secretKey == "" {
		t.Fatalf("secrets new-key: exit %d", code)
	}
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServe(t, "", []string{"EDGEPLANE_SECRET_KEY=" + secretKey}, "--db", db, "--listen", "127.0.0.1:0", "--log-level", "debug")
	boot, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	secrets := map[string]string{secretKey: "EDGEPLANE_SECRET_KEY"}
	addToken := func(name, tok string) {
		secrets[tok] = name
		secrets[tok[strings.Index(tok, "_")+1:]] = "the secret part of " + name
	}
	requests := 0
	do := func(token, method, path string, body any, want int) map[string]any {
		t.Helper()
		requests++
		return mustCall(t, p, method, path, token, body, want)
	}
	token := do(boot, "POST", "/api_keys", map[string]any{"description": "session"}, 201)["token"].(string)
	addToken("an API key token", token)
	addToken("a credential token", do(token, "POST", "/credentials", map[string]any{"acl": []any{"bind:*.example.com"}}, 201)["token"].(string))
	bot := do(token, "POST", "/bot_users", map[string]any{"name": "ci"}, 201)["id"].(string)
	addToken("a bot's API key token", do(token, "POST", "/api_keys", map[string]any{"owner_id": bot}, 201)["token"].(string))

	// Wrong and malformed credentials: refused, and not logged either.
	sel := token[:strings.Index(token, "_")]
	wrong := sel + "_" + strings.Repeat("A", 52)
	secrets[wrong] = "a wrong token"
	for _, auth := range []string{wrong, "Token " + token, token + "x"} {
		requests++
		if status, _ := call(t, "GET", p.url("/api_keys"), auth, ""); status != 401 {
			t.Fatalf("GET /api_keys with %q: status %d, want 401", auth, status)
		}
	}

	// TLS certificates: a private key accepted, another refused (it is not the leaf's).
	certPEM, keyPEM := testpki.SelfSignedPEM(t, "app.example.com", false)
	do(token, "POST", "/tls_certificates", map[string]any{"certificate_pem": certPEM, "private_key_pem": keyPEM}, 201)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPEM := ecKeyPEM(t, other)
	do(token, "POST", "/tls_certificates", map[string]any{"certificate_pem": certPEM, "private_key_pem": otherPEM}, 400)
	for _, k := range []string{keyPEM, otherPEM} {
		for _, line := range strings.Split(strings.TrimSpace(k), "\n") {
			if !strings.HasPrefix(line, "-----") && len(line) >= 16 {
				secrets[line] = "a line of a private key's PEM"
			}
		}
	}

	// SSH: CAs of every key type (their private keys never leave the server) and certificates.
	for _, body := range []map[string]any{{"private_key_type": "ed25519"}, {"private_key_type": "ecdsa", "elliptic_curve": "p384"},
		{"private_key_type": "rsa", "key_size": 2048}} {
		ca := do(token, "POST", "/ssh_certificate_authorities", body, 201)["id"].(string)
		pub, err := ssh.NewPublicKey(&other.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		line := string(ssh.MarshalAuthorizedKey(pub))
		do(token, "POST", "/ssh_user_certificates", map[string]any{"ssh_certificate_authority_id": ca, "public_key": line,
			"critical_options": map[string]any{"force-command": "/bin/true"}}, 201)
		do(token, "POST", "/ssh_host_certificates", map[string]any{"ssh_certificate_authority_id": ca, "public_key": line}, 201)
	}

	// Route modules with secrets.
	rnd := func(prefix string) string {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
	edge := do(token, "POST", "/edges/https", map[string]any{}, 201)["id"].(string)
	route := func() string {
		return do(token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": rnd("/r")}, 201)["id"].(string)
	}
	r1, r2 := route(), route()
	oauthSecret, oidcSecret, hookSecret, snsSecret := rnd("oauth-"), rnd("oidc-"), rnd("whsec-"), rnd("sns-")
	for s, what := range map[string]string{oauthSecret: "an OAuth client secret", oidcSecret: "an OIDC client secret",
		hookSecret: "a webhook verification secret", snsSecret: "a refused webhook secret"} {
		secrets[s] = what
	}
	base := "/edges/https/" + edge + "/routes/"
	do(token, "PUT", base+r1+"/oauth", map[string]any{"provider": map[string]any{"google": map[string]any{
		"client_id": "app.apps.googleusercontent.com", "client_secret": oauthSecret}}}, 200)
	do(token, "PUT", base+r2+"/oidc", map[string]any{"issuer": "https://accounts.example.com", "client_id": "c", "client_secret": oidcSecret}, 200)
	do(token, "PUT", base+r1+"/webhook_verification", map[string]any{"provider": "github", "secret": hookSecret}, 200)
	do(token, "PATCH", base+r2, map[string]any{"webhook_verification": map[string]any{"provider": "stripe", "secret": hookSecret}}, 200)
	do(token, "PUT", base+r2+"/webhook_verification", map[string]any{"provider": "sns", "secret": snsSecret}, 400)
	do(token, "GET", base+r1+"/oauth", nil, 200)
	do(token, "GET", "/edges/https/"+edge, nil, 200)
	do(token, "DELETE", "/api_keys/ak_"+sel, nil, 204)

	if code := p.signal(syscall.SIGINT); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	logs := p.Stderr.String()

	// The first key's token: once, in the message printed at first start, and nowhere else.
	if n := strings.Count(logs, boot); n != 1 {
		t.Errorf("the bootstrap token appears %d times in the log, want once (in the first-start message)", n)
	}
	bootSecret := boot[strings.Index(boot, "_")+1:]
	if n := strings.Count(logs, bootSecret); n != 1 {
		t.Errorf("the secret part of the bootstrap token appears %d times in the log, want once", n)
	}
	for s, what := range secrets {
		if i := strings.Index(logs, s); i >= 0 {
			t.Errorf("the log shows %s: …%s…", what, logs[max(0, i-200):min(len(logs), i+len(s)+50)])
		}
	}
	for _, s := range []string{"PRIVATE KEY", "openssh-key-v1", "client_secret", "Authorization", "Bearer"} {
		if strings.Contains(logs, s) {
			t.Errorf("the log contains %q", s)
		}
	}
	// Not vacuous: the log holds a line for every request of the session.
	if n := strings.Count(logs, `msg=request `); n < requests {
		t.Errorf("the log has %d request lines for %d requests: is request logging on?\n%s", n, requests, logs)
	}
	t.Logf("%d requests, %d bytes of log, %d secrets looked for", requests, len(logs), len(secrets)+2)
}

func ecKeyPEM(t *testing.T, k *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

// TestNoDatabasePasswordInLogs: the password of a PostgreSQL DSN appears in no log line
// (docs/operations.md, "Running several replicas", promises it never appears in edgeplane's
// messages). Runs when EDGEPLANE_TEST_POSTGRES is set.
func TestNoDatabasePasswordInLogs(t *testing.T) {
	t.Parallel()
	dsn := testdb.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	password, has := u.User.Password()
	if !has {
		// The test server trusts local connections, so any password is accepted.
		password = "pw-" + strings.Repeat("s3cr3t", 3)
		u.User = url.UserPassword(u.User.Username(), password)
	}
	p := startServe(t, "", []string{testdb.SecretKeyEnvVar()}, "--db", u.String(), "--listen", "127.0.0.1:0",
		"--log-level", "debug")
	if code := p.signal(syscall.SIGINT); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	if logs := p.Stderr.String(); strings.Contains(logs, password) {
		t.Errorf("the log shows the database password:\n%s", logs)
	}
}
