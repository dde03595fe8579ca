package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Curves maps the elliptic_curve names of the API to the curves of crypto/elliptic.
var Curves = map[string]elliptic.Curve{
	"p256": elliptic.P256(),
	"p384": elliptic.P384(),
	"p521": elliptic.P521(),
}

// MinRSABits is the smallest RSA key edgeplane signs an SSH certificate for.
const MinRSABits = 2048

// GenerateKey makes a new key pair: RSA of the given size, ECDSA on the named curve (see
// Curves), or Ed25519. It returns the private key as PKCS #8 PEM, for the store to keep, and the
// public key in OpenSSH authorized_keys format, for the API to show.
func GenerateKey(keyType string, rsaBits int, curve string) (privatePEM, publicKey string, err error) {
	var key crypto.Signer
	switch keyType {
	case KeyRSA:
		key, err = rsa.GenerateKey(rand.Reader, rsaBits)
	case KeyECDSA:
		c, ok := Curves[curve]
		if !ok {
			return "", "", fmt.Errorf("pki: unknown curve %q", curve)
		}
		key, err = ecdsa.GenerateKey(c, rand.Reader)
	case KeyEd25519:
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		return "", "", fmt.Errorf("pki: unknown key type %q", keyType)
	}
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), AuthorizedKey(pub), nil
}

// AuthorizedKey renders a public key or certificate as one authorized_keys line without a
// trailing newline or comment.
func AuthorizedKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// ParseAuthorizedKey parses one public key in OpenSSH authorized_keys format ("ssh-ed25519
// AAAA... comment") and returns it in canonical form (type and base64, no comment) with its key
// type (rsa, ecdsa or ed25519). It refuses certificates, security-key (sk-) keys, keys with
// authorized_keys options, more than one key, and RSA keys under MinRSABits bits.
func ParseAuthorizedKey(text string) (canonical, keyType string, err error) {
	pub, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(text))
	if err != nil {
		return "", "", errors.New("is not a public key in OpenSSH authorized_keys format (\"ssh-ed25519 AAAA...\")")
	}
	if len(options) > 0 {
		return "", "", errors.New("must be a bare public key, without authorized_keys options")
	}
	if strings.TrimSpace(string(rest)) != "" {
		return "", "", errors.New("must hold exactly one public key")
	}
	switch pub.Type() {
	case ssh.KeyAlgoED25519:
		keyType = KeyEd25519
	case ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		keyType = KeyECDSA
	case ssh.KeyAlgoRSA:
		keyType = KeyRSA
		if ck, ok := pub.(ssh.CryptoPublicKey); ok {
			if rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey); ok && rk.N.BitLen() < MinRSABits {
				return "", "", fmt.Errorf("is a %d-bit RSA key; RSA keys must have at least %d bits", rk.N.BitLen(), MinRSABits)
			}
		}
	default:
		if _, ok := pub.(*ssh.Certificate); ok {
			return "", "", errors.New("is a certificate; give the public key to be certified")
		}
		return "", "", fmt.Errorf("has key type %q; only rsa, ecdsa and ed25519 keys are supported", pub.Type())
	}
	return AuthorizedKey(pub), keyType, nil
}

// CertRequest is what an SSH certificate says, apart from the key that signs it.
type CertRequest struct {
	// Host makes a host certificate; otherwise it is a user certificate.
	Host bool
	// PublicKey is the key being certified, in authorized_keys format.
	PublicKey string
	// KeyID identifies the certificate in the logs of the SSH server (edgeplane uses its id).
	KeyID string
	// Principals are the user names (user certificates) or host names (host certificates) it is
	// valid for; empty means any.
	Principals                  []string
	ValidAfter, ValidBefore     time.Time
	CriticalOptions, Extensions map[string]string
}

// SignCertificate signs an OpenSSH certificate for req with the CA private key (PKCS #8 PEM, as
// GenerateKey makes it) and returns it as one authorized_keys line. RSA CAs sign with
// rsa-sha2-512: OpenSSH no longer accepts certificates signed with SHA-1 ssh-rsa.
func SignCertificate(caPrivatePEM string, req CertRequest) (string, error) {
	block, _ := pem.Decode([]byte(caPrivatePEM))
	if block == nil {
		return "", errors.New("pki: the CA private key is not PEM")
	}
	caKey, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("pki: the CA private key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(caKey)
	if err != nil {
		return "", err
	}
	if signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		as, ok := signer.(ssh.AlgorithmSigner)
		if !ok {
			return "", errors.New("pki: the RSA signer cannot choose its algorithm")
		}
		if signer, err = ssh.NewSignerWithAlgorithms(as, []string{ssh.KeyAlgoRSASHA512}); err != nil {
			return "", err
		}
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(req.PublicKey))
	if err != nil {
		return "", fmt.Errorf("pki: the public key: %w", err)
	}
	var serial [8]byte
	if _, err := rand.Read(serial[:]); err != nil {
		return "", err
	}
	cert := &ssh.Certificate{
		Key:             pub,
		Serial:          binary.BigEndian.Uint64(serial[:]),
		CertType:        ssh.UserCert,
		KeyId:           req.KeyID,
		ValidPrincipals: req.Principals,
		ValidAfter:      uint64(req.ValidAfter.Unix()),
		ValidBefore:     uint64(req.ValidBefore.Unix()),
		Permissions: ssh.Permissions{
			CriticalOptions: req.CriticalOptions,
			Extensions:      req.Extensions,
		},
	}
	if req.Host {
		cert.CertType = ssh.HostCert
	}
	if err := cert.SignCert(rand.Reader, signer); err != nil {
		return "", err
	}
	return AuthorizedKey(cert), nil
}
