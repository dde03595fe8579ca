package edgeplane

import (
	"crypto/x509"
	"net/http"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/pki"
)

// TLSCertificate is an uploaded certificate chain with its private key (schema "TLSCertificate").
// Every field but the annotations is derived from the leaf at upload and fixed afterwards. The
// private key is not a field: the store keeps it beside the document (Op.KeepSecret), so no
// response can show it.
type TLSCertificate struct {
	Meta
	Annotations
	// CertificatePEM is the chain, leaf first, re-encoded canonically (one CERTIFICATE block per
	// certificate, nothing around them).
	CertificatePEM          string `json:"certificate_pem"`
	SubjectCommonName       string `json:"subject_common_name"`
	SubjectAlternativeNames SANs   `json:"subject_alternative_names"`
	// IssuedAt is set for certificates edgeplane issues itself; null for uploaded ones.
	IssuedAt                  *string  `json:"issued_at"`
	NotBefore                 string   `json:"not_before"`
	NotAfter                  string   `json:"not_after"`
	KeyUsages                 []string `json:"key_usages"`
	ExtendedKeyUsages         []string `json:"extended_key_usages"`
	PrivateKeyType            string   `json:"private_key_type"`
	IssuerCommonName          string   `json:"issuer_common_name"`
	SerialNumber              string   `json:"serial_number"`
	SubjectOrganization       string   `json:"subject_organization"`
	SubjectOrganizationalUnit string   `json:"subject_organizational_unit"`
	SubjectLocality           string   `json:"subject_locality"`
	SubjectProvince           string   `json:"subject_province"`
	SubjectCountry            string   `json:"subject_country"`
}

// SANs are the subject alternative names of a certificate (schema "TLSCertificateSANs").
type SANs struct {
	DNSNames []string `json:"dns_names"`
	IPs      []string `json:"ips"`
}

// TLSCertificateCreate is the body of POST /tls_certificates.
type TLSCertificateCreate struct {
	Echo
	AnnotationFields
	CertificatePEM *string `json:"certificate_pem"`
	PrivateKeyPEM  *string `json:"private_key_pem"`

	doc    *TLSCertificate
	keyPEM string
}

// Validate parses the chain and the key and checks that they belong together: the key must be
// the leaf's, and each certificate of the chain must be issued by the next. All the cryptography
// happens here, before the write transaction.
func (c *TLSCertificateCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	if deref(c.CertificatePEM) == "" {
		return Invalid(CodeInvalid, "certificate_pem", "is required: the PEM certificate chain, leaf first")
	}
	if deref(c.PrivateKeyPEM) == "" {
		return Invalid(CodeInvalid, "private_key_pem", "is required: the PEM private key of the leaf certificate")
	}
	chain, err := pki.ParseCertificates(*c.CertificatePEM)
	if err != nil {
		return Invalid(CodeInvalid, "certificate_pem", "%v", err)
	}
	key, keyPEM, err := pki.ParsePrivateKey(*c.PrivateKeyPEM)
	if err != nil {
		return Invalid(CodeInvalid, "private_key_pem", "%v", err)
	}
	leaf := chain[0]
	if !pki.SamePublicKey(leaf.PublicKey, key.Public()) {
		return Invalid(CodeInvalid, "private_key_pem", "does not match the leaf certificate (the first in certificate_pem, %s): "+
			"upload the key the certificate was issued for", leafName(leaf))
	}
	if err := pki.CheckChain(chain); err != nil {
		return Invalid(CodeInvalid, "certificate_pem", "%v", err)
	}
	c.keyPEM = keyPEM
	c.doc = &TLSCertificate{
		CertificatePEM:    pki.EncodeCertificates(chain),
		SubjectCommonName: leaf.Subject.CommonName,
		SubjectAlternativeNames: SANs{
			DNSNames: nonNil(leaf.DNSNames),
			IPs:      pki.IPs(leaf),
		},
		NotBefore:                 FormatTime(leaf.NotBefore),
		NotAfter:                  FormatTime(leaf.NotAfter),
		KeyUsages:                 pki.KeyUsages(leaf),
		ExtendedKeyUsages:         pki.ExtKeyUsages(leaf),
		PrivateKeyType:            pki.KeyType(key.Public()),
		IssuerCommonName:          leaf.Issuer.CommonName,
		SerialNumber:              leaf.SerialNumber.Text(16),
		SubjectOrganization:       strings.Join(leaf.Subject.Organization, ", "),
		SubjectOrganizationalUnit: strings.Join(leaf.Subject.OrganizationalUnit, ", "),
		SubjectLocality:           strings.Join(leaf.Subject.Locality, ", "),
		SubjectProvince:           strings.Join(leaf.Subject.Province, ", "),
		SubjectCountry:            strings.Join(leaf.Subject.Country, ", "),
	}
	return nil
}

// Create builds the document and hands the private key to the store.
func (c *TLSCertificateCreate) Create(op *Op) (Document, error) {
	d := *c.doc
	c.ApplyTo(&d.Annotations)
	op.KeepSecret(c.keyPEM)
	return &d, nil
}

// NewIssuedCertificate is the creator of a certificate edgeplane obtained itself (a managed
// certificate of a reserved domain): the chain and key are checked as an upload's are, and
// issued_at is set to issued.
func NewIssuedCertificate(chainPEM, keyPEM string, issued time.Time) (*TLSCertificateCreate, error) {
	c := &TLSCertificateCreate{CertificatePEM: &chainPEM, PrivateKeyPEM: &keyPEM}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	at := FormatTime(issued)
	c.doc.IssuedAt = &at
	return c, nil
}

// TLSCertificateUpdate is the body of PATCH /tls_certificates/{id}: only the annotations change.
type TLSCertificateUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *TLSCertificateUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*TLSCertificate).Annotations)
	return nil
}

func certificateInUse(id string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeCertificateInUse,
		Msg: "TLS certificate " + id + " is the certificate of a reserved domain; detach it first " +
			"(PATCH the domain with \"certificate_id\": \"\") or delete the domain."}
}

func leafName(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return "CN=" + c.Subject.CommonName
	}
	return "serial " + c.SerialNumber.Text(16)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
