package plan

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/memtest"
)

// testCA is a self-signed CA certificate in PEM whose subject is padded to about pad bytes, as
// large as an uploaded authority may make it.
func testCA(t *testing.T, i, pad int) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), IsCA: true, BasicConstraintsValid: true,
		Subject:   pkix.Name{CommonName: fmt.Sprintf("ca %d", i), OrganizationalUnit: []string{strings.Repeat("u", pad)}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestMutualTLSAuthoritiesShared: edges with mutual_tls on the same certificate authorities
// share their parsed certificates and their pool. 64 TLS edges on 32 authorities of 16 KiB each
// held a parsed copy of every authority and a pool each before: 222 MiB; now 3.5 MiB. An edge on
// another list of authorities has a pool of its own (a pool copies each certificate's subject),
// sharing the parsed certificates.
func TestMutualTLSAuthoritiesShared(t *testing.T) {
	const cas, edges, pad = ep.MaxModuleListEntries, 64, 16 << 10
	s := &Snapshot{Account: "acct_ca", CAs: map[string]*ep.CertificateAuthority{}}
	m := &ep.EndpointMutualTLS{Enabled: true}
	for i := range cas {
		id := fmt.Sprintf("ca_%02d", i)
		s.CAs[id] = &ep.CertificateAuthority{Meta: ep.Meta{ID: id}, CAPEM: testCA(t, i, pad)}
		m.CertificateAuthorities = append(m.CertificateAuthorities, &ep.Ref{ID: id})
	}
	for i := range edges {
		s.TLSEdges = append(s.TLSEdges, &ep.TLSEdge{Edge: ep.Edge{Meta: ep.Meta{ID: fmt.Sprintf("edgtls_%02d", i)}}, MutualTLS: m})
	}
	one := &ep.EndpointMutualTLS{Enabled: true, CertificateAuthorities: m.CertificateAuthorities[:1]}
	s.TLSEdges = append(s.TLSEdges, &ep.TLSEdge{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_one"}}, MutualTLS: one})
	before := memtest.LiveHeap()
	a := testLive.Build(s, nil)
	kept := int64(memtest.LiveHeap()) - int64(before)
	t.Logf("%d edges on %d authorities of %d KiB: the plan keeps %d KiB", edges, cas, pad>>10, kept>>10)
	if kept > 4<<20 {
		t.Errorf("the plan keeps %d KiB; at most 4 MiB expected with the authorities shared", kept>>10)
	}
	for i, e := range a.TLS {
		want := cas
		if i == edges {
			want = 1
		}
		if !e.TLS.MutualTLS || len(e.TLS.roots) != want {
			t.Fatalf("%s: mutual TLS %v with %d authorities, want %d", e.ID, e.TLS.MutualTLS, len(e.TLS.roots), want)
		}
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(s)
}
