package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is edgeplane's own certificate authority. It signs the agent listener's certificate and a
// fallback certificate for every public hostname that has no uploaded one, so one CA file
// (`edgeplane ca`) is all agents and test clients need to trust. Agents built on rustls refuse a
// self-signed certificate used as a server certificate, so the CA never serves itself: it only
// signs leaves.
type CA struct {
	Cert    *x509.Certificate
	CertPEM string
	key     *ecdsa.PrivateKey
}

// caLifetime is how long edgeplane's CA is valid; leafLifetime is how long the certificates it
// issues are. Leaves are re-issued on every start and cached per name in memory, so a short
// life costs nothing.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 90 * 24 * time.Hour
)

// NewCA makes a new CA key and self-signed CA certificate and returns both as PEM.
func NewCA(commonName string) (certPEM, keyPEM string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"edgeplane"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})), nil
}

// LoadCA parses a CA made by NewCA.
func LoadCA(certPEM, keyPEM string) (*CA, error) {
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return nil, fmt.Errorf("edgeplane CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("edgeplane CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, errors.New("edgeplane CA: the stored CA is not an ECDSA CA certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// Signer returns the CA's private key as a signer, for the certificates other packages issue
// from the same CA (the link certificates between replicas, package peer). The key itself is
// never exported as PEM.
func (ca *CA) Signer() crypto.Signer { return ca.key }

// Pool returns a pool holding only this CA, for clients that trust edgeplane.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue signs a server certificate for the given DNS names and IP addresses (a name that parses
// as an IP becomes an IP SAN: agents dialling an IP send no SNI and check the IP). The result
// carries the chain leaf + CA.
func (ca *CA) Issue(names ...string) (*tls.Certificate, error) {
	if len(names) == 0 {
		return nil, errors.New("edgeplane CA: a certificate needs at least one name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
