package edgeplane

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/edgeplane/edgeplane/pki"
)

// SSH certificate authority key choices and their defaults.
const (
	DefaultSSHKeyType = pki.KeyEd25519
	DefaultRSAKeySize = 4096
	DefaultCurve      = "p256"
)

// Default validity of SSH certificates without valid_until, counted from creation.
const (
	DefaultUserCertValidity = 24 * time.Hour
	DefaultHostCertValidity = 365 * 24 * time.Hour
)

// SSHCertificateAuthority is a key pair that signs SSH user and host certificates (schema
// "SSHCertificateAuthority"). The server generates the pair; the private key never leaves the
// store (Op.KeepSecret) and is read back only to sign.
type SSHCertificateAuthority struct {
	Meta
	Annotations
	// PublicKey is the CA's public key in authorized_keys format: the line for an sshd
	// TrustedUserCAKeys file, or a known_hosts @cert-authority entry.
	PublicKey string `json:"public_key"`
	// KeyType is rsa, ecdsa or ed25519.
	KeyType string `json:"key_type"`
}

// SSHCertificateAuthorityCreate is the body of POST /ssh_certificate_authorities.
type SSHCertificateAuthorityCreate struct {
	Echo
	AnnotationFields
	// PrivateKeyType is rsa, ecdsa or ed25519 (default ed25519).
	PrivateKeyType *string `json:"private_key_type"`
	// EllipticCurve is p256, p384 or p521 (default p256), for ecdsa only.
	EllipticCurve *string `json:"elliptic_curve"`
	// KeySize is 2048 or 4096 (default 4096), for rsa only.
	KeySize *int `json:"key_size"`

	privatePEM, publicKey, keyType string
}

// Validate checks the key choice and generates the key pair. Generation happens here, outside
// the write transaction, because a 4096-bit RSA key takes a noticeable time and the transaction
// must stay short.
func (c *SSHCertificateAuthorityCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	keyType := strings.ToLower(deref(c.PrivateKeyType))
	if keyType == "" {
		keyType = DefaultSSHKeyType
	}
	curve := strings.ToLower(deref(c.EllipticCurve))
	bits := 0
	if c.KeySize != nil {
		bits = *c.KeySize
	}
	switch keyType {
	case pki.KeyRSA:
		if bits == 0 {
			bits = DefaultRSAKeySize
		}
		if bits != 2048 && bits != 4096 {
			return Invalid(CodeInvalid, "key_size", "must be 2048 or 4096, got %d", bits)
		}
		if curve != "" {
			return Invalid(CodeInvalid, "elliptic_curve", "applies only to ecdsa keys, not %s", keyType)
		}
	case pki.KeyECDSA:
		if curve == "" {
			curve = DefaultCurve
		}
		if _, ok := pki.Curves[curve]; !ok {
			return Invalid(CodeInvalid, "elliptic_curve", "must be p256, p384 or p521, got %q", deref(c.EllipticCurve))
		}
		if bits != 0 {
			return Invalid(CodeInvalid, "key_size", "applies only to rsa keys, not %s", keyType)
		}
	case pki.KeyEd25519:
		if curve != "" {
			return Invalid(CodeInvalid, "elliptic_curve", "applies only to ecdsa keys, not %s", keyType)
		}
		if bits != 0 {
			return Invalid(CodeInvalid, "key_size", "applies only to rsa keys, not %s", keyType)
		}
	default:
		return Invalid(CodeInvalid, "private_key_type", "must be rsa, ecdsa or ed25519, got %q", deref(c.PrivateKeyType))
	}
	priv, pub, err := pki.GenerateKey(keyType, bits, curve)
	if err != nil {
		return err
	}
	c.privatePEM, c.publicKey, c.keyType = priv, pub, keyType
	return nil
}

// Create builds the CA and hands its private key to the store.
func (c *SSHCertificateAuthorityCreate) Create(op *Op) (Document, error) {
	d := &SSHCertificateAuthority{PublicKey: c.publicKey, KeyType: c.keyType}
	c.ApplyTo(&d.Annotations)
	op.KeepSecret(c.privatePEM)
	return d, nil
}

// SSHCertificateAuthorityUpdate is the body of PATCH /ssh_certificate_authorities/{id}.
type SSHCertificateAuthorityUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *SSHCertificateAuthorityUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*SSHCertificateAuthority).Annotations)
	return nil
}

func sshCAInUse(id string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeSSHCAInUse,
		Msg: "SSH certificate authority " + id + " still has SSH user or host certificates; delete them first."}
}

// sshCert is what user and host certificates share: everything but the annotations is fixed at
// creation.
type sshCert struct {
	PublicKey                 string   `json:"public_key"`
	KeyType                   string   `json:"key_type"`
	SSHCertificateAuthorityID string   `json:"ssh_certificate_authority_id"`
	Principals                []string `json:"principals"`
	ValidAfter                string   `json:"valid_after"`
	ValidUntil                string   `json:"valid_until"`
	// Certificate is the signed certificate as one authorized_keys line (for an id_*-cert.pub
	// file, or an sshd HostCertificate file).
	Certificate string `json:"certificate"`
}

// References keeps the signing CA from being deleted while the certificate exists.
func (c *sshCert) References() []Reference {
	return []Reference{{To: c.SSHCertificateAuthorityID, Mode: RefRestrict}}
}

// SSHUserCertificate is a user certificate signed by an SSH CA of the account (spec
// "SSHUserCertificate").
type SSHUserCertificate struct {
	Meta
	Annotations
	sshCert
	CriticalOptions map[string]string `json:"critical_options"`
	Extensions      map[string]string `json:"extensions"`
}

// SSHHostCertificate is a host certificate signed by an SSH CA of the account (schema
// "SSHHostCertificate").
type SSHHostCertificate struct {
	Meta
	Annotations
	sshCert
}

// sshCertFields are the request fields user and host certificates share.
type sshCertFields struct {
	SSHCertificateAuthorityID *string  `json:"ssh_certificate_authority_id"`
	PublicKey                 *string  `json:"public_key"`
	Principals                []string `json:"principals"`
	ValidAfter                *string  `json:"valid_after"`
	ValidUntil                *string  `json:"valid_until"`

	keyType                 string
	validAfter, validBefore time.Time
}

func (f *sshCertFields) validate() error {
	if deref(f.SSHCertificateAuthorityID) == "" {
		return Invalid(CodeInvalid, "ssh_certificate_authority_id", "is required")
	}
	if deref(f.PublicKey) == "" {
		return Invalid(CodeInvalid, "public_key", "is required: the public key to certify, in OpenSSH authorized_keys format")
	}
	key, keyType, err := pki.ParseAuthorizedKey(*f.PublicKey)
	if err != nil {
		return Invalid(CodeInvalid, "public_key", "%v", err)
	}
	f.PublicKey, f.keyType = &key, keyType
	for i, p := range f.Principals {
		if p == "" || strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return Invalid(CodeInvalid, "principals["+strconv.Itoa(i)+"]", "%q is not a valid principal: it must be non-empty, without spaces or control characters", p)
		}
	}
	if f.validAfter, err = sshTime("valid_after", f.ValidAfter); err != nil {
		return err
	}
	f.validBefore, err = sshTime("valid_until", f.ValidUntil)
	return err
}

// sign fills in the validity defaults, checks the window, signs with the named CA and returns
// the certificate's fields. It leaves f unchanged, so a retried transaction signs again from the
// same request.
func (f *sshCertFields) sign(op *Op, host bool, validity time.Duration, critical, extensions map[string]string) (sshCert, error) {
	cert, after, before, err := f.signRaw(op, host, validity, critical, extensions)
	if err != nil {
		return sshCert{}, err
	}
	return sshCert{PublicKey: *f.PublicKey, KeyType: f.keyType, SSHCertificateAuthorityID: *f.SSHCertificateAuthorityID,
		Principals: nonNil(f.Principals), ValidAfter: FormatTime(after), ValidUntil: FormatTime(before), Certificate: cert}, nil
}

func (f *sshCertFields) signRaw(op *Op, host bool, validity time.Duration, critical, extensions map[string]string) (cert string, after, before time.Time, err error) {
	caID := *f.SSHCertificateAuthorityID
	created := op.Created.UTC().Truncate(time.Second)
	after, before = f.validAfter, f.validBefore
	if after.IsZero() {
		after = created
	}
	if before.IsZero() {
		before = created.Add(validity)
	}
	if !before.After(after) {
		return "", after, before, Invalid(CodeInvalid, "valid_until", "%s must be after valid_after %s", FormatTime(before), FormatTime(after))
	}
	if ok, err := op.Tx.Exists(SSHCertificateAuthorities, caID); err != nil || !ok {
		if err == nil {
			err = Invalid(CodeInvalid, "ssh_certificate_authority_id", "no SSH certificate authority %q in this account", caID)
		}
		return "", after, before, err
	}
	caKey, err := op.Tx.Secret(caID)
	if err != nil {
		return "", after, before, err
	}
	cert, err = pki.SignCertificate(caKey, pki.CertRequest{
		Host: host, PublicKey: *f.PublicKey, KeyID: op.ID, Principals: f.Principals,
		ValidAfter: after, ValidBefore: before, CriticalOptions: critical, Extensions: extensions,
	})
	return cert, after, before, err
}

// sshTime parses an RFC 3339 time of a certificate's validity window; nil or "" is the zero time
// (the default). Sub-second parts are dropped: SSH certificates count whole seconds.
func sshTime(field string, s *string) (time.Time, error) {
	if deref(s) == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return time.Time{}, Invalid(CodeInvalid, field, "%q is not an RFC 3339 time such as \"2026-01-02T15:04:05Z\"", *s)
	}
	if t.Unix() < 0 {
		return time.Time{}, Invalid(CodeInvalid, field, "%q is before 1970, which SSH certificates cannot express", *s)
	}
	return t.UTC().Truncate(time.Second), nil
}

// SSHUserCertificateCreate is the body of POST /ssh_user_certificates.
type SSHUserCertificateCreate struct {
	Echo
	AnnotationFields
	sshCertFields
	CriticalOptions map[string]string `json:"critical_options"`
	// Extensions absent or null means permit-pty and permit-user-rc; {} means none.
	Extensions map[string]string `json:"extensions"`
}

// Validate checks the key, principals, validity times, critical options and extensions.
func (c *SSHUserCertificateCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.CriticalOptions)) {
		if err := checkCriticalOption(name, c.CriticalOptions[name]); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Extensions)) {
		if name == "" || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return Invalid(CodeInvalid, "extensions", "%q is not a valid extension name", name)
		}
	}
	return nil
}

// checkCriticalOption accepts the two critical options OpenSSH defines: force-command (a
// command) and source-address (a comma-separated list of addresses or CIDR ranges).
func checkCriticalOption(name, value string) error {
	field := "critical_options." + name
	switch name {
	case "force-command":
		if strings.TrimSpace(value) == "" {
			return Invalid(CodeInvalid, field, "must name the command to force")
		}
	case "source-address":
		if value == "" {
			return Invalid(CodeInvalid, field, "must list the addresses or CIDR ranges the certificate may be used from")
		}
		for a := range strings.SplitSeq(value, ",") {
			if _, err := CanonicalCIDR(a); err != nil {
				return Invalid(CodeInvalid, field, "%q: %s", a, strings.TrimPrefix(err.Error(), "cidr: "))
			}
		}
	default:
		return Invalid(CodeInvalid, "critical_options", "%q is not a critical option; only force-command and source-address are defined", name)
	}
	return nil
}

// Create signs the certificate with the named CA of the account.
func (c *SSHUserCertificateCreate) Create(op *Op) (Document, error) {
	critical := c.CriticalOptions
	if critical == nil {
		critical = map[string]string{}
	}
	ext := c.Extensions
	if ext == nil {
		ext = map[string]string{"permit-pty": "", "permit-user-rc": ""}
	}
	base, err := c.sign(op, false, DefaultUserCertValidity, critical, ext)
	if err != nil {
		return nil, err
	}
	d := &SSHUserCertificate{sshCert: base, CriticalOptions: critical, Extensions: ext}
	c.ApplyTo(&d.Annotations)
	return d, nil
}

// SSHUserCertificateUpdate is the body of PATCH /ssh_user_certificates/{id}.
type SSHUserCertificateUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *SSHUserCertificateUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*SSHUserCertificate).Annotations)
	return nil
}

// SSHHostCertificateCreate is the body of POST /ssh_host_certificates.
type SSHHostCertificateCreate struct {
	Echo
	AnnotationFields
	sshCertFields
}

// Validate checks the key, principals and validity times.
func (c *SSHHostCertificateCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	return c.validate()
}

// Create signs the host certificate with the named CA of the account.
func (c *SSHHostCertificateCreate) Create(op *Op) (Document, error) {
	base, err := c.sign(op, true, DefaultHostCertValidity, nil, nil)
	if err != nil {
		return nil, err
	}
	d := &SSHHostCertificate{sshCert: base}
	c.ApplyTo(&d.Annotations)
	return d, nil
}

// SSHHostCertificateUpdate is the body of PATCH /ssh_host_certificates/{id}.
type SSHHostCertificateUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *SSHHostCertificateUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*SSHHostCertificate).Annotations)
	return nil
}
