package server_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

var tlsCertificateKeys = []string{"id", "uri", "created_at", "description", "metadata", "certificate_pem", "subject_common_name",
	"subject_alternative_names", "issued_at", "not_before", "not_after", "key_usages", "extended_key_usages", "private_key_type",
	"issuer_common_name", "serial_number", "subject_organization", "subject_organizational_unit", "subject_locality",
	"subject_province", "subject_country"}

// TestTLSCertificateFields derives every field from leaves with RSA, ECDSA and Ed25519 keys in
// every supported key encoding, and checks the private key is never shown.
func TestTLSCertificateFields(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	cases := []struct {
		name    string
		leaf    *testCert
		keyPEM  string
		keyType string
	}{
		{"ecdsa pkcs8", p.leafECDSA, p.leafECDSA.keyPEM, "ecdsa"},
		{"ecdsa sec1 with parameters", p.leafECDSA, "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n" + p.leafECDSA.keyPEM1, "ecdsa"},
		{"rsa pkcs1", p.leafRSA, p.leafRSA.keyPEM1, "rsa"},
		{"rsa pkcs8", p.leafRSA, p.leafRSA.keyPEM, "rsa"},
		{"ed25519 pkcs8", p.leafEd, p.leafEd.keyPEM, "ed25519"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			chain := chainPEM(c.leaf, p.inter, p.root)
			r := e.do(tok, "POST", "/tls_certificates", map[string]any{"certificate_pem": chain, "private_key_pem": c.keyPEM, "description": c.name}).must(t, 201)
			wantKeys(t, r, tlsCertificateKeys)
			cn := c.leaf.cert.Subject.CommonName
			want := map[string]any{
				"certificate_pem":     chain,
				"subject_common_name": cn,
				"subject_alternative_names": map[string]any{
					"dns_names": []any{cn, "*." + cn}, "ips": []any{"192.0.2.10", "2001:db8::10"},
				},
				"issued_at":                   nil,
				"not_before":                  c.leaf.cert.NotBefore.UTC().Format(time.RFC3339),
				"not_after":                   c.leaf.cert.NotAfter.UTC().Format(time.RFC3339),
				"key_usages":                  []any{"digital_signature", "key_encipherment"},
				"extended_key_usages":         []any{"server_auth"},
				"private_key_type":            c.keyType,
				"issuer_common_name":          "Edgeplane Test Intermediate",
				"serial_number":               c.leaf.cert.SerialNumber.Text(16),
				"subject_organization":        "Example Org",
				"subject_organizational_unit": "Edge, Platform", // DER sorts the SET: the certificate holds them in this order
				"subject_locality":            "Lisbon",
				"subject_province":            "Lisboa",
				"subject_country":             "PT",
			}
			for k, v := range want {
				if !equalJSON(r.body[k], v) {
					t.Fatalf("%s = %v, want %v", k, r.body[k], v)
				}
			}
			if sn := r.str("serial_number"); sn != strings.ToLower(sn) || !strings.HasPrefix(sn, "abc") {
				t.Fatalf("serial_number %q should be lowercase hex", sn)
			}
			id := r.str("id")
			for _, got := range []resp{
				r,
				e.do(tok, "GET", "/tls_certificates/"+id, nil).must(t, 200),
				e.do(tok, "GET", "/tls_certificates", nil).must(t, 200),
				e.do(tok, "PATCH", "/tls_certificates/"+id, map[string]any{"metadata": "x"}).must(t, 200),
			} {
				if strings.Contains(string(got.raw), "PRIVATE KEY") || strings.Contains(string(got.raw), "private_key_pem") {
					t.Fatalf("a response shows the private key: %s", got.raw)
				}
			}
		})
	}
	e.t = t

	// Empty subject parts are "", empty SANs are [], text around the blocks and CRLF line ends
	// are accepted and the PEM is returned canonically.
	bare := makeCert(t, &x509.Certificate{
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}, p.otherKeyECDSA, p.inter)
	messy := "Bag Attributes\r\n    friendlyName: bare\r\n" + strings.ReplaceAll(bare.pem, "\n", "\r\n") + "\r\n"
	r := e.do(tok, "POST", "/tls_certificates", map[string]any{"certificate_pem": messy, "private_key_pem": "\n" + bare.keyPEM + "\n\n"}).must(t, 201)
	for _, k := range []string{"subject_common_name", "subject_organization", "subject_organizational_unit", "subject_locality", "subject_province", "subject_country"} {
		if r.body[k] != "" {
			t.Fatalf("%s should be \"\": %s", k, r.raw)
		}
	}
	if !equalJSON(r.body["subject_alternative_names"], map[string]any{"dns_names": []any{}, "ips": []any{}}) ||
		!equalJSON(r.body["key_usages"], []any{}) || !equalJSON(r.body["extended_key_usages"], []any{}) {
		t.Fatalf("empty lists should be []: %s", r.raw)
	}
	if r.str("certificate_pem") != bare.pem {
		t.Fatalf("certificate_pem not canonical:\n%q\nwant\n%q", r.str("certificate_pem"), bare.pem)
	}
}

// TestTLSCertificateRejections: unparseable PEM, a key that does not match the leaf, a chain out
// of order, and fields that cannot change, each with a 400 naming the field.
func TestTLSCertificateRejections(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	leaf, key := p.leafECDSA.pem, p.leafECDSA.keyPEM
	truncated := leaf[:len(leaf)-30]
	garbageDER := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	encrypted := string(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1, 2, 3}}))
	legacyEncrypted := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00"}, Bytes: []byte{1, 2, 3}}))
	publicKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}}))
	badKeyDER := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not DER")}))
	x25519, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, cert, key, field, contains string
	}{
		{"no certificate", "", key, "certificate_pem", "required"},
		{"no key", leaf, "", "private_key_pem", "required"},
		{"certificate not PEM", "hello", key, "certificate_pem", "not PEM"},
		{"certificate truncated", truncated, key, "certificate_pem", "truncated"},
		{"certificate damaged in the middle", leaf + strings.Replace(p.inter.pem, "M", "!", 3) + p.root.pem, key, "certificate_pem", "truncated"},
		{"key in certificate_pem", key, key, "certificate_pem", "not a CERTIFICATE"},
		{"certificate DER garbage", garbageDER, key, "certificate_pem", "does not parse"},
		{"key not PEM", leaf, "hello", "private_key_pem", "not PEM"},
		{"key truncated", leaf, key[:len(key)-20], "private_key_pem", "truncated"},
		{"key DER garbage", leaf, badKeyDER, "private_key_pem", "does not parse"},
		{"key encrypted", leaf, encrypted, "private_key_pem", "encrypted"},
		{"key encrypted legacy", leaf, legacyEncrypted, "private_key_pem", "encrypted"},
		{"public key instead", leaf, publicKey, "private_key_pem", "PUBLIC KEY"},
		{"X25519 key", leaf, string(mustPKCS8(t, x25519)), "private_key_pem", "only RSA, ECDSA and Ed25519"},
		{"two keys", leaf, key + p.leafRSA.keyPEM, "private_key_pem", "exactly one"},
		{"key of another certificate", leaf, p.leafRSA.keyPEM, "private_key_pem", "does not match"},
		{"key matches no leaf", leaf, string(mustPKCS8(t, p.otherKeyECDSA)), "private_key_pem", "does not match"},
		{"issuer first", chainPEM(p.inter, p.leafECDSA), p.leafECDSA.keyPEM, "private_key_pem", "does not match"},
		{"chain out of order", chainPEM(p.leafECDSA, p.root, p.inter), key, "certificate_pem", "not issued by"},
		{"chain with a stranger", chainPEM(p.leafECDSA, p.leafRSA), key, "certificate_pem", "not issued by"},
		{"chain skipping the intermediate", chainPEM(p.leafECDSA, p.root), key, "certificate_pem", "not issued by"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			r := e.do(tok, "POST", "/tls_certificates", map[string]any{"certificate_pem": c.cert, "private_key_pem": c.key}).wantError(t, 400, ep.CodeInvalid)
			wantField(t, r, c.field)
			if !strings.HasPrefix(r.msg(), c.field) || !strings.Contains(r.msg(), c.contains) {
				t.Fatalf("message should name %s and say %q: %s", c.field, c.contains, r.msg())
			}
		})
	}
	e.t = t
	e.do(tok, "POST", "/tls_certificates", map[string]any{"certificate_pem": []string{leaf}, "private_key_pem": key}).wantError(t, 400, ep.CodeInvalid)
	if n := len(e.do(tok, "GET", "/tls_certificates", nil).must(t, 200).items(t, "tls_certificates")); n != 0 {
		t.Fatalf("rejected uploads created %d certificates", n)
	}
	id := e.do(tok, "POST", "/tls_certificates", map[string]any{"certificate_pem": leaf, "private_key_pem": key}).must(t, 201).str("id")
	e.do(tok, "PATCH", "/tls_certificates/"+id, map[string]any{"certificate_pem": leaf}).wantError(t, 400, ep.CodeUnknownField)
	e.do(tok, "PATCH", "/tls_certificates/"+id, map[string]any{"private_key_pem": key}).wantError(t, 400, ep.CodeUnknownField)
}

func mustPKCS8(t *testing.T, key any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

var certificateAuthorityKeys = []string{"id", "uri", "created_at", "description", "metadata", "ca_pem", "subject_common_name",
	"not_before", "not_after", "key_usages", "extended_key_usages"}

// TestCertificateAuthorities derives the fields of uploaded CAs (the usage names included) and
// refuses everything that is not exactly one CA certificate with 400 ERR_NGROK_1913.
func TestCertificateAuthorities(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	root := e.do(tok, "POST", "/certificate_authorities", map[string]any{"ca_pem": p.root.pem, "description": "root"}).must(t, 201)
	wantKeys(t, root, certificateAuthorityKeys)
	for k, v := range map[string]any{
		"ca_pem": p.root.pem, "subject_common_name": "Edgeplane Test Root",
		"not_before":          p.root.cert.NotBefore.UTC().Format(time.RFC3339),
		"not_after":           p.root.cert.NotAfter.UTC().Format(time.RFC3339),
		"key_usages":          []any{"digital_signature", "cert_sign", "crl_sign"},
		"extended_key_usages": []any{"client_auth", "server_auth"},
	} {
		if !equalJSON(root.body[k], v) {
			t.Fatalf("%s = %v, want %v", k, root.body[k], v)
		}
	}
	inter := e.do(tok, "POST", "/certificate_authorities", map[string]any{"ca_pem": "leading text\n" + p.inter.pem + "\n"}).must(t, 201)
	if !equalJSON(inter.body["key_usages"], []any{"cert_sign"}) || !equalJSON(inter.body["extended_key_usages"], []any{}) || inter.str("ca_pem") != p.inter.pem {
		t.Fatalf("intermediate: %s", inter.raw)
	}
	now := time.Now()
	odd := makeCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "Odd CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:           x509.KeyUsageCertSign | x509.KeyUsageContentCommitment | x509.KeyUsageKeyAgreement | x509.KeyUsageDecipherOnly,
		ExtKeyUsage:        []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning, x509.ExtKeyUsageOCSPSigning},
		UnknownExtKeyUsage: []asn1.ObjectIdentifier{{1, 3, 6, 1, 4, 1, 99999, 1}},
	}, ecKey(t), nil)
	r := e.do(tok, "POST", "/certificate_authorities", map[string]any{"ca_pem": odd.pem}).must(t, 201)
	if !equalJSON(r.body["key_usages"], []any{"content_commitment", "key_agreement", "cert_sign", "decipher_only"}) ||
		!equalJSON(r.body["extended_key_usages"], []any{"code_signing", "ocsp_signing", "1.3.6.1.4.1.99999.1"}) {
		t.Fatalf("usages: %s", r.raw)
	}

	notCA := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "leaf"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		BasicConstraintsValid: true, IsCA: false}, ecKey(t), p.root)
	noSign := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "no sign"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageDigitalSignature}, ecKey(t), nil)
	for _, c := range []struct {
		name     string
		body     map[string]any
		contains string
	}{
		{"missing", map[string]any{}, "required"},
		{"empty", map[string]any{"ca_pem": " "}, "required"},
		{"not PEM", map[string]any{"ca_pem": "hello"}, "not PEM"},
		{"truncated", map[string]any{"ca_pem": p.root.pem[:100]}, "truncated"},
		{"a key", map[string]any{"ca_pem": p.root.keyPEM}, "not a CERTIFICATE"},
		{"DER garbage", map[string]any{"ca_pem": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 1}}))}, "does not parse"},
		{"leaf without basic constraints", map[string]any{"ca_pem": p.leafECDSA.pem}, "no basic constraints"},
		{"CA:FALSE", map[string]any{"ca_pem": notCA.pem}, "CA:FALSE"},
		{"no cert_sign", map[string]any{"ca_pem": noSign.pem}, "cert_sign"},
		{"two certificates", map[string]any{"ca_pem": chainPEM(p.inter, p.root)}, "exactly one"},
	} {
		r := e.do(tok, "POST", "/certificate_authorities", c.body).wantError(t, 400, ep.CodeNotCA)
		wantField(t, r, "ca_pem")
		if !strings.HasPrefix(r.msg(), "ca_pem") || !strings.Contains(r.msg(), c.contains) {
			t.Fatalf("%s: message should name ca_pem and say %q: %s", c.name, c.contains, r.msg())
		}
	}
	if n := len(e.do(tok, "GET", "/certificate_authorities", nil).must(t, 200).items(t, "certificate_authorities")); n != 3 {
		t.Fatalf("%d authorities, want the 3 valid ones", n)
	}
	e.do(tok, "PATCH", "/certificate_authorities/"+root.str("id"), map[string]any{"ca_pem": p.inter.pem}).wantError(t, 400, ep.CodeUnknownField)
}
