package ingress

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pki"
)

// testCA is a new certificate authority, as edgeplane makes its own, for the tests' certificates.
func testCA(t *testing.T) *pki.CA {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestCertsPreferUploadedWhileValid: an uploaded certificate wins while it is valid; an expired
// one gives way to edgeplane's CA; a name that is not allowed gets none.
func TestCertsPreferUploadedWhileValid(t *testing.T) {
	ca := testCA(t)
	up, _ := ca.Issue("up.example.com")
	expired := *up
	leaf := *up.Leaf
	leaf.NotAfter = time.Now().Add(-time.Hour)
	expired.Leaf = &leaf
	var uploaded *tls.Certificate
	c := NewCerts(ca)
	c.Allowed = func(host string) bool { return host != "stranger.example.com" }
	c.Uploaded = func(string) *tls.Certificate { return uploaded }

	uploaded = up
	if got, err := c.Certificate("up.example.com"); err != nil || got != up {
		t.Errorf("a valid uploaded certificate: %v %v", got, err)
	}
	uploaded = &expired
	got, err := c.Certificate("up.example.com")
	if err != nil || got == &expired || got == up || got.Leaf.DNSNames[0] != "up.example.com" {
		t.Errorf("an expired uploaded certificate was not replaced by the CA's: %v", err)
	}
	if _, err := c.Certificate("stranger.example.com"); err != ErrUnknownName {
		t.Errorf("a name edgeplane does not serve: %v", err)
	}
}
