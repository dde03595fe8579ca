// Package pki holds edgeplane's cryptography: parsing and inspecting uploaded X.509 certificates
// and private keys, and generating SSH keys and signing SSH certificates. Everything is done with
// the standard library and golang.org/x/crypto; nothing is hand-rolled.
//
// The package is pure (no I/O, no edgeplane imports) so the domain package can call it from its
// validation rules. Its errors are plain sentences meant to follow a field name in an API error.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Key type names as the API shows them (private_key_type, key_type).
const (
	KeyRSA     = "rsa"
	KeyECDSA   = "ecdsa"
	KeyEd25519 = "ed25519"
)

var pemBegin = []byte("-----BEGIN ")

// pemBlocks decodes every PEM block of text. Text outside blocks (such as the "Bag Attributes"
// lines that openssl writes before them) is ignored, but a block that does not decode is an
// error: pem.Decode would otherwise skip a truncated or damaged block silently.
func pemBlocks(text string) ([]*pem.Block, error) {
	rest := []byte(text)
	var blocks []*pem.Block
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if n := bytes.Count([]byte(text), pemBegin); n != len(blocks) {
		return nil, errors.New("holds a PEM block that is truncated or damaged (check the BEGIN and END lines and the base64 between them)")
	}
	if len(blocks) == 0 {
		return nil, errors.New("is not PEM: expected \"-----BEGIN CERTIFICATE-----\" blocks")
	}
	return blocks, nil
}

// ParseCertificates parses every PEM block of text as an X.509 certificate, in order. It refuses
// text without a block, blocks of another type and blocks that do not decode or parse, naming
// the position of the block at fault (1 is the first).
func ParseCertificates(text string) ([]*x509.Certificate, error) {
	blocks, err := pemBlocks(text)
	if err != nil {
		return nil, err
	}
	certs := make([]*x509.Certificate, 0, len(blocks))
	for i, b := range blocks {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("block %d is a %q block, not a CERTIFICATE", i+1, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", i+1, err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// EncodeCertificates returns the canonical PEM of certs: one CERTIFICATE block each, in order,
// without headers or surrounding text.
func EncodeCertificates(certs []*x509.Certificate) string {
	var b strings.Builder
	for _, c := range certs {
		b.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return b.String()
}

// ParsePrivateKey parses a PEM private key: PKCS #8 ("PRIVATE KEY"), PKCS #1 ("RSA PRIVATE KEY")
// or SEC 1 ("EC PRIVATE KEY", optionally after an "EC PARAMETERS" block) holding an RSA, ECDSA or
// Ed25519 key. Encrypted keys are refused with a hint, since the server has no passphrase. It
// returns the key and the canonical PEM of its block.
func ParsePrivateKey(text string) (crypto.Signer, string, error) {
	blocks, err := pemBlocks(text)
	if err != nil {
		if bytes.Count([]byte(text), pemBegin) == 0 {
			return nil, "", errors.New("is not PEM: expected a \"-----BEGIN PRIVATE KEY-----\" block")
		}
		return nil, "", err
	}
	var keys []*pem.Block
	for _, b := range blocks {
		if b.Type != "EC PARAMETERS" {
			keys = append(keys, b)
		}
	}
	if len(keys) != 1 {
		return nil, "", fmt.Errorf("must hold exactly one private key block, found %d blocks", len(keys))
	}
	b := keys[0]
	if b.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(b.Headers["Proc-Type"], "ENCRYPTED") {
		return nil, "", errors.New("is encrypted; upload the key without a passphrase (for example: openssl pkey -in key.pem -out plain.pem)")
	}
	var key any
	switch b.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		return nil, "", fmt.Errorf("is a %q block; expected PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY", b.Type)
	}
	if err != nil {
		return nil, "", fmt.Errorf("does not parse as a %s: %v", strings.ToLower(b.Type), err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || KeyType(signer.Public()) == "" {
		return nil, "", fmt.Errorf("holds a %T; only RSA, ECDSA and Ed25519 keys are supported", key)
	}
	return signer, string(pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: b.Bytes})), nil
}

// KeyType names the algorithm of a public key: rsa, ecdsa or ed25519; "" for anything else.
func KeyType(pub crypto.PublicKey) string {
	switch pub.(type) {
	case *rsa.PublicKey:
		return KeyRSA
	case *ecdsa.PublicKey:
		return KeyECDSA
	case ed25519.PublicKey:
		return KeyEd25519
	}
	return ""
}

// SamePublicKey reports whether two public keys are equal; it is how a private key is matched
// with the leaf certificate it must belong to.
func SamePublicKey(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// CheckChain verifies that every certificate after the first issued the one before it (by its
// signature), which is what "leaf first, then each issuer" means. It does not require the chain
// to reach a trusted root.
func CheckChain(chain []*x509.Certificate) error {
	for i := 0; i+1 < len(chain); i++ {
		if err := chain[i].CheckSignatureFrom(chain[i+1]); err != nil {
			return fmt.Errorf("certificate %d (%s) was not issued by certificate %d (%s); "+
				"the chain must be in order: the leaf first, then each certificate's issuer",
				i+1, describe(chain[i]), i+2, describe(chain[i+1]))
		}
	}
	return nil
}

func describe(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return "CN=" + c.Subject.CommonName
	}
	return "subject " + c.Subject.String()
}

// CACheck says why cert cannot act as a certificate authority, or "" when it can: it needs the
// basic constraints extension with CA:TRUE and, when it restricts key usage, the cert_sign usage.
// These are the conditions crypto/x509 itself applies to an issuer.
func CACheck(cert *x509.Certificate) string {
	switch {
	case !cert.BasicConstraintsValid:
		return "has no basic constraints extension, so it is not a CA certificate"
	case !cert.IsCA:
		return "is not a CA certificate (basic constraints CA:FALSE)"
	case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return "is a CA certificate whose key usage does not include cert_sign"
	}
	return ""
}

// keyUsageNames are the names of the key usage bits, in bit order (RFC 5280 section 4.2.1.3).
var keyUsageNames = []struct {
	bit  x509.KeyUsage
	name string
}{
	{x509.KeyUsageDigitalSignature, "digital_signature"},
	{x509.KeyUsageContentCommitment, "content_commitment"},
	{x509.KeyUsageKeyEncipherment, "key_encipherment"},
	{x509.KeyUsageDataEncipherment, "data_encipherment"},
	{x509.KeyUsageKeyAgreement, "key_agreement"},
	{x509.KeyUsageCertSign, "cert_sign"},
	{x509.KeyUsageCRLSign, "crl_sign"},
	{x509.KeyUsageEncipherOnly, "encipher_only"},
	{x509.KeyUsageDecipherOnly, "decipher_only"},
}

// KeyUsages names the key usages of a certificate, in bit order; never nil.
func KeyUsages(c *x509.Certificate) []string {
	out := []string{}
	for _, u := range keyUsageNames {
		if c.KeyUsage&u.bit != 0 {
			out = append(out, u.name)
		}
	}
	return out
}

var extKeyUsageNames = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageAny:                            "any",
	x509.ExtKeyUsageServerAuth:                     "server_auth",
	x509.ExtKeyUsageClientAuth:                     "client_auth",
	x509.ExtKeyUsageCodeSigning:                    "code_signing",
	x509.ExtKeyUsageEmailProtection:                "email_protection",
	x509.ExtKeyUsageIPSECEndSystem:                 "ipsec_end_system",
	x509.ExtKeyUsageIPSECTunnel:                    "ipsec_tunnel",
	x509.ExtKeyUsageIPSECUser:                      "ipsec_user",
	x509.ExtKeyUsageTimeStamping:                   "time_stamping",
	x509.ExtKeyUsageOCSPSigning:                    "ocsp_signing",
	x509.ExtKeyUsageMicrosoftServerGatedCrypto:     "microsoft_server_gated_crypto",
	x509.ExtKeyUsageNetscapeServerGatedCrypto:      "netscape_server_gated_crypto",
	x509.ExtKeyUsageMicrosoftCommercialCodeSigning: "microsoft_commercial_code_signing",
	x509.ExtKeyUsageMicrosoftKernelCodeSigning:     "microsoft_kernel_code_signing",
}

// ExtKeyUsages names the extended key usages of a certificate in the order the certificate lists
// them; a usage without a name is shown as its dotted object identifier. Never nil.
func ExtKeyUsages(c *x509.Certificate) []string {
	out := []string{}
	for _, u := range c.ExtKeyUsage {
		if n, ok := extKeyUsageNames[u]; ok {
			out = append(out, n)
		}
	}
	for _, oid := range c.UnknownExtKeyUsage {
		out = append(out, asn1.ObjectIdentifier(oid).String())
	}
	return out
}

// IPs returns the IP address subject alternative names of a certificate as text; never nil.
func IPs(c *x509.Certificate) []string {
	out := []string{}
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}
