package pki

import (
	"crypto/x509"
	"net"
	"testing"
)

// TestCAIssuesLeaves: the CA signs server certificates (never serving itself) that verify for
// their DNS names and IP addresses against a pool holding only the CA, and survives a reload.
func TestCAIssuesLeaves(t *testing.T) {
	certPEM, keyPEM, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA {
		t.Fatalf("the CA certificate is not a CA")
	}
	leaf, err := ca.Issue("localhost", "127.0.0.1", "::1")
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Leaf.IsCA || len(leaf.Certificate) != 2 {
		t.Errorf("leaf IsCA=%v chain=%d, want a non-CA leaf followed by the CA", leaf.Leaf.IsCA, len(leaf.Certificate))
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		opts := x509.VerifyOptions{Roots: ca.Pool(), DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := leaf.Leaf.Verify(opts); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if len(leaf.Leaf.IPAddresses) != 2 || !leaf.Leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs: %v", leaf.Leaf.IPAddresses)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "example.com"}); err == nil {
		t.Errorf("the leaf verifies for a name it was not issued for")
	}
	if _, err := ca.Issue(); err == nil {
		t.Errorf("a certificate without names was issued")
	}
	if _, err := LoadCA(certPEM, "not a key"); err == nil {
		t.Errorf("a CA loaded without its key")
	}
}
