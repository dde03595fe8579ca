package peer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"sync"
	"time"
)

// URIScheme is the scheme of the one URI subject alternative name a link certificate carries:
// "edgeplane-replica:<replica id>". Endpoint and agent-listener certificates of edgeplane's CA
// carry DNS names and IP addresses and never this URI, so none of them can pass as a replica.
const URIScheme = "edgeplane-replica"

// alpn is the application protocol both ends of a link offer in their TLS handshake. It pins
// everything both ends must agree on (the stream header, the answers, the stream window): a
// change to any of them gets a new name, so two replicas of different versions fail the
// handshake with a clear error instead of misreading each other.
const alpn = "edgeplane-link/1"

// certLifetime is how long a link certificate is valid. It is short because nothing revokes
// one: a replica's certificate is worth something only while it is alive, and Identity renews
// it (a new key and certificate) once half of its life has passed, so a long-running replica
// never presents an expired one.
const certLifetime = 7 * 24 * time.Hour

// replicaIDPattern is what a replica id in a link certificate may look like: edgeplane's ids
// ("rep_" and a KSUID) and nothing that could be read as another URI's parts.
var replicaIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ReplicaURI returns the URI naming replica id in its link certificate.
func ReplicaURI(id string) *url.URL {
	return &url.URL{Scheme: URIScheme, Opaque: id}
}

// IssueCertificate signs a link certificate for replica id with edgeplane's CA (its certificate
// and key): a new ECDSA P-256 key, valid from an hour ago (clocks of replicas differ a little)
// for certLifetime from now, for both TLS server and client authentication, whose only subject
// alternative name is ReplicaURI(id). The result carries the chain leaf + CA.
func IssueCertificate(ca *x509.Certificate, caKey crypto.Signer, id string, now time.Time) (*tls.Certificate, error) {
	if !replicaIDPattern.MatchString(id) {
		return nil, fmt.Errorf("peer: %q is not a replica id", id)
	}
	if ca == nil || caKey == nil {
		return nil, errors.New("peer: a link certificate needs edgeplane's CA and its key")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "edgeplane replica " + id},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{ReplicaURI(id)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("peer: issue the link certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// ReplicaID returns the replica a verified link certificate names. It refuses a certificate
// that names anything else as well (a DNS name, an IP address, an email address, a second
// URI), so a certificate issued for any other purpose never passes as a replica's.
func ReplicaID(cert *x509.Certificate) (string, error) {
	if len(cert.DNSNames) > 0 || len(cert.IPAddresses) > 0 || len(cert.EmailAddresses) > 0 {
		return "", errors.New("peer: the certificate names hosts or addresses, not a replica")
	}
	if len(cert.URIs) != 1 {
		return "", fmt.Errorf("peer: the certificate carries %d URIs, not one %s URI", len(cert.URIs), URIScheme)
	}
	u := cert.URIs[0]
	if u.Scheme != URIScheme || u.Host != "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" ||
		u.User != nil || !replicaIDPattern.MatchString(u.Opaque) {
		return "", fmt.Errorf("peer: the certificate's URI %q does not name a replica", u.String())
	}
	return u.Opaque, nil
}

// Identity is one replica's link certificate, renewed as it ages. Its methods are the
// certificate callbacks of both TLS configurations, so every handshake presents a current one.
type Identity struct {
	id    string
	ca    *x509.Certificate
	caKey crypto.Signer
	now   func() time.Time

	mu   sync.Mutex
	cert *tls.Certificate
}

// NewIdentity issues replica id's first link certificate from edgeplane's CA.
func NewIdentity(ca *x509.Certificate, caKey crypto.Signer, id string) (*Identity, error) {
	return newIdentity(ca, caKey, id, time.Now)
}

func newIdentity(ca *x509.Certificate, caKey crypto.Signer, id string, now func() time.Time) (*Identity, error) {
	cert, err := IssueCertificate(ca, caKey, id, now())
	if err != nil {
		return nil, err
	}
	return &Identity{id: id, ca: ca, caKey: caKey, now: now, cert: cert}, nil
}

// ID is the replica the identity names.
func (i *Identity) ID() string { return i.id }

// Certificate returns the current link certificate, first issuing a new one when half of the
// current one's life has passed. Should renewal fail (it needs only the CA key in memory, so it
// does not), the current certificate is kept while it is valid.
func (i *Identity) Certificate() (*tls.Certificate, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.now()
	leaf := i.cert.Leaf
	if now.Before(leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)) {
		return i.cert, nil
	}
	cert, err := IssueCertificate(i.ca, i.caKey, i.id, now)
	if err != nil {
		if now.Before(leaf.NotAfter) {
			return i.cert, nil
		}
		return nil, err
	}
	i.cert = cert
	return cert, nil
}

// pool returns a pool holding only edgeplane's CA: a link trusts nothing else.
func (i *Identity) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(i.ca)
	return p
}

// ServerConfig is the TLS configuration of the link's listener: TLS 1.3 only, the link's
// application protocol, and a client certificate required, chaining to edgeplane's CA for
// client authentication, whose only name is a replica's URI. A client without one fails the
// handshake, so nothing it sends afterwards is read.
func (i *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		NextProtos:             []string{alpn},
		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              i.pool(),
		SessionTicketsDisabled: true, // every link handshake shows its certificate afresh
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return i.Certificate()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.NegotiatedProtocol != alpn {
				return fmt.Errorf("peer: the client does not speak %s", alpn)
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer: no client certificate")
			}
			_, err := ReplicaID(cs.PeerCertificates[0])
			return err
		},
	}
}

// ClientConfig is the TLS configuration for dialling replica want: TLS 1.3 only, this
// replica's certificate as the client certificate, and the server's certificate verified
// against edgeplane's CA for server authentication and required to name want. The standard
// host name check is replaced by that one (InsecureSkipVerify turns off only the built-in
// verification, which VerifyConnection performs in full with crypto/x509): link certificates
// name replicas, not hosts, and an address can change hands between replicas.
func (i *Identity) ClientConfig(want string) *tls.Config {
	roots := i.pool()
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		NextProtos:             []string{alpn},
		SessionTicketsDisabled: true,
		InsecureSkipVerify:     true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return i.Certificate()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, roots, want, i.now())
		},
	}
}

// errOtherReplica is a handshake that reached another replica than the one dialled: at a
// handover the successor's row names the address its predecessor still accepts on, for a while.
var errOtherReplica = errors.New("peer: another replica answers at this address")

// verifyServer checks the server's side of a link handshake: its chain to roots for server
// authentication at now, the link's protocol, and that its certificate names replica want.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, want string, now time.Time) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("peer: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("peer: the server's certificate: %w", err)
	}
	if cs.NegotiatedProtocol != alpn {
		return fmt.Errorf("peer: the server does not speak %s", alpn)
	}
	got, err := ReplicaID(leaf)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: the server is replica %s, not %s", errOtherReplica, got, want)
	}
	return nil
}
