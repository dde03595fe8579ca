package edgeplane

import (
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pki"
)

// SSH certificate authorities and the user and host certificates they sign. Every key is made
// by the test.

// TestValidateSSHCertificateAuthorities: the key type is rsa, ecdsa or ed25519 (default), in any
// case; rsa takes key_size 2048 or 4096 (default) and no curve, ecdsa a curve of p256 (default),
// p384 or p521 and no key_size, ed25519 neither. Validate makes the key pair.
func TestValidateSSHCertificateAuthorities(t *testing.T) {
	ca := fromJSON[SSHCertificateAuthorityCreate]
	runCases(t, []vcase{
		pass("default ed25519", ca(`{}`)),
		pass("ed25519", ca(`{"private_key_type": "ed25519", "description": "users"}`)),
		pass("ed25519 in capitals", ca(`{"private_key_type": "ED25519"}`)),
		pass("ed25519 with empty curve and zero size", ca(`{"private_key_type": "ed25519", "elliptic_curve": "", "key_size": 0}`)),
		pass("ecdsa with the default curve", ca(`{"private_key_type": "ecdsa"}`)),
		pass("ecdsa p384", ca(`{"private_key_type": "ecdsa", "elliptic_curve": "p384"}`)),
		pass("ecdsa P521", ca(`{"private_key_type": "ecdsa", "elliptic_curve": "P521"}`)),
		pass("rsa 2048", ca(`{"private_key_type": "rsa", "key_size": 2048}`)),
		failMsg("unknown key type", ca(`{"private_key_type": "dsa"}`), "private_key_type", CodeInvalid, `got "dsa"`),
		fail("key type with a space", ca(`{"private_key_type": "rsa "}`), "private_key_type", CodeInvalid),
		failMsg("rsa 1024", ca(`{"private_key_type": "rsa", "key_size": 1024}`), "key_size", CodeInvalid, "2048 or 4096"),
		fail("rsa 3072", ca(`{"private_key_type": "rsa", "key_size": 3072}`), "key_size", CodeInvalid),
		fail("rsa 8192", ca(`{"private_key_type": "rsa", "key_size": 8192}`), "key_size", CodeInvalid),
		fail("negative size", ca(`{"private_key_type": "rsa", "key_size": -2048}`), "key_size", CodeInvalid),
		failMsg("rsa with a curve", ca(`{"private_key_type": "rsa", "key_size": 2048, "elliptic_curve": "p256"}`), "elliptic_curve", CodeInvalid, "only to ecdsa"),
		failMsg("ecdsa p224", ca(`{"private_key_type": "ecdsa", "elliptic_curve": "p224"}`), "elliptic_curve", CodeInvalid, `got "p224"`),
		fail("ecdsa secp256r1", ca(`{"private_key_type": "ecdsa", "elliptic_curve": "secp256r1"}`), "elliptic_curve", CodeInvalid),
		failMsg("ecdsa with a size", ca(`{"private_key_type": "ecdsa", "key_size": 256}`), "key_size", CodeInvalid, "only to rsa"),
		fail("ed25519 with a curve", ca(`{"elliptic_curve": "p256"}`), "elliptic_curve", CodeInvalid),
		fail("ed25519 with a size", ca(`{"private_key_type": "ed25519", "key_size": 4096}`), "key_size", CodeInvalid),
		fail("annotations first", ca(`{"description": "a\nb", "private_key_type": "x"}`), "description", CodeInvalid),
	})
	if testing.Short() {
		return
	}
	// The RSA default of 4096 bits, once (the key takes a moment to make).
	runCases(t, []vcase{pass("rsa with the default size", ca(`{"private_key_type": "rsa"}`))})
}

// sshKeys are public keys for the certificate tests: keys of each type, a short RSA key and a
// certificate, in authorized_keys format.
type sshKeys struct{ ed, ecdsa, rsa, shortRSA, cert string }

func newSSHKeys(t *testing.T) sshKeys {
	gen := func(typ string, bits int, curve string) (string, string) {
		priv, pub, err := pki.GenerateKey(typ, bits, curve)
		if err != nil {
			t.Fatal(err)
		}
		return priv, pub
	}
	var k sshKeys
	caPriv, _ := gen(pki.KeyEd25519, 0, "")
	_, k.ed = gen(pki.KeyEd25519, 0, "")
	_, k.ecdsa = gen(pki.KeyECDSA, 0, "p384")
	_, k.rsa = gen(pki.KeyRSA, 2048, "")
	_, k.shortRSA = gen(pki.KeyRSA, 1024, "")
	cert, err := pki.SignCertificate(caPriv, pki.CertRequest{PublicKey: k.ed, KeyID: "x",
		ValidAfter: time.Now(), ValidBefore: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	k.cert = cert
	return k
}

// TestValidateSSHCertificates: user and host certificates need a CA id and one bare public key
// (no options, no certificate, RSA of 2048 bits or more); principals are non-empty without
// spaces; valid_after and valid_until are RFC 3339 times from 1970 on. A user certificate's
// critical options are force-command (a command) and source-address (CIDR ranges), and its
// extensions have names without spaces.
func TestValidateSSHCertificates(t *testing.T) {
	k := newSSHKeys(t)
	user := func(pub, rest string) *SSHUserCertificateCreate {
		return fromJSON[SSHUserCertificateCreate](`{"ssh_certificate_authority_id": "sshca_x", "public_key": "` + pub + `"` + rest + `}`)
	}
	host := func(pub, rest string) *SSHHostCertificateCreate {
		return fromJSON[SSHHostCertificateCreate](`{"ssh_certificate_authority_id": "sshca_x", "public_key": "` + pub + `"` + rest + `}`)
	}
	critical := func(name, value string) *SSHUserCertificateCreate {
		return &SSHUserCertificateCreate{sshCertFields: sshCertFields{SSHCertificateAuthorityID: ptr("sshca_x"), PublicKey: &k.ed},
			CriticalOptions: map[string]string{name: value}}
	}
	runCases(t, []vcase{
		pass("user ed25519", user(k.ed, "")),
		pass("user ecdsa with a comment", user(k.ecdsa+" alice@laptop", "")),
		pass("user rsa", user(k.rsa, `, "principals": ["alice", "root"]`)),
		pass("user every field", user(k.ed, `, "principals": ["alice"], "valid_after": "2026-01-02T15:04:05Z", "valid_until": "2026-01-03T15:04:05.5+02:00",
			"critical_options": {"force-command": "/usr/bin/backup", "source-address": "10.0.0.0/8,192.0.2.1,2001:db8::/32"},
			"extensions": {"permit-pty": "", "permit-port-forwarding": "", "login@example.com": "alice"}}`)),
		pass("user without extensions", user(k.ed, `, "extensions": {}`)),
		pass("empty times are the defaults", user(k.ed, `, "valid_after": "", "valid_until": null`)),
		pass("valid from 1970", user(k.ed, `, "valid_after": "1970-01-01T00:00:00Z"`)),
		failMsg("no CA", fromJSON[SSHUserCertificateCreate](`{"public_key": "`+k.ed+`"}`), "ssh_certificate_authority_id", CodeInvalid, "is required"),
		fail("empty CA", fromJSON[SSHUserCertificateCreate](`{"ssh_certificate_authority_id": "", "public_key": "x"}`), "ssh_certificate_authority_id", CodeInvalid),
		failMsg("no public key", fromJSON[SSHUserCertificateCreate](`{"ssh_certificate_authority_id": "sshca_x"}`), "public_key", CodeInvalid, "is required"),
		failMsg("public key not a key", user("AAAAC3NzaC1lZDI1NTE5", ""), "public_key", CodeInvalid, "authorized_keys format"),
		fail("public key damaged", user(k.ed[:40], ""), "public_key", CodeInvalid),
		failMsg("public key with options", user(`command=\"ls\" `+k.ed, ""), "public_key", CodeInvalid, "without authorized_keys options"),
		failMsg("two public keys", user(k.ed+`\n`+k.ecdsa, ""), "public_key", CodeInvalid, "exactly one public key"),
		failMsg("short RSA key", user(k.shortRSA, ""), "public_key", CodeInvalid, "at least 2048 bits"),
		failMsg("a certificate", user(k.cert, ""), "public_key", CodeInvalid, "is a certificate"),
		failMsg("empty principal", user(k.ed, `, "principals": ["alice", ""]`), "principals[1]", CodeInvalid, "not a valid principal"),
		fail("principal with a space", user(k.ed, `, "principals": ["alice smith"]`), "principals[0]", CodeInvalid),
		fail("principal with a tab", user(k.ed, `, "principals": ["a\tb"]`), "principals[0]", CodeInvalid),
		failMsg("valid_after a date", user(k.ed, `, "valid_after": "2026-01-02"`), "valid_after", CodeInvalid, "RFC 3339"),
		fail("valid_after a Unix time", user(k.ed, `, "valid_after": "1767366245"`), "valid_after", CodeInvalid),
		failMsg("valid_after before 1970", user(k.ed, `, "valid_after": "1969-12-31T23:59:59Z"`), "valid_after", CodeInvalid, "before 1970"),
		fail("valid_until without zone", user(k.ed, `, "valid_until": "2026-01-02T15:04:05"`), "valid_until", CodeInvalid),
		fail("key before principals", user("x", `, "principals": [""]`), "public_key", CodeInvalid),
		failMsg("empty force-command", critical("force-command", " "), "critical_options.force-command", CodeInvalid, "command to force"),
		failMsg("empty source-address", critical("source-address", ""), "critical_options.source-address", CodeInvalid, "must list"),
		failMsg("source-address with host bits", critical("source-address", "10.0.0.1/8"), "critical_options.source-address", CodeInvalid, `did you mean "10.0.0.0/8"`),
		fail("source-address with a space", critical("source-address", "10.0.0.0/8, 192.0.2.1"), "critical_options.source-address", CodeInvalid),
		fail("source-address with an empty entry", critical("source-address", "10.0.0.0/8,"), "critical_options.source-address", CodeInvalid),
		fail("source-address a hostname", critical("source-address", "bastion.example.com"), "critical_options.source-address", CodeInvalid),
		failMsg("unknown critical option", critical("permit-x11-forwarding", ""), "critical_options", CodeInvalid, "only force-command and source-address"),
		failMsg("empty extension name", user(k.ed, `, "extensions": {"": ""}`), "extensions", CodeInvalid, "not a valid extension name"),
		fail("extension name with a space", user(k.ed, `, "extensions": {"permit pty": ""}`), "extensions", CodeInvalid),
		fail("critical options before extensions", user(k.ed, `, "critical_options": {"x": ""}, "extensions": {"": ""}`), "critical_options", CodeInvalid),
		fail("user annotations first", user("x", `, "description": "a\nb"`), "description", CodeInvalid),
		pass("host", host(k.ecdsa, `, "principals": ["host.example.com", "192.0.2.1"], "valid_until": "2027-01-01T00:00:00Z"`)),
		fail("host without CA", fromJSON[SSHHostCertificateCreate](`{"public_key": "`+k.ed+`"}`), "ssh_certificate_authority_id", CodeInvalid),
		fail("host with a short RSA key", host(k.shortRSA, ""), "public_key", CodeInvalid),
		fail("host principal with a space", host(k.ed, `, "principals": ["a b"]`), "principals[0]", CodeInvalid),
		fail("host valid_until not a time", host(k.ed, `, "valid_until": "tomorrow"`), "valid_until", CodeInvalid),
		fail("host annotations first", host(k.ed, `, "metadata": "`+strings.Repeat("m", MaxMetadata+1)+`"`), "metadata", CodeInvalid),
	})
}

// TestValidateSSHCertificatesCanonical: Validate keeps the key without its comment and the
// times in UTC whole seconds.
func TestValidateSSHCertificatesCanonical(t *testing.T) {
	k := newSSHKeys(t)
	c := fromJSON[SSHUserCertificateCreate](`{"ssh_certificate_authority_id": "sshca_x", "public_key": "` + k.ed + ` alice@laptop",
		"valid_after": "2026-01-02T17:04:05.9+02:00"}`)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if *c.PublicKey != k.ed || c.keyType != pki.KeyEd25519 {
		t.Errorf("public key %q (%s), want %q", *c.PublicKey, c.keyType, k.ed)
	}
	if want := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC); !c.validAfter.Equal(want) || c.validAfter.Location() != time.UTC {
		t.Errorf("valid_after %v, want %v", c.validAfter, want)
	}
}
