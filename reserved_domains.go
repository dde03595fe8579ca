package edgeplane

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ClaimDomain is the claim namespace of reserved domain names: a name is reserved by at most one
// account at a time.
const ClaimDomain = "domain"

// DomainRegions are the values the deprecated region field of a reserved domain accepts.
var DomainRegions = []string{"au", "eu", "ap", "us", "jp", "in", "sa"}

// Certificate management values.
const (
	CertAuthorityLetsEncrypt = "letsencrypt"
	certKeyRSA               = "rsa"
	certKeyECDSA             = "ecdsa"
)

// provisioningPending is the status message of a new provisioning job, until the certificate
// manager of a serving edgeplane takes it up.
const provisioningPending = "Managed certificate provisioning is pending: edgeplane will order a certificate for this domain from its ACME directory."

// Error codes of a failing provisioning job (spec "ReservedDomainCertJob").
const (
	// CertErrorInternal is a temporary failure: the job is retried at retries_at.
	CertErrorInternal = "INTERNAL_ERROR"
	// CertErrorDNS is a permanent failure the user must correct (the name does not resolve to
	// edgeplane, or the ACME server could not reach edgeplane through it); setting the policy
	// again retries.
	CertErrorDNS = "DNS_ERROR"
)

// ReservedDomain is a hostname held by the account (spec "ReservedDomain"). Its name is unique
// across all accounts and fixed at creation. Its TLS certificate is either an uploaded one
// (certificate) or managed automatically (certificate_management_policy), never both.
type ReservedDomain struct {
	Meta
	Annotations
	Domain string `json:"domain"`
	// Region is deprecated; "" when unset.
	Region string `json:"region"`
	// CNAMETarget is where a custom domain's CNAME record must point; null under a service
	// domain. Generated once at creation, so it is stable.
	CNAMETarget *string `json:"cname_target"`
	// The endpoint configurations are always null: edgeplane does not offer them.
	HTTPEndpointConfiguration   *Ref        `json:"http_endpoint_configuration"`
	HTTPSEndpointConfiguration  *Ref        `json:"https_endpoint_configuration"`
	Certificate                 *Ref        `json:"certificate"`
	CertificateManagementPolicy *CertPolicy `json:"certificate_management_policy"`
	CertificateManagementStatus *CertStatus `json:"certificate_management_status"`
	// ACMEChallengeCNAMETarget is set for wildcard custom domains only: the target of the CNAME
	// record of _acme-challenge.<domain>.
	ACMEChallengeCNAMETarget *string `json:"acme_challenge_cname_target"`
}

// CertPolicy configures automatic certificate management of a reserved domain (schema
// "ReservedDomainCertPolicy").
type CertPolicy struct {
	Authority      string `json:"authority"`
	PrivateKeyType string `json:"private_key_type"`
}

// CertStatus is the state of automatic certificate management (schema
// "ReservedDomainCertStatus"). RenewsAt stays null until a certificate has been issued: there is
// nothing to renew before.
type CertStatus struct {
	RenewsAt        *string  `json:"renews_at"`
	ProvisioningJob *CertJob `json:"provisioning_job"`
}

// CertJob is a certificate provisioning job (schema "ReservedDomainCertJob"). ErrorCode is null
// while the job is not failing; RetriesAt is null while no retry is scheduled.
type CertJob struct {
	ErrorCode *string `json:"error_code"`
	Msg       string  `json:"msg"`
	StartedAt string  `json:"started_at"`
	RetriesAt *string `json:"retries_at"`
}

// Claims makes the domain name unique across accounts.
func (d *ReservedDomain) Claims() []Claim { return []Claim{{Namespace: ClaimDomain, Value: d.Domain}} }

// Conflict is 409 ERR_NGROK_413 when the caller's account already holds the name, 409
// ERR_NGROK_414 when another account does.
func (d *ReservedDomain) Conflict(c Claim, sameAccount bool) *Error {
	if sameAccount {
		return &Error{Status: http.StatusConflict, Code: CodeDomainReserved, Field: "domain",
			Msg: fmt.Sprintf("domain: %q is already reserved in this account", c.Value)}
	}
	return &Error{Status: http.StatusConflict, Code: CodeDomainReservedElsewhere, Field: "domain",
		Msg: fmt.Sprintf("domain: %q is already reserved by another account", c.Value)}
}

// References keeps an uploaded certificate from being deleted while the domain uses it.
func (d *ReservedDomain) References() []Reference {
	if d.Certificate == nil {
		return nil
	}
	return []Reference{{To: d.Certificate.ID, Mode: RefRestrict}}
}

// setPolicy turns automatic management on with p (off when p is nil). A new or changed policy
// starts a new provisioning job; the same policy again leaves the status as it is, except that
// it restarts a job that failed with DNS_ERROR. The certificate already issued, if any, is kept
// and served until the new one replaces it.
func (d *ReservedDomain) setPolicy(p *CertPolicy, now time.Time) {
	if p == nil {
		d.CertificateManagementPolicy, d.CertificateManagementStatus = nil, nil
		return
	}
	if d.CertificateManagementPolicy != nil && *d.CertificateManagementPolicy == *p && d.CertificateManagementStatus != nil {
		job := d.CertificateManagementStatus.ProvisioningJob
		if job == nil || job.ErrorCode == nil || *job.ErrorCode != CertErrorDNS {
			return
		}
		// The same policy again retries a job that failed for DNS: the user says it is fixed.
	}
	d.CertificateManagementPolicy = p
	d.CertificateManagementStatus = &CertStatus{ProvisioningJob: &CertJob{Msg: provisioningPending, StartedAt: FormatTime(now)}}
}

// CertPolicyFields is certificate_management_policy in a request. An empty object ({}, or both
// fields empty) means "no policy": on update it turns automatic management off.
type CertPolicyFields struct {
	Authority      *string `json:"authority"`
	PrivateKeyType *string `json:"private_key_type"`
}

// resolve checks the policy and fills in its defaults (authority letsencrypt, key type rsa); it
// returns nil for an empty policy.
func (f *CertPolicyFields) resolve() (*CertPolicy, error) {
	if f == nil {
		return nil, nil
	}
	p := CertPolicy{Authority: deref(f.Authority), PrivateKeyType: deref(f.PrivateKeyType)}
	if p.Authority == "" && p.PrivateKeyType == "" {
		return nil, nil
	}
	if p.Authority == "" {
		p.Authority = CertAuthorityLetsEncrypt
	}
	if p.Authority != CertAuthorityLetsEncrypt {
		return nil, Invalid(CodeInvalid, "certificate_management_policy.authority",
			"must be %q, the only supported authority, got %q", CertAuthorityLetsEncrypt, p.Authority)
	}
	if p.PrivateKeyType == "" {
		p.PrivateKeyType = certKeyRSA
	}
	if p.PrivateKeyType != certKeyRSA && p.PrivateKeyType != certKeyECDSA {
		return nil, Invalid(CodeInvalid, "certificate_management_policy.private_key_type",
			"must be \"rsa\" or \"ecdsa\", got %q", p.PrivateKeyType)
	}
	return &p, nil
}

// ReservedDomainCreate is the body of POST /reserved_domains.
type ReservedDomainCreate struct {
	Echo
	AnnotationFields
	Domain                      *string           `json:"domain"`
	Region                      *string           `json:"region"`
	CertificateID               *string           `json:"certificate_id"`
	CertificateManagementPolicy *CertPolicyFields `json:"certificate_management_policy"`

	policy *CertPolicy
}

// Validate checks the name (lowercasing it), the region and the certificate choice.
func (c *ReservedDomainCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	if c.Domain == nil || *c.Domain == "" {
		return Invalid(CodeInvalid, "domain", "is required")
	}
	name, err := canonicalDomain(*c.Domain)
	if err != nil {
		return err
	}
	c.Domain = &name
	if r := deref(c.Region); r != "" && !slices.Contains(DomainRegions, r) {
		return Invalid(CodeInvalid, "region", "must be one of %s, got %q", strings.Join(DomainRegions, ", "), r)
	}
	if c.policy, err = c.CertificateManagementPolicy.resolve(); err != nil {
		return err
	}
	if deref(c.CertificateID) != "" && c.policy != nil {
		return certAndPolicy()
	}
	return nil
}

// Create reserves the name: it must not be a service base domain or lie inside the CNAME zone;
// a custom (non-service) domain gets a generated CNAME target, and a wildcard custom domain an
// ACME challenge target too. The store then claims the name across all accounts.
func (c *ReservedDomainCreate) Create(op *Op) (Document, error) {
	s := op.Settings.effective()
	name := *c.Domain
	bare, wildcard := strings.CutPrefix(name, "*.")
	if within(bare, s.CNAMEZone) {
		return nil, Invalid(CodeInvalid, "domain", "%q is inside %q, the zone of edgeplane's CNAME targets, and cannot be reserved", name, s.CNAMEZone)
	}
	if slices.Contains(s.ServiceDomains, bare) {
		return nil, Invalid(CodeInvalid, "domain", "%q is a service base domain and cannot be reserved; reserve a name under it, such as \"app.%s\"", name, bare)
	}
	if !wildcard {
		if err := notServedElsewhere(op, name); err != nil {
			return nil, err
		}
	}
	if err := notOnlineElsewhere(op, name); err != nil {
		return nil, err
	}
	d := &ReservedDomain{Domain: name, Region: deref(c.Region)}
	c.ApplyTo(&d.Annotations)
	if s.serviceDomainOf(bare) == "" {
		target := randomLabel() + "." + s.CNAMEZone
		d.CNAMETarget = &target
		if wildcard {
			acme := randomLabel() + ".acme." + s.CNAMEZone
			d.ACMEChallengeCNAMETarget = &acme
		}
	}
	if id := deref(c.CertificateID); id != "" {
		if err := findCertificate(op, id); err != nil {
			return nil, err
		}
		d.Certificate = NewRef(id)
	}
	d.setPolicy(c.policy, op.Created)
	return d, nil
}

// ReservedDomainUpdate is the body of PATCH /reserved_domains/{id}. The name and region are fixed.
// certificate_id "" detaches the certificate; a certificate_management_policy of {} turns
// automatic management off. Setting one of the two turns the other off.
type ReservedDomainUpdate struct {
	Echo
	AnnotationFields
	CertificateID                *string           `json:"certificate_id"`
	CertificateManagementPolicy  *CertPolicyFields `json:"certificate_management_policy"`
	HTTPEndpointConfigurationID  *string           `json:"http_endpoint_configuration_id"`
	HTTPSEndpointConfigurationID *string           `json:"https_endpoint_configuration_id"`

	policy *CertPolicy
}

// Validate checks the certificate choice and refuses endpoint configurations, which edgeplane
// does not offer: any id names a configuration that does not exist ("" clears, and is accepted).
func (u *ReservedDomainUpdate) Validate() error {
	if err := u.AnnotationFields.Validate(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		id   *string
	}{{"http_endpoint_configuration_id", u.HTTPEndpointConfigurationID}, {"https_endpoint_configuration_id", u.HTTPSEndpointConfigurationID}} {
		if deref(f.id) != "" {
			return Invalid(CodeInvalid, f.name, "no endpoint configuration %q in this account (edgeplane does not offer endpoint configurations)", *f.id)
		}
	}
	var err error
	if u.policy, err = u.CertificateManagementPolicy.resolve(); err != nil {
		return err
	}
	if deref(u.CertificateID) != "" && u.policy != nil {
		return certAndPolicy()
	}
	return nil
}

// Apply changes annotations and the certificate choice.
func (u *ReservedDomainUpdate) Apply(op *Op, doc Document) error {
	d := doc.(*ReservedDomain)
	u.ApplyTo(&d.Annotations)
	if u.CertificateID != nil {
		if id := *u.CertificateID; id == "" {
			d.Certificate = nil
		} else {
			if err := findCertificate(op, id); err != nil {
				return err
			}
			d.Certificate = NewRef(id)
			d.setPolicy(nil, time.Time{})
		}
	}
	if u.CertificateManagementPolicy != nil {
		d.setPolicy(u.policy, time.Now())
		if u.policy != nil && d.Certificate != nil {
			// An uploaded certificate gives way to the policy; one the policy issued stays.
			c, err := op.Tx.Get(TLSCertificates, d.Certificate.ID)
			if err != nil && !IsNotFound(err) {
				return err
			}
			if tc, ok := c.(*TLSCertificate); !ok || tc.IssuedAt == nil {
				d.Certificate = nil
			}
		}
	}
	return nil
}

func certAndPolicy() error {
	return &Error{Status: http.StatusBadRequest, Code: CodeCertAndPolicy, Field: "certificate_id",
		Msg: "certificate_id and certificate_management_policy are mutually exclusive: give an uploaded certificate or a management policy, not both"}
}

func findCertificate(op *Op, id string) error {
	ok, err := op.Tx.Exists(TLSCertificates, id)
	if err == nil && !ok {
		err = Invalid(CodeInvalid, "certificate_id", "no TLS certificate %q in this account", id)
	}
	return err
}

// notServedElsewhere refuses to reserve name exactly while an edge of another account serves it.
// An exact reservation is stronger than a wildcard: once reserved, the name is its account's, and
// another account's wildcard above it no longer covers it, for edges (resolveHostports) as for
// agent binds. But an edge already serving the name through that wildcard keeps serving it: the
// reservation is refused (409 ERR_NGROK_414) until the edge's account removes the hostport, so no
// live traffic changes hands without its owner acting. The message names the hostport and the
// wildcard, never the other account's edge. The wildcard is locked exclusively first, so an edge
// of its account being written at the same time either commits before this check sees it or
// waits, and then finds the name reserved.
func notServedElsewhere(op *Op, name string) error {
	var wildcard string
	if _, parent, ok := strings.Cut(name, "."); ok {
		wildcard = "*." + parent
		if _, _, err := op.Tx.ClaimedExclusive(ClaimDomain, wildcard); err != nil && !IsNotFound(err) {
			return err
		}
	}
	hostport := name + ":443"
	_, mine, err := op.Tx.Claimed(ClaimHostport, hostport)
	switch {
	case IsNotFound(err) || (err == nil && mine):
		return nil
	case err != nil:
		return err
	}
	return &Error{Status: http.StatusConflict, Code: CodeDomainReservedElsewhere, Field: "domain",
		Msg: fmt.Sprintf("domain: %q is served as %q by an edge of another account, under that account's reserved wildcard %q; "+
			"it can be reserved once that edge no longer serves it", name, hostport, wildcard)}
}

// notOnlineElsewhere refuses to reserve a name another account's agent is online on (for a
// wildcard, a name directly under it that no exact reservation covers): the reservation would
// hand that endpoint's traffic to the caller without its owner acting. A name already
// reserved is left to the claim, which answers 413 or 414.
func notOnlineElsewhere(op *Op, name string) error {
	if _, _, err := op.Tx.Claimed(ClaimDomain, name); !IsNotFound(err) {
		return err
	}
	online, err := op.Tx.OnlineElsewhere(name)
	switch {
	case err != nil:
		return err
	case !online:
		return nil
	case strings.HasPrefix(name, "*."):
		return &Error{Status: http.StatusConflict, Code: CodeDomainOnline, Field: "domain",
			Msg: fmt.Sprintf("domain: %q would cover names on which another account is running an active tunnel; "+
				"it can be reserved once those endpoints are offline", name)}
	}
	return &Error{Status: http.StatusConflict, Code: CodeDomainOnline, Field: "domain",
		Msg: fmt.Sprintf("domain: another account is running an active tunnel on %q; it can be reserved once that endpoint is offline", name)}
}

func domainInUse(id string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeDomainInUse,
		Msg: "Reserved domain " + id + " is used by the hostports of an edge; remove it from the edge before deleting it."}
}

// canonicalDomain lowercases a reserved domain name and checks it: a hostname of at least two
// labels, optionally with a leading "*." wildcard label, whose last label is not all digits (so
// an IP address is not a domain).
func canonicalDomain(s string) (string, error) {
	name := strings.ToLower(s)
	if !ValidHostname(name, true) {
		return "", Invalid(CodeInvalid, "domain", "%q is not a valid hostname: use labels of 1 to 63 letters, digits and inner hyphens "+
			"separated by dots, at least two labels and at most 253 characters, optionally starting with \"*.\"", s)
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.Trim(last, "0123456789") == "" {
		return "", Invalid(CodeInvalid, "domain", "%q is not a valid hostname: the last label must not be all digits", s)
	}
	return name, nil
}

// randomLabel is a DNS label of 16 random lowercase base32 characters (80 bits).
func randomLabel() string { return strings.ToLower(rand.Text()[:16]) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
