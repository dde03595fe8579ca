package edgeplane

import (
	"strings"

	"github.com/edgeplane/edgeplane/pki"
)

// CertificateAuthority is an uploaded CA certificate, used to validate client certificates
// (spec "CertificateAuthority"). Its fields are derived from the certificate at upload.
// Key usage names are those of RFC 5280 in snake case (digital_signature, cert_sign, crl_sign,
// …); extended key usages likewise (server_auth, client_auth, …), or the dotted OID of an
// unnamed one.
type CertificateAuthority struct {
	Meta
	Annotations
	// CAPEM is the certificate re-encoded canonically: one CERTIFICATE block, nothing around it.
	CAPEM             string   `json:"ca_pem"`
	SubjectCommonName string   `json:"subject_common_name"`
	NotBefore         string   `json:"not_before"`
	NotAfter          string   `json:"not_after"`
	KeyUsages         []string `json:"key_usages"`
	ExtendedKeyUsages []string `json:"extended_key_usages"`
}

// CertificateAuthorityCreate is the body of POST /certificate_authorities.
type CertificateAuthorityCreate struct {
	Echo
	AnnotationFields
	CAPEM *string `json:"ca_pem"`

	doc *CertificateAuthority
}

// Validate requires ca_pem to be exactly one certificate that can act as a CA; every failure is
// 400 ERR_NGROK_1913.
func (c *CertificateAuthorityCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(deref(c.CAPEM)) == "" {
		return Invalid(CodeNotCA, "ca_pem", "is required: the PEM certificate of the authority")
	}
	certs, err := pki.ParseCertificates(*c.CAPEM)
	if err != nil {
		return Invalid(CodeNotCA, "ca_pem", "%v", err)
	}
	if len(certs) != 1 {
		return Invalid(CodeNotCA, "ca_pem", "must hold exactly one certificate, found %d; upload each authority separately", len(certs))
	}
	ca := certs[0]
	if why := pki.CACheck(ca); why != "" {
		return Invalid(CodeNotCA, "ca_pem", "the certificate (%s) %s", leafName(ca), why)
	}
	c.doc = &CertificateAuthority{
		CAPEM:             pki.EncodeCertificates(certs),
		SubjectCommonName: ca.Subject.CommonName,
		NotBefore:         FormatTime(ca.NotBefore),
		NotAfter:          FormatTime(ca.NotAfter),
		KeyUsages:         pki.KeyUsages(ca),
		ExtendedKeyUsages: pki.ExtKeyUsages(ca),
	}
	return nil
}

// Create builds the document from the parsed certificate.
func (c *CertificateAuthorityCreate) Create(op *Op) (Document, error) {
	d := *c.doc
	c.ApplyTo(&d.Annotations)
	return &d, nil
}

// CertificateAuthorityUpdate is the body of PATCH /certificate_authorities/{id}.
type CertificateAuthorityUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *CertificateAuthorityUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*CertificateAuthority).Annotations)
	return nil
}
