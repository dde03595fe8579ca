package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestKeyUsageNames: every key usage bit has its name, in bit order.
func TestKeyUsageNames(t *testing.T) {
	var all x509.KeyUsage
	for _, u := range keyUsageNames {
		all |= u.bit
	}
	got := KeyUsages(&x509.Certificate{KeyUsage: all})
	want := []string{"digital_signature", "content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
		"cert_sign", "crl_sign", "encipher_only", "decipher_only"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := KeyUsages(&x509.Certificate{}); got == nil || len(got) != 0 {
		t.Fatalf("no usages should be an empty, non-nil list: %#v", got)
	}
}

// TestExtKeyUsageNames: every extended key usage crypto/x509 knows has a name, and an unknown
// one is shown as its OID, after the named ones.
func TestExtKeyUsageNames(t *testing.T) {
	c := &x509.Certificate{UnknownExtKeyUsage: []asn1.ObjectIdentifier{{1, 2, 3, 4}}}
	for u := x509.ExtKeyUsageAny; u <= x509.ExtKeyUsageMicrosoftKernelCodeSigning; u++ {
		c.ExtKeyUsage = append(c.ExtKeyUsage, u)
	}
	got := ExtKeyUsages(c)
	if len(got) != len(c.ExtKeyUsage)+1 || got[len(got)-1] != "1.2.3.4" || got[0] != "any" || got[2] != "client_auth" {
		t.Fatalf("got %v", got)
	}
	for _, n := range got {
		if n == "" || strings.ToLower(n) != n {
			t.Fatalf("bad name %q in %v", n, got)
		}
	}
}

// TestCheckChain: a chain in order passes; reversed, it fails naming the positions.
func TestCheckChain(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, _ := x509.CreateCertificate(rand.Reader, tpl, tpl, key.Public(), key)
	root, _ := x509.ParseCertificate(der)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ltpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, _ = x509.CreateCertificate(rand.Reader, ltpl, root, leafKey.Public(), key)
	leaf, _ := x509.ParseCertificate(der)
	if err := CheckChain([]*x509.Certificate{leaf, root}); err != nil {
		t.Fatal(err)
	}
	err := CheckChain([]*x509.Certificate{root, leaf})
	if err == nil || !strings.Contains(err.Error(), "certificate 1 (CN=root) was not issued by certificate 2 (CN=leaf)") {
		t.Fatalf("reversed chain: %v", err)
	}
	if why := CACheck(leaf); why == "" {
		t.Fatal("a leaf passes as a CA")
	}
	if why := CACheck(root); why != "" {
		t.Fatal(why)
	}
}

// TestGenerateAndSign: every key type generates, signs a certificate that x/crypto/ssh accepts,
// and unknown choices fail.
func TestGenerateAndSign(t *testing.T) {
	_, userKey, err := GenerateKey(KeyEd25519, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ   string
		bits  int
		curve string
	}{{KeyEd25519, 0, ""}, {KeyECDSA, 0, "p256"}, {KeyECDSA, 0, "p521"}, {KeyRSA, 2048, ""}} {
		priv, pub, err := GenerateKey(c.typ, c.bits, c.curve)
		if err != nil {
			t.Fatal(err)
		}
		canon, kt, err := ParseAuthorizedKey(pub + " comment")
		if err != nil || canon != pub || kt != c.typ {
			t.Fatalf("%s: %q %q %v", c.typ, canon, kt, err)
		}
		now := time.Now()
		line, err := SignCertificate(priv, CertRequest{PublicKey: userKey, KeyID: "k", Principals: []string{"u"},
			ValidAfter: now, ValidBefore: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		cert := k.(*ssh.Certificate)
		checker := ssh.CertChecker{Clock: func() time.Time { return now.Add(time.Minute) }}
		if err := checker.CheckCert("u", cert); err != nil || AuthorizedKey(cert.SignatureKey) != pub {
			t.Fatalf("%s: %v", c.typ, err)
		}
	}
	if _, _, err := GenerateKey("dsa", 0, ""); err == nil {
		t.Fatal("dsa generated")
	}
	if _, _, err := GenerateKey(KeyECDSA, 0, "p224"); err == nil {
		t.Fatal("p224 generated")
	}
	if _, err := SignCertificate("not pem", CertRequest{PublicKey: userKey}); err == nil {
		t.Fatal("signed with no key")
	}
}
