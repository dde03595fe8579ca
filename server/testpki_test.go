package server_test

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
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// testCert is a certificate made at test time with its key, in PEM.
type testCert struct {
	cert    *x509.Certificate
	key     crypto.Signer
	pem     string // the certificate
	keyPEM  string // the key, PKCS #8
	keyPEM1 string // the key in its traditional form (PKCS #1 for RSA, SEC 1 for ECDSA), "" for Ed25519
}

// pkiSet is a small hierarchy shared by the tests of one run: a root CA, an intermediate CA it
// issued, and leaves the intermediate issued with ECDSA, RSA and Ed25519 keys.
type pkiSet struct {
	root, inter                  *testCert
	leafECDSA, leafRSA, leafEd   *testCert
	otherKeyECDSA                crypto.Signer
	sshEd25519, sshECDSA, sshRSA string // public keys in authorized_keys format
}

var (
	pkiOnce sync.Once
	pkiVal  *pkiSet
	serial  atomic.Int64
)

func testPKI(t *testing.T) *pkiSet {
	t.Helper()
	pkiOnce.Do(func() { pkiVal = buildPKI(t) })
	if pkiVal == nil {
		t.Fatal("building the test PKI failed earlier")
	}
	return pkiVal
}

func buildPKI(t *testing.T) *pkiSet {
	p := &pkiSet{}
	now := time.Now().Truncate(time.Second)
	p.root = makeCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Edgeplane Test Root", Organization: []string{"Edgeplane Tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}, ecKey(t), nil)
	p.inter = makeCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Edgeplane Test Intermediate"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(5 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, ecKey(t), p.root)
	leaf := func(cn string) *x509.Certificate {
		return &x509.Certificate{
			Subject: pkix.Name{
				CommonName: cn, Organization: []string{"Example Org"}, OrganizationalUnit: []string{"Platform", "Edge"},
				Locality: []string{"Lisbon"}, Province: []string{"Lisboa"}, Country: []string{"PT"},
			},
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(90 * 24 * time.Hour),
			DNSNames:    []string{cn, "*." + cn},
			IPAddresses: []net.IP{net.ParseIP("192.0.2.10"), net.ParseIP("2001:db8::10")},
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
	}
	p.leafECDSA = makeCert(t, leaf("ecdsa.example.com"), ecKey(t), p.inter)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p.leafRSA = makeCert(t, leaf("rsa.example.com"), rk, p.inter)
	_, ek, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.leafEd = makeCert(t, leaf("ed25519.example.com"), ek, p.inter)
	p.otherKeyECDSA = ecKey(t)

	p.sshEd25519 = sshPublic(t, ek.Public())
	p.sshECDSA = sshPublic(t, p.otherKeyECDSA.Public())
	p.sshRSA = sshPublic(t, rk.Public())
	return p
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// makeCert signs tpl with parent's key (self-signed when parent is nil).
func makeCert(t *testing.T, tpl *x509.Certificate, key crypto.Signer, parent *testCert) *testCert {
	tpl.SerialNumber = big.NewInt(0xabc000 + serial.Add(1))
	issuer, signer := tpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, issuer, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCert{cert: cert, key: key,
		pem:    string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		keyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}))}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		c.keyPEM1 = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		c.keyPEM1 = string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	}
	return c
}

func sshPublic(t *testing.T, pub crypto.PublicKey) string {
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// chainPEM concatenates the certificates' PEM.
func chainPEM(certs ...*testCert) string {
	var b strings.Builder
	for _, c := range certs {
		b.WriteString(c.pem)
	}
	return b.String()
}

// domainCounter makes reserved domain names unique within a test run.
var domainCounter atomic.Int64

// freshDomain returns a domain name no test has used yet in this run.
func freshDomain(prefix string) string {
	return prefix + "-" + big.NewInt(domainCounter.Add(1)).String() + ".fixture.example.com"
}
