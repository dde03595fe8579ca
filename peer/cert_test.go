package peer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestIssueCertificate: a link certificate names its replica in one URI and nothing else, is
// for both ends of TLS, short-lived, and chains to edgeplane's CA.
func TestIssueCertificate(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	cert, err := IssueCertificate(ca.cert, ca.key, "rep_2abc", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "edgeplane-replica:rep_2abc" ||
		len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Fatalf("names: URIs %v, DNS %v, IPs %v, emails %v", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
	}
	if got := leaf.NotAfter.Sub(now); got < certLifetime-time.Minute || got > certLifetime {
		t.Fatalf("valid for %s after now, want %s", got, certLifetime)
	}
	if key, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok || key.Curve != elliptic.P256() {
		t.Fatalf("key %T", cert.PrivateKey)
	}
	if leaf.IsCA || len(cert.Certificate) != 2 {
		t.Fatalf("IsCA %v, chain of %d", leaf.IsCA, len(cert.Certificate))
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("verify for %v: %v", usage, err)
		}
	}
	if id, err := ReplicaID(leaf); err != nil || id != "rep_2abc" {
		t.Fatalf("ReplicaID: %q, %v", id, err)
	}
	for _, bad := range []string{"", "rep a", "rep/a", "rep_a?x", "-rep", strings.Repeat("r", 129)} {
		if _, err := IssueCertificate(ca.cert, ca.key, bad, now); err == nil {
			t.Errorf("replica id %q was accepted", bad)
		}
	}
	if _, err := IssueCertificate(nil, nil, "rep_a", now); err == nil {
		t.Error("a certificate without a CA")
	}
}

// TestReplicaIDRefusals: a certificate naming anything besides one well-formed replica URI
// names no replica.
func TestReplicaIDRefusals(t *testing.T) {
	u := func(s string) *url.URL {
		v, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for name, c := range map[string]*x509.Certificate{
		"no URI":             {},
		"a DNS name too":     {URIs: []*url.URL{ReplicaURI("rep_a")}, DNSNames: []string{"a.example"}},
		"an IP too":          {URIs: []*url.URL{ReplicaURI("rep_a")}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}},
		"an email too":       {URIs: []*url.URL{ReplicaURI("rep_a")}, EmailAddresses: []string{"a@example.com"}},
		"two URIs":           {URIs: []*url.URL{ReplicaURI("rep_a"), ReplicaURI("rep_b")}},
		"another scheme":     {URIs: []*url.URL{u("spiffe://edgeplane/rep_a")}},
		"a host":             {URIs: []*url.URL{u("edgeplane-replica://rep_a")}},
		"a query":            {URIs: []*url.URL{u("edgeplane-replica:rep_a?x=1")}},
		"a fragment":         {URIs: []*url.URL{u("edgeplane-replica:rep_a#x")}},
		"an empty id":        {URIs: []*url.URL{u("edgeplane-replica:")}},
		"an id with a slash": {URIs: []*url.URL{u("edgeplane-replica:rep/a")}},
		"an id with a colon": {URIs: []*url.URL{u("edgeplane-replica:rep:a")}},
	} {
		if id, err := ReplicaID(c); err == nil {
			t.Errorf("%s: named replica %q", name, id)
		}
	}
}

// TestIdentityRenews: the identity issues a new certificate once half of the current one's life
// has passed, so a replica running for weeks never presents an expired one.
func TestIdentityRenews(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	id, err := newIdentity(ca.cert, ca.key, "rep_a", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	first, _ := id.Certificate()
	now = now.Add(certLifetime/2 - 2*time.Hour) // the certificate started an hour before
	if c, _ := id.Certificate(); c != first {
		t.Fatal("renewed before half of its life")
	}
	now = now.Add(2 * time.Hour)
	second, err := id.Certificate()
	if err != nil || second == first || !second.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatalf("not renewed after half of its life: %v", err)
	}
	if rid, err := ReplicaID(second.Leaf); err != nil || rid != "rep_a" {
		t.Fatalf("the renewed certificate names %q, %v", rid, err)
	}
	if c, _ := id.Certificate(); c != second {
		t.Fatal("renewed again at once")
	}
}
