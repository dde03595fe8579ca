package edgeplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// Uploaded TLS certificates and certificate authorities. Every certificate and key is made here,
// by the test, with crypto/x509: none is committed.

// testCert is a certificate made for a test, with its key.
type testCert struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// pem is the certificate's PEM block.
func (c *testCert) pem() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw}))
}

// pkcs8 is the key's PKCS #8 PEM.
func (c *testCert) pkcs8(t *testing.T) string {
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// newKey makes a key of the type: rsa (2048 bits), ecdsa (P-256) or ed25519.
func newKey(t *testing.T, typ string) crypto.Signer {
	var (
		k   crypto.Signer
		err error
	)
	switch typ {
	case "rsa":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ecdsa":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		_, k, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue makes a certificate of tpl for key, signed by parent (self-signed when parent is nil).
func issue(t *testing.T, tpl *x509.Certificate, key crypto.Signer, parent *testCert) *testCert {
	t.Helper()
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl.SerialNumber = serial
	tpl.NotBefore = time.Now().Add(-time.Hour)
	tpl.NotAfter = time.Now().Add(24 * time.Hour)
	signer, issuer := key, tpl
	if parent != nil {
		signer, issuer = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, issuer, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCert{cert: c, key: key}
}

// caTemplate is an authority's template: CA:TRUE with cert_sign.
func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, BasicConstraintsValid: true, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
}

// leafTemplate is a server certificate's template.
func leafTemplate(name string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}

// TestValidateTLSCertificates: certificate_pem is the chain, leaf first, each certificate issued
// by the next; private_key_pem is the leaf's unencrypted key in PKCS #8, PKCS #1 or SEC 1. Every
// refusal is 400 ERR_NGROK_215 naming the field at fault.
func TestValidateTLSCertificates(t *testing.T) {
	root := issue(t, caTemplate("Test Root"), newKey(t, "ecdsa"), nil)
	inter := issue(t, caTemplate("Test Intermediate"), newKey(t, "ecdsa"), root)
	leaf := issue(t, leafTemplate("app.example.com"), newKey(t, "ecdsa"), inter)
	rsaLeaf := issue(t, leafTemplate("rsa.example.com"), newKey(t, "rsa"), root)
	edLeaf := issue(t, leafTemplate("ed.example.com"), newKey(t, "ed25519"), root)
	self := issue(t, leafTemplate("self.example.com"), newKey(t, "ecdsa"), nil)
	chain := leaf.pem() + inter.pem()

	ecDER, _ := x509.MarshalECPrivateKey(leaf.key.(*ecdsa.PrivateKey))
	sec1 := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER}))
	ecParams := string(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}}))
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaLeaf.key.(*rsa.PrivateKey))}))
	encrypted := string(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{0x30, 0x00}}))
	legacyEncrypted := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00000000000000000000000000000000"}, Bytes: []byte{1, 2, 3}}))
	pubDER, _ := x509.MarshalPKIXPublicKey(leaf.key.Public())
	pubKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))
	junk := func(typ string) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: []byte("not DER")}))
	}
	// damaged is a PEM block with its END line cut off.
	damaged := leaf.pem()[:len(leaf.pem())-30]

	up := func(certPEM, keyPEM string) *TLSCertificateCreate {
		return &TLSCertificateCreate{CertificatePEM: &certPEM, PrivateKeyPEM: &keyPEM}
	}
	const c, k = "certificate_pem", "private_key_pem"
	runCases(t, []vcase{
		pass("chain and PKCS #8 key", up(chain, leaf.pkcs8(t))),
		pass("leaf alone", up(leaf.pem(), leaf.pkcs8(t))),
		pass("chain up to the root", up(chain+root.pem(), leaf.pkcs8(t))),
		pass("self-signed", up(self.pem(), self.pkcs8(t))),
		pass("SEC 1 key", up(chain, sec1)),
		pass("SEC 1 key after EC PARAMETERS", up(chain, ecParams+sec1)),
		pass("PKCS #1 RSA key", up(rsaLeaf.pem()+root.pem(), pkcs1)),
		pass("Ed25519", up(edLeaf.pem(), edLeaf.pkcs8(t))),
		pass("text around the blocks", up("Bag Attributes\n    friendlyName: app\n"+chain+"\n", "subject=/CN=app\n"+leaf.pkcs8(t))),
		pass("CRLF line ends", up(strings.ReplaceAll(chain, "\n", "\r\n"), strings.ReplaceAll(leaf.pkcs8(t), "\n", "\r\n"))),
		failMsg("no certificate", &TLSCertificateCreate{PrivateKeyPEM: ptr(leaf.pkcs8(t))}, c, CodeInvalid, "is required"),
		fail("empty certificate", up("", leaf.pkcs8(t)), c, CodeInvalid),
		failMsg("no key", &TLSCertificateCreate{CertificatePEM: &chain}, k, CodeInvalid, "is required"),
		fail("empty key", up(chain, ""), k, CodeInvalid),
		fail("certificate checked first", &TLSCertificateCreate{}, c, CodeInvalid),
		failMsg("certificate not PEM", up("MIIB...", leaf.pkcs8(t)), c, CodeInvalid, "is not PEM"),
		fail("certificate as DER", up(string(leaf.cert.Raw), leaf.pkcs8(t)), c, CodeInvalid),
		failMsg("damaged certificate block", up(damaged, leaf.pkcs8(t)), c, CodeInvalid, "truncated or damaged"),
		failMsg("a key among the certificates", up(leaf.pem()+leaf.pkcs8(t), leaf.pkcs8(t)), c, CodeInvalid, `block 2 is a "PRIVATE KEY" block`),
		failMsg("certificate that does not parse", up(leaf.pem()+junk("CERTIFICATE"), leaf.pkcs8(t)), c, CodeInvalid, "certificate 2 does not parse"),
		failMsg("key not PEM", up(chain, "secret"), k, CodeInvalid, "is not PEM"),
		failMsg("two keys", up(chain, leaf.pkcs8(t)+inter.pkcs8(t)), k, CodeInvalid, "exactly one private key"),
		failMsg("encrypted PKCS #8 key", up(chain, encrypted), k, CodeInvalid, "is encrypted"),
		fail("encrypted PEM key", up(rsaLeaf.pem(), legacyEncrypted), k, CodeInvalid),
		failMsg("public key", up(chain, pubKey), k, CodeInvalid, `"PUBLIC KEY" block`),
		failMsg("certificate as key", up(chain, leaf.pem()), k, CodeInvalid, `"CERTIFICATE" block`),
		failMsg("key that does not parse", up(chain, junk("PRIVATE KEY")), k, CodeInvalid, "does not parse"),
		fail("SEC 1 key that does not parse", up(chain, junk("EC PRIVATE KEY")), k, CodeInvalid),
		fail("damaged key block", up(chain, leaf.pkcs8(t)[:60]), k, CodeInvalid),
		failMsg("another certificate's key", up(chain, inter.pkcs8(t)), k, CodeInvalid, "does not match the leaf certificate (the first in certificate_pem, CN=app.example.com)"),
		fail("key of another type", up(chain, edLeaf.pkcs8(t)), k, CodeInvalid),
		failMsg("chain in reverse", up(inter.pem()+leaf.pem(), inter.pkcs8(t)), c, CodeInvalid, "was not issued by certificate 2"),
		fail("intermediate missing", up(leaf.pem()+root.pem(), leaf.pkcs8(t)), c, CodeInvalid),
		fail("key checked before the chain", up(leaf.pem()+root.pem(), self.pkcs8(t)), k, CodeInvalid),
		fail("annotations first", &TLSCertificateCreate{AnnotationFields: AnnotationFields{Description: ptr("a\nb")}}, "description", CodeInvalid),
	})
}

// TestValidateCertificateAuthorities: ca_pem is exactly one certificate that can act as an
// authority: basic constraints CA:TRUE and, when it has a key usage, cert_sign. Every refusal is
// 400 ERR_NGROK_1913 naming ca_pem.
func TestValidateCertificateAuthorities(t *testing.T) {
	key := newKey(t, "ecdsa")
	root := issue(t, caTemplate("Test Root"), key, nil)
	inter := issue(t, caTemplate("Test Intermediate"), newKey(t, "ecdsa"), root)
	anyUsage := caTemplate("No Key Usage")
	anyUsage.KeyUsage = 0
	noUsage := issue(t, anyUsage, key, nil)
	signOnly := caTemplate("Signing Only")
	signOnly.KeyUsage = x509.KeyUsageDigitalSignature
	noCertSign := issue(t, signOnly, key, nil)
	notCA := caTemplate("Not A CA")
	notCA.IsCA = false
	falseCA := issue(t, notCA, key, nil)
	bare := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Bare"}}, key, nil)
	leaf := issue(t, leafTemplate("app.example.com"), newKey(t, "ecdsa"), root)

	ca := func(s string) *CertificateAuthorityCreate { return &CertificateAuthorityCreate{CAPEM: &s} }
	const f = "ca_pem"
	runCases(t, []vcase{
		pass("root", ca(root.pem())),
		pass("intermediate", ca(inter.pem())),
		pass("CA without key usage", ca(noUsage.pem())),
		pass("text around the block", ca("# our root\n"+root.pem()+"\n\n")),
		failMsg("no ca_pem", &CertificateAuthorityCreate{}, f, CodeNotCA, "is required"),
		fail("blank ca_pem", ca(" \n"), f, CodeNotCA),
		failMsg("not PEM", ca("root.crt"), f, CodeNotCA, "is not PEM"),
		fail("damaged block", ca(root.pem()[:80]), f, CodeNotCA),
		failMsg("a key", ca(leaf.pkcs8(t)), f, CodeNotCA, "not a CERTIFICATE"),
		failMsg("two certificates", ca(root.pem()+inter.pem()), f, CodeNotCA, "exactly one certificate, found 2"),
		failMsg("leaf", ca(leaf.pem()), f, CodeNotCA, "CN=app.example.com"),
		failMsg("CA:FALSE", ca(falseCA.pem()), f, CodeNotCA, "CA:FALSE"),
		failMsg("no basic constraints", ca(bare.pem()), f, CodeNotCA, "no basic constraints"),
		failMsg("no cert_sign", ca(noCertSign.pem()), f, CodeNotCA, "does not include cert_sign"),
		fail("annotations first", &CertificateAuthorityCreate{AnnotationFields: AnnotationFields{Metadata: ptr("\xfe")}}, "metadata", CodeInvalid),
	})
}
