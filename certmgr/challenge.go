package certmgr

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"math/big"
	"time"
)

// ALPNProto is the ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737).
const ALPNProto = "acme-tls/1"

// idPeACMEIdentifier is the certificate extension of the TLS-ALPN-01 answer (RFC 8737 §3).
var idPeACMEIdentifier = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 31}

// Answers are the challenge answers the public listeners give, read from the store so that any
// replica answers a job run by another.
type Answers struct {
	Store AnswerStore
}

// HTTP01 returns the body of /.well-known/acme-challenge/token for host, and whether a job of
// host answers that token.
func (a Answers) HTTP01(host, token string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keyAuth, ok, err := a.Store.ACMEChallenge(ctx, host, token)
	return keyAuth, ok && err == nil
}

// TLSALPN01 returns the certificate answering a TLS-ALPN-01 challenge for host, or nil when no
// job of host is answering one.
func (a Answers) TLSALPN01(host string) *tls.Certificate {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keyAuth, ok, err := a.Store.ACMEKeyAuth(ctx, host)
	if !ok || err != nil {
		return nil
	}
	cert, err := ALPNCert(host, keyAuth)
	if err != nil {
		return nil
	}
	return cert
}

// DNS01 returns the TXT value to publish at name (a wildcard domain's
// acme_challenge_cname_target) while a DNS-01 challenge is answered there: the base64url SHA-256
// of the key authorization (RFC 8555 §8.4). It is the authdns server's view of the jobs.
func (a Answers) DNS01(ctx context.Context, name string) (string, bool, error) {
	keyAuth, ok, err := a.Store.ACMEDNSChallenge(ctx, name)
	if !ok || err != nil {
		return "", false, err
	}
	sum := sha256.Sum256([]byte(keyAuth))
	return base64.RawURLEncoding.EncodeToString(sum[:]), true, nil
}

// ALPNCert makes the self-signed certificate of a TLS-ALPN-01 answer: host as its only name and
// the SHA-256 of the key authorization in the critical acmeIdentifier extension.
func ALPNCert(host, keyAuth string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(keyAuth))
	ext, err := asn1.Marshal(sum[:])
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:    serial,
		Subject:         pkix.Name{CommonName: host},
		DNSNames:        []string{host},
		NotBefore:       time.Now().Add(-time.Hour),
		NotAfter:        time.Now().Add(24 * time.Hour),
		ExtraExtensions: []pkix.Extension{{Id: idPeACMEIdentifier, Critical: true, Value: ext}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
