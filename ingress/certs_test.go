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

// TestCertsParkedNames: a name under a service domain with nothing on it gets the CA's wildcard
// of its parent (one certificate for all such names of a level); a name outside them that is
// not served gets none; a served name keeps its own.
func TestCertsParkedNames(t *testing.T) {
	c := NewCerts(testCA(t))
	c.Allowed = func(host string) bool { return host == "online.edgeplane.app" }
	c.ServiceDomains = []string{"edgeplane.app"}
	a, err := c.Certificate("a.edgeplane.app")
	if err != nil || len(a.Leaf.DNSNames) != 1 || a.Leaf.DNSNames[0] != "*.edgeplane.app" {
		t.Fatalf("a parked name: %v %v", a, err)
	}
	if b, err := c.Certificate("B.edgeplane.app"); err != nil || b != a {
		t.Errorf("another parked name of the same level got another certificate: %v", err)
	}
	if d, err := c.Certificate("x.deep.edgeplane.app"); err != nil || d.Leaf.DNSNames[0] != "*.deep.edgeplane.app" {
		t.Errorf("a deeper parked name: %v", err)
	}
	if on, err := c.Certificate("online.edgeplane.app"); err != nil || on.Leaf.DNSNames[0] != "online.edgeplane.app" {
		t.Errorf("a served name: %v", err)
	}
	for _, name := range []string{"edgeplane.app", "stranger.example.com", "x.notedgeplane.app", ""} {
		if _, err := c.Certificate(name); err != ErrUnknownName {
			t.Errorf("%q: %v, want ErrUnknownName", name, err)
		}
	}
}
