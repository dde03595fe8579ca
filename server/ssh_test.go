package server_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/server"
	"golang.org/x/crypto/ssh"
)

var sshCAKeys = []string{"id", "uri", "created_at", "description", "metadata", "public_key", "key_type"}

// TestSSHCertificateAuthorityKeys generates a CA of every key type and size and checks the
// public key it shows; the private key never appears. Its server allows a minute per request:
// the 4096-bit RSA key is generated within the request, and on a loaded two-core machine that
// alone can outlast the default ten seconds, which would answer 503 for a reason this test is
// not about.
func TestSSHCertificateAuthorityKeys(t *testing.T) {
	e := newEnvConfig(t, server.Config{RequestTimeout: time.Minute})
	tok := e.admin.token
	for _, c := range []struct {
		name    string
		body    map[string]any
		keyType string
		algo    string
		bits    int
	}{
		{"default", map[string]any{}, "ed25519", ssh.KeyAlgoED25519, 0},
		{"ed25519 any case", map[string]any{"private_key_type": "ED25519"}, "ed25519", ssh.KeyAlgoED25519, 0},
		{"ecdsa default curve", map[string]any{"private_key_type": "ecdsa"}, "ecdsa", ssh.KeyAlgoECDSA256, 0},
		{"ecdsa p256", map[string]any{"private_key_type": "ecdsa", "elliptic_curve": "p256"}, "ecdsa", ssh.KeyAlgoECDSA256, 0},
		{"ecdsa p384", map[string]any{"private_key_type": "ecdsa", "elliptic_curve": "p384"}, "ecdsa", ssh.KeyAlgoECDSA384, 0},
		{"ecdsa p521", map[string]any{"private_key_type": "ecdsa", "elliptic_curve": "P521"}, "ecdsa", ssh.KeyAlgoECDSA521, 0},
		{"rsa 2048", map[string]any{"private_key_type": "rsa", "key_size": 2048}, "rsa", ssh.KeyAlgoRSA, 2048},
		{"rsa default size", map[string]any{"private_key_type": "rsa"}, "rsa", ssh.KeyAlgoRSA, 4096}, // the one 4096-bit key of the run
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			r := e.do(tok, "POST", "/ssh_certificate_authorities", c.body).must(t, 201)
			wantKeys(t, r, sshCAKeys)
			if r.str("key_type") != c.keyType {
				t.Fatalf("key_type %q, want %q", r.str("key_type"), c.keyType)
			}
			pub, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(r.str("public_key")))
			if err != nil || len(rest) != 0 || pub.Type() != c.algo {
				t.Fatalf("public_key %q: %v (type %v, want %s)", r.str("public_key"), err, pub, c.algo)
			}
			if c.bits != 0 {
				if n := pub.(ssh.CryptoPublicKey).CryptoPublicKey().(*rsa.PublicKey).N.BitLen(); n != c.bits {
					t.Fatalf("RSA key of %d bits, want %d", n, c.bits)
				}
			}
			get := e.do(tok, "GET", "/ssh_certificate_authorities/"+r.str("id"), nil).must(t, 200)
			if get.str("public_key") != r.str("public_key") || strings.Contains(string(get.raw), "PRIVATE") {
				t.Fatalf("GET: %s", get.raw)
			}
		})
	}
}

// TestSSHCertificateAuthorityRejections: every invalid key choice is 400 naming the field.
func TestSSHCertificateAuthorityRejections(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"private_key_type": "dsa"}, "private_key_type"},
		{map[string]any{"private_key_type": "rsa", "key_size": 1024}, "key_size"},
		{map[string]any{"private_key_type": "rsa", "key_size": 3072}, "key_size"},
		{map[string]any{"private_key_type": "rsa", "key_size": -1}, "key_size"},
		{map[string]any{"private_key_type": "rsa", "elliptic_curve": "p256"}, "elliptic_curve"},
		{map[string]any{"private_key_type": "ecdsa", "elliptic_curve": "p224"}, "elliptic_curve"},
		{map[string]any{"private_key_type": "ecdsa", "key_size": 2048}, "key_size"},
		{map[string]any{"private_key_type": "ed25519", "key_size": 2048}, "key_size"},
		{map[string]any{"elliptic_curve": "p256"}, "elliptic_curve"},
		{map[string]any{"private_key_type": "rsa", "key_size": "big"}, "key_size"},
		{map[string]any{"private_key_type": 1}, "private_key_type"},
	} {
		r := e.do(tok, "POST", "/ssh_certificate_authorities", c.body).wantError(t, 400, ep.CodeInvalid)
		wantField(t, r, c.field)
	}
	if n := len(e.do(tok, "GET", "/ssh_certificate_authorities", nil).must(t, 200).items(t, "ssh_certificate_authorities")); n != 0 {
		t.Fatalf("rejected creates made %d CAs", n)
	}
	id := e.do(tok, "POST", "/ssh_certificate_authorities", nil).must(t, 201).str("id")
	for _, f := range []string{"private_key_type", "public_key", "key_type"} {
		e.do(tok, "PATCH", "/ssh_certificate_authorities/"+id, map[string]any{f: "rsa"}).wantError(t, 400, ep.CodeUnknownField)
	}
}

var sshUserCertKeys = []string{"id", "uri", "created_at", "description", "metadata", "public_key", "key_type",
	"ssh_certificate_authority_id", "principals", "critical_options", "extensions", "valid_after", "valid_until", "certificate"}

// parseCert parses the certificate field of a response.
func parseCert(t *testing.T, r resp) *ssh.Certificate {
	t.Helper()
	k, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(r.str("certificate")))
	if err != nil || len(rest) != 0 {
		t.Fatalf("certificate %q does not parse: %v", r.str("certificate"), err)
	}
	cert, ok := k.(*ssh.Certificate)
	if !ok {
		t.Fatalf("certificate is a %T", k)
	}
	return cert
}

// verifyCert checks a signed certificate with x/crypto/ssh: the signature by the CA key, the
// certified key, the type, the principals and the validity window.
func verifyCert(t *testing.T, cert *ssh.Certificate, caPublic, publicKey string, certType uint32, principals []string, after, before time.Time) {
	t.Helper()
	ca, _, _, _, err := ssh.ParseAuthorizedKey([]byte(caPublic))
	if err != nil {
		t.Fatal(err)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(publicKey))
	if err != nil {
		t.Fatal(err)
	}
	if string(cert.SignatureKey.Marshal()) != string(ca.Marshal()) {
		t.Fatal("the certificate is not signed by the CA's key")
	}
	if string(cert.Key.Marshal()) != string(key.Marshal()) {
		t.Fatal("the certificate certifies another key")
	}
	if cert.CertType != certType || !slices.Equal(cert.ValidPrincipals, principals) {
		t.Fatalf("type %d principals %v, want %d %v", cert.CertType, cert.ValidPrincipals, certType, principals)
	}
	if int64(cert.ValidAfter) != after.Unix() || int64(cert.ValidBefore) != before.Unix() {
		t.Fatalf("validity %d..%d, want %d..%d", cert.ValidAfter, cert.ValidBefore, after.Unix(), before.Unix())
	}
	if ca.Type() == ssh.KeyAlgoRSA && cert.Signature.Format != ssh.KeyAlgoRSASHA512 {
		t.Fatalf("an RSA CA signed with %s; OpenSSH refuses SHA-1 ssh-rsa signatures", cert.Signature.Format)
	}
	checker := &ssh.CertChecker{
		IsUserAuthority:          func(auth ssh.PublicKey) bool { return string(auth.Marshal()) == string(ca.Marshal()) },
		IsHostAuthority:          func(auth ssh.PublicKey, _ string) bool { return string(auth.Marshal()) == string(ca.Marshal()) },
		SupportedCriticalOptions: []string{"force-command", "source-address"},
		Clock:                    func() time.Time { return after.Add(time.Second) },
	}
	principal := "anyone"
	if len(principals) > 0 {
		principal = principals[0]
	}
	if err := checker.CheckCert(principal, cert); err != nil {
		t.Fatalf("x/crypto/ssh rejects the certificate: %v", err)
	}
	if len(principals) > 0 {
		if err := checker.CheckCert("mallory", cert); err == nil {
			t.Fatal("the certificate is valid for a principal it does not name")
		}
	}
	checker.Clock = func() time.Time { return before.Add(time.Second) }
	if err := checker.CheckCert(principal, cert); err == nil {
		t.Fatal("the certificate is valid after valid_until")
	}
	checker.Clock = func() time.Time { return after.Add(-time.Second) }
	if err := checker.CheckCert(principal, cert); err == nil {
		t.Fatal("the certificate is valid before valid_after")
	}
	// A forged signature must fail: flip a byte of the signature blob.
	forged := *cert
	sig := *cert.Signature
	sig.Blob = append([]byte(nil), sig.Blob...)
	sig.Blob[len(sig.Blob)-1] ^= 1
	forged.Signature = &sig
	checker.Clock = func() time.Time { return after.Add(time.Second) }
	if err := checker.CheckCert(principal, &forged); err == nil {
		t.Fatal("a certificate with a damaged signature passes: the signature is not checked")
	}
}

// keygenList runs ssh-keygen -L on the certificate and returns its output, or skips when
// ssh-keygen is not installed.
func keygenList(t *testing.T, certificate string) string {
	t.Helper()
	bin, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen not installed (apt-get install openssh-client): skipping the OpenSSH cross-check")
	}
	path := filepath.Join(t.TempDir(), "id-cert.pub")
	if err := os.WriteFile(path, []byte(certificate+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-L", "-f", path)
	cmd.Env = append(os.Environ(), "TZ=UTC")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen -L: %v\n%s", err, out)
	}
	return string(out)
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("ssh-keygen -L output lacks %q:\n%s", w, out)
		}
	}
}

func sshTime(s string) string {
	tm, _ := time.Parse(time.RFC3339, s)
	return tm.UTC().Format("2006-01-02T15:04:05")
}

// TestSSHUserCertificates signs user certificates with CAs of every key type for keys of every
// type, with the defaults and with every option given, and verifies each certificate with
// x/crypto/ssh and with ssh-keygen -L.
func TestSSHUserCertificates(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	cas := map[string]resp{}
	for _, kt := range []string{"ed25519", "ecdsa", "rsa"} {
		body := map[string]any{"private_key_type": kt}
		if kt == "rsa" {
			body["key_size"] = 2048
		}
		cas[kt] = e.do(tok, "POST", "/ssh_certificate_authorities", body).must(t, 201)
	}
	keys := map[string]string{"ed25519": p.sshEd25519, "ecdsa": p.sshECDSA, "rsa": p.sshRSA}
	caAlgo := map[string]string{"ed25519": "ssh-ed25519", "ecdsa": "ecdsa-sha2-nistp256", "rsa": "rsa-sha2-512"}
	for caType, ca := range cas {
		for keyType, key := range keys {
			t.Run("ca "+caType+" key "+keyType+" defaults", func(t *testing.T) {
				e.t = t
				r := e.do(tok, "POST", "/ssh_user_certificates", map[string]any{
					"ssh_certificate_authority_id": ca.str("id"), "public_key": key + " someone@laptop",
				}).must(t, 201)
				wantKeys(t, r, sshUserCertKeys)
				created, _ := time.Parse(time.RFC3339, r.str("created_at"))
				if r.str("key_type") != keyType || r.str("public_key") != key || r.str("ssh_certificate_authority_id") != ca.str("id") ||
					!equalJSON(r.body["principals"], []any{}) || !equalJSON(r.body["critical_options"], map[string]any{}) ||
					!equalJSON(r.body["extensions"], map[string]any{"permit-pty": "", "permit-user-rc": ""}) ||
					r.str("valid_after") != r.str("created_at") || r.str("valid_until") != created.Add(24*time.Hour).Format(time.RFC3339) {
					t.Fatalf("defaults: %s", r.raw)
				}
				cert := parseCert(t, r)
				verifyCert(t, cert, ca.str("public_key"), key, ssh.UserCert, nil, created, created.Add(24*time.Hour))
				if cert.KeyId != r.str("id") || len(cert.CriticalOptions) != 0 ||
					len(cert.Extensions) != 2 || cert.Extensions["permit-pty"] != "" || cert.Extensions["permit-user-rc"] != "" {
					t.Fatalf("key id %q options %v extensions %v", cert.KeyId, cert.CriticalOptions, cert.Extensions)
				}
				out := keygenList(t, r.str("certificate"))
				wantLines(t, out, "user certificate", `Key ID: "`+r.str("id")+`"`, "(using "+caAlgo[caType]+")",
					"Valid: from "+sshTime(r.str("valid_after"))+" to "+sshTime(r.str("valid_until")),
					"Principals: (none)", "Critical Options: (none)", "permit-pty", "permit-user-rc")
			})
		}
	}

	t.Run("every option", func(t *testing.T) {
		e.t = t
		ca := cas["ed25519"]
		r := e.do(tok, "POST", "/ssh_user_certificates", map[string]any{
			"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshECDSA,
			"principals":       []any{"alice", "bob"},
			"critical_options": map[string]any{"force-command": "/usr/bin/uptime", "source-address": "10.0.0.0/8,2001:db8::/32,192.0.2.7"},
			"extensions":       map[string]any{"permit-agent-forwarding": "", "login@example.com": "alice"},
			"valid_after":      "2030-01-01T01:00:00.75+01:00",
			"valid_until":      "2030-01-08T00:00:00Z",
			"description":      "alice and bob", "metadata": `{"ticket":1}`,
		}).must(t, 201)
		if r.str("valid_after") != "2030-01-01T00:00:00Z" || r.str("valid_until") != "2030-01-08T00:00:00Z" {
			t.Fatalf("times should be UTC whole seconds: %s", r.raw)
		}
		cert := parseCert(t, r)
		after, _ := time.Parse(time.RFC3339, "2030-01-01T00:00:00Z")
		verifyCert(t, cert, ca.str("public_key"), p.sshECDSA, ssh.UserCert, []string{"alice", "bob"}, after, after.Add(7*24*time.Hour))
		if cert.CriticalOptions["force-command"] != "/usr/bin/uptime" || cert.CriticalOptions["source-address"] != "10.0.0.0/8,2001:db8::/32,192.0.2.7" ||
			len(cert.Extensions) != 2 || cert.Extensions["login@example.com"] != "alice" {
			t.Fatalf("options %v extensions %v", cert.CriticalOptions, cert.Extensions)
		}
		wantLines(t, keygenList(t, r.str("certificate")), "Valid: from 2030-01-01T00:00:00 to 2030-01-08T00:00:00",
			"alice", "bob", "force-command /usr/bin/uptime", "source-address 10.0.0.0/8,2001:db8::/32,192.0.2.7",
			"permit-agent-forwarding", "login@example.com")
	})

	t.Run("no extensions", func(t *testing.T) {
		e.t = t
		r := e.do(tok, "POST", "/ssh_user_certificates", map[string]any{
			"ssh_certificate_authority_id": cas["ecdsa"].str("id"), "public_key": p.sshEd25519, "extensions": map[string]any{},
		}).must(t, 201)
		if !equalJSON(r.body["extensions"], map[string]any{}) || len(parseCert(t, r).Extensions) != 0 {
			t.Fatalf("extensions {} should give none: %s", r.raw)
		}
		wantLines(t, keygenList(t, r.str("certificate")), "Extensions: (none)")
	})

	t.Run("valid_after only", func(t *testing.T) {
		e.t = t
		// Within 24 hours of now: valid_until still defaults to 24 hours after creation.
		soon := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
		r := e.do(tok, "POST", "/ssh_user_certificates", map[string]any{
			"ssh_certificate_authority_id": cas["ed25519"].str("id"), "public_key": p.sshEd25519, "valid_after": soon.Format(time.RFC3339),
		}).must(t, 201)
		created, _ := time.Parse(time.RFC3339, r.str("created_at"))
		if r.str("valid_after") != soon.Format(time.RFC3339) || r.str("valid_until") != created.Add(24*time.Hour).Format(time.RFC3339) {
			t.Fatalf("validity: %s", r.raw)
		}
	})
}

// skPublicKey is a security-key (sk-ssh-ed25519@openssh.com) public key line.
func skPublicKey(t *testing.T) string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blob := ssh.Marshal(struct {
		Name        string
		Key         []byte
		Application string
	}{"sk-ssh-ed25519@openssh.com", pub, "ssh:"})
	return "sk-ssh-ed25519@openssh.com " + base64.StdEncoding.EncodeToString(blob)
}

// TestSSHUserCertificateRejections: every invalid request is 400 naming the field, and creates
// nothing.
func TestSSHUserCertificateRejections(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	ca := e.do(tok, "POST", "/ssh_certificate_authorities", nil).must(t, 201)
	caID := ca.str("id")
	other := e.newAccount("other")
	otherCA := e.do(other.token, "POST", "/ssh_certificate_authorities", nil).must(t, 201).str("id")
	missingCA, _ := ep.NewID("sshca")
	signed := e.do(tok, "POST", "/ssh_user_certificates", map[string]any{"ssh_certificate_authority_id": caID, "public_key": p.sshEd25519}).must(t, 201)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	base := func(extra map[string]any) map[string]any {
		return merge(map[string]any{"ssh_certificate_authority_id": caID, "public_key": p.sshEd25519}, extra)
	}
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no CA", map[string]any{"public_key": p.sshEd25519}, "ssh_certificate_authority_id"},
		{"missing CA", base(map[string]any{"ssh_certificate_authority_id": missingCA}), "ssh_certificate_authority_id"},
		{"another account's CA", base(map[string]any{"ssh_certificate_authority_id": otherCA}), "ssh_certificate_authority_id"},
		{"a TLS certificate id", base(map[string]any{"ssh_certificate_authority_id": "cert_" + strings.Repeat("A", 27)}), "ssh_certificate_authority_id"},
		{"no public key", map[string]any{"ssh_certificate_authority_id": caID}, "public_key"},
		{"garbage key", base(map[string]any{"public_key": "ssh-ed25519 !!!"}), "public_key"},
		{"PEM key", base(map[string]any{"public_key": p.leafECDSA.pem}), "public_key"},
		{"two keys", base(map[string]any{"public_key": p.sshEd25519 + "\n" + p.sshECDSA}), "public_key"},
		{"key with options", base(map[string]any{"public_key": `command="ls" ` + p.sshEd25519}), "public_key"},
		{"a certificate", base(map[string]any{"public_key": signed.str("certificate")}), "public_key"},
		{"weak RSA", base(map[string]any{"public_key": sshPublic(t, weak.Public())}), "public_key"},
		{"security key", base(map[string]any{"public_key": skPublicKey(t)}), "public_key"},
		{"empty principal", base(map[string]any{"principals": []any{"alice", ""}}), "principals[1]"},
		{"principal with a space", base(map[string]any{"principals": []any{"a b"}}), "principals[0]"},
		{"principals not a list", base(map[string]any{"principals": "alice"}), "principals"},
		{"unknown critical option", base(map[string]any{"critical_options": map[string]any{"permit-x11": ""}}), "critical_options"},
		{"empty force-command", base(map[string]any{"critical_options": map[string]any{"force-command": " "}}), "critical_options.force-command"},
		{"empty source-address", base(map[string]any{"critical_options": map[string]any{"source-address": ""}}), "critical_options.source-address"},
		{"bad source-address", base(map[string]any{"critical_options": map[string]any{"source-address": "10.0.0.0/8,office"}}), "critical_options.source-address"},
		{"source-address host bits", base(map[string]any{"critical_options": map[string]any{"source-address": "10.0.0.1/8"}}), "critical_options.source-address"},
		{"source-address empty entry", base(map[string]any{"critical_options": map[string]any{"source-address": "10.0.0.0/8,"}}), "critical_options.source-address"},
		{"critical option not a string", base(map[string]any{"critical_options": map[string]any{"force-command": 5}}), "critical_options"},
		{"empty extension name", base(map[string]any{"extensions": map[string]any{"": ""}}), "extensions"},
		{"extension name with a space", base(map[string]any{"extensions": map[string]any{"permit pty": ""}}), "extensions"},
		{"valid_after not a time", base(map[string]any{"valid_after": "yesterday"}), "valid_after"},
		{"valid_until not a time", base(map[string]any{"valid_until": "2030-13-01T00:00:00Z"}), "valid_until"},
		{"valid_after before 1970", base(map[string]any{"valid_after": "1960-01-01T00:00:00Z"}), "valid_after"},
		{"valid_until before valid_after", base(map[string]any{"valid_after": "2030-01-02T00:00:00Z", "valid_until": "2030-01-01T00:00:00Z"}), "valid_until"},
		{"valid_until equal to valid_after", base(map[string]any{"valid_after": "2030-01-01T00:00:00Z", "valid_until": "2030-01-01T00:00:00.9Z"}), "valid_until"},
		{"valid_after beyond the default valid_until", base(map[string]any{"valid_after": "2099-01-01T00:00:00Z"}), "valid_until"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			r := e.do(tok, "POST", "/ssh_user_certificates", c.body).wantError(t, 400, ep.CodeInvalid)
			wantField(t, r, c.field)
		})
	}
	e.t = t
	if n := len(e.do(tok, "GET", "/ssh_user_certificates", nil).must(t, 200).items(t, "ssh_user_certificates")); n != 1 {
		t.Fatalf("rejected creates made certificates: %d", n)
	}
	for _, f := range []string{"public_key", "principals", "valid_until", "certificate", "ssh_certificate_authority_id"} {
		e.do(tok, "PATCH", "/ssh_user_certificates/"+signed.str("id"), map[string]any{f: "x"}).wantError(t, 400, ep.CodeUnknownField)
	}
}

var sshHostCertKeys = []string{"id", "uri", "created_at", "description", "metadata", "public_key", "key_type",
	"ssh_certificate_authority_id", "principals", "valid_after", "valid_until", "certificate"}

// TestSSHHostCertificates: host certificates default to one year, verify as host certificates
// with x/crypto/ssh and ssh-keygen, and take no user options.
func TestSSHHostCertificates(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	ca := e.do(tok, "POST", "/ssh_certificate_authorities", map[string]any{"private_key_type": "ecdsa", "elliptic_curve": "p384"}).must(t, 201)
	r := e.do(tok, "POST", "/ssh_host_certificates", map[string]any{
		"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshRSA, "principals": []any{"bastion.example.com", "192.0.2.1"},
	}).must(t, 201)
	wantKeys(t, r, sshHostCertKeys)
	created, _ := time.Parse(time.RFC3339, r.str("created_at"))
	if r.str("key_type") != "rsa" || r.str("valid_after") != r.str("created_at") || r.str("valid_until") != created.Add(365*24*time.Hour).Format(time.RFC3339) {
		t.Fatalf("host certificate defaults: %s", r.raw)
	}
	cert := parseCert(t, r)
	verifyCert(t, cert, ca.str("public_key"), p.sshRSA, ssh.HostCert, []string{"bastion.example.com", "192.0.2.1"}, created, created.Add(365*24*time.Hour))
	caKey, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(ca.str("public_key")))
	checker := &ssh.CertChecker{
		IsHostAuthority: func(auth ssh.PublicKey, _ string) bool { return string(auth.Marshal()) == string(caKey.Marshal()) },
		Clock:           func() time.Time { return created.Add(time.Hour) },
	}
	if err := checker.CheckHostKey("bastion.example.com:22", nil, cert); err != nil {
		t.Fatalf("x/crypto/ssh rejects the host certificate: %v", err)
	}
	if err := checker.CheckHostKey("evil.example.com:22", nil, cert); err == nil {
		t.Fatal("the host certificate is valid for a host it does not name")
	}
	if len(cert.CriticalOptions) != 0 || len(cert.Extensions) != 0 || cert.KeyId != r.str("id") {
		t.Fatalf("host certificate options %v extensions %v key id %q", cert.CriticalOptions, cert.Extensions, cert.KeyId)
	}
	wantLines(t, keygenList(t, r.str("certificate")), "host certificate", "(using ecdsa-sha2-nistp384)", "bastion.example.com", "192.0.2.1",
		"Valid: from "+sshTime(r.str("valid_after"))+" to "+sshTime(r.str("valid_until")))

	for _, c := range []struct {
		body  map[string]any
		code  int
		field string
	}{
		{map[string]any{"public_key": p.sshRSA}, ep.CodeInvalid, "ssh_certificate_authority_id"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id")}, ep.CodeInvalid, "public_key"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id"), "public_key": "nope"}, ep.CodeInvalid, "public_key"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshRSA, "principals": []any{""}}, ep.CodeInvalid, "principals[0]"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshRSA, "valid_after": "2031-01-01T00:00:00Z", "valid_until": "2030-01-01T00:00:00Z"}, ep.CodeInvalid, "valid_until"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshRSA, "valid_until": "soon"}, ep.CodeInvalid, "valid_until"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshRSA, "extensions": map[string]any{}}, ep.CodeUnknownField, "extensions"},
		{map[string]any{"ssh_certificate_authority_id": ca.str("id"), "public_key": p.sshRSA, "critical_options": map[string]any{}}, ep.CodeUnknownField, "critical_options"},
	} {
		wantField(t, e.do(tok, "POST", "/ssh_host_certificates", c.body).wantError(t, 400, c.code), c.field)
	}
}

// TestSSHCertificateAuthorityInUse: a CA with user or host certificates cannot be deleted
// (409 ERR_NGROK_1964); once they are gone it can.
func TestSSHCertificateAuthorityInUse(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	ca := e.do(tok, "POST", "/ssh_certificate_authorities", nil).must(t, 201).str("id")
	user := e.do(tok, "POST", "/ssh_user_certificates", map[string]any{"ssh_certificate_authority_id": ca, "public_key": p.sshEd25519}).must(t, 201).str("id")
	host := e.do(tok, "POST", "/ssh_host_certificates", map[string]any{"ssh_certificate_authority_id": ca, "public_key": p.sshEd25519}).must(t, 201).str("id")
	r := e.do(tok, "DELETE", "/ssh_certificate_authorities/"+ca, nil).wantError(t, 409, ep.CodeSSHCAInUse)
	if !strings.Contains(r.msg(), ca) {
		t.Fatalf("message should name the CA: %s", r.msg())
	}
	e.do(tok, "DELETE", "/ssh_user_certificates/"+user, nil).must(t, 204)
	e.do(tok, "DELETE", "/ssh_certificate_authorities/"+ca, nil).wantError(t, 409, ep.CodeSSHCAInUse)
	e.do(tok, "DELETE", "/ssh_host_certificates/"+host, nil).must(t, 204)
	e.do(tok, "DELETE", "/ssh_certificate_authorities/"+ca, nil).must(t, 204)
	e.do(tok, "POST", "/ssh_user_certificates", map[string]any{"ssh_certificate_authority_id": ca, "public_key": p.sshEd25519}).wantError(t, 400, ep.CodeInvalid)
}
