package edgeplane

import (
	"maps"
	"slices"
	"strings"
)

// The module types shared by edges and routes: each has a request ("mutate") shape with Validate
// and Build, and a response shape stored in the parent document. Request shapes refer to other
// objects by id; response shapes by Ref.

// Module error codes.
const (
	CodeUnsupportedTLSVersion = 219
	CodeBadTerminateAt        = 224
	CodeBackendMissing        = 6501
	CodeBackendInUse          = 6502
	CodeBadErrorThreshold     = 7011
	CodeBadNumBuckets         = 7018
	CodeProviderNoSecret      = 7026
	CodeProviderNeedsSecret   = 7027
	CodeProviderUnsupported   = 7030
	CodeNeedsEdgeTermination  = 7062
	CodeCAMissing             = 7072
	CodeOneAuthModule         = 7079
)

// --- backend -----------------------------------------------------------------------------------

// EndpointBackend sends traffic to a backend.
type EndpointBackend struct {
	Enabled bool `json:"enabled"`
	Backend *Ref `json:"backend"`
}

// EndpointBackendMutate is the request shape of EndpointBackend.
type EndpointBackendMutate struct {
	Enabled   *bool   `json:"enabled"`
	BackendID *string `json:"backend_id"`
}

// Validate requires a backend id.
func (m *EndpointBackendMutate) Validate() error {
	if m.BackendID == nil || *m.BackendID == "" {
		return Invalid(CodeBackendMissing, "backend_id", "is required")
	}
	return nil
}

// Build requires the backend to exist in the account.
func (m *EndpointBackendMutate) Build(op *Op) (any, error) {
	if err := mustExist(op, *m.BackendID, "backend_id", CodeBackendMissing, "backend", backendKinds()); err != nil {
		return nil, err
	}
	return &EndpointBackend{Enabled: enabled(m.Enabled), Backend: NewRef(*m.BackendID)}, nil
}

// --- ip_restriction ----------------------------------------------------------------------------

// EndpointIPPolicy restricts sources to the rules of IP policies.
type EndpointIPPolicy struct {
	Enabled    bool   `json:"enabled"`
	IPPolicies []*Ref `json:"ip_policies"`
}

// EndpointIPPolicyMutate is the request shape of EndpointIPPolicy.
type EndpointIPPolicyMutate struct {
	Enabled     *bool    `json:"enabled"`
	IPPolicyIDs []string `json:"ip_policy_ids"`
}

// Validate requires at least one policy.
func (m *EndpointIPPolicyMutate) Validate() error {
	if len(m.IPPolicyIDs) == 0 {
		return Invalid(CodeIPPolicyMissing, "ip_policy_ids", "at least one IP policy id is required")
	}
	return maxEntries(CodeInvalid, "ip_policy_ids", len(m.IPPolicyIDs), MaxModuleListEntries)
}

// Build requires every policy to exist in the account. A policy deleted later stays referenced
// and acts as if it had no rules (spec "IPPolicy").
func (m *EndpointIPPolicyMutate) Build(op *Op) (any, error) {
	refs, err := refsTo(op, m.IPPolicyIDs, "ip_policy_ids", CodeIPPolicyMissing, "IP policy", []*Resource{IPPolicies})
	if err != nil {
		return nil, err
	}
	return &EndpointIPPolicy{Enabled: enabled(m.Enabled), IPPolicies: refs}, nil
}

// --- mutual_tls --------------------------------------------------------------------------------

// EndpointMutualTLS requires client certificates signed by the listed authorities.
type EndpointMutualTLS struct {
	Enabled                bool   `json:"enabled"`
	CertificateAuthorities []*Ref `json:"certificate_authorities"`
}

// EndpointMutualTLSMutate is the request shape of EndpointMutualTLS.
type EndpointMutualTLSMutate struct {
	Enabled                 *bool    `json:"enabled"`
	CertificateAuthorityIDs []string `json:"certificate_authority_ids"`
}

// Validate requires at least one authority.
func (m *EndpointMutualTLSMutate) Validate() error {
	if len(m.CertificateAuthorityIDs) == 0 {
		return Invalid(CodeCAMissing, "certificate_authority_ids", "at least one certificate authority id is required")
	}
	return maxEntries(CodeInvalid, "certificate_authority_ids", len(m.CertificateAuthorityIDs), MaxModuleListEntries)
}

// Build requires every authority to exist in the account.
func (m *EndpointMutualTLSMutate) Build(op *Op) (any, error) {
	refs, err := refsTo(op, m.CertificateAuthorityIDs, "certificate_authority_ids", CodeCAMissing, "certificate authority", []*Resource{CertificateAuthorities})
	if err != nil {
		return nil, err
	}
	return &EndpointMutualTLS{Enabled: enabled(m.Enabled), CertificateAuthorities: refs}, nil
}

// --- tls_termination ---------------------------------------------------------------------------

// TLS termination values.
var tlsVersions = []string{"1.0", "1.1", "1.2", "1.3"}

const (
	defaultMinTLSVersion = "1.2"
	terminateEdge        = "edge"
	terminateUpstream    = "upstream"
)

// EndpointTLSTermination says where TLS ends and the lowest version accepted.
type EndpointTLSTermination struct {
	Enabled     bool    `json:"enabled"`
	TerminateAt string  `json:"terminate_at"`
	MinVersion  *string `json:"min_version"`
}

// Request shape on TLS edges: where to terminate and the minimum version.
type EndpointTLSTerminationMutate struct {
	Enabled     *bool   `json:"enabled"`
	TerminateAt *string `json:"terminate_at"`
	MinVersion  *string `json:"min_version"`
}

// Validate checks terminate_at and min_version; with upstream, min_version must be null.
func (m *EndpointTLSTerminationMutate) Validate() error {
	at := terminateEdge
	if m.TerminateAt != nil && *m.TerminateAt != "" {
		at = *m.TerminateAt
	}
	if at != terminateEdge && at != terminateUpstream {
		return Invalid(CodeBadTerminateAt, "terminate_at", "must be \"edge\" or \"upstream\", got %q", at)
	}
	if at == terminateUpstream && m.MinVersion != nil {
		return Invalid(CodeUnsupportedTLSVersion, "min_version", "must be null when terminate_at is \"upstream\": TLS passes through")
	}
	return validateMinVersion(m.MinVersion)
}

func validateMinVersion(v *string) error {
	if v != nil && !slices.Contains(tlsVersions, *v) {
		return Invalid(CodeUnsupportedTLSVersion, "min_version", "must be one of \"1.0\", \"1.1\", \"1.2\", \"1.3\", got %q", *v)
	}
	return nil
}

// Build fills the defaults: termination at the edge with TLS 1.2.
func (m *EndpointTLSTerminationMutate) Build(*Op) (any, error) {
	t := &EndpointTLSTermination{Enabled: enabled(m.Enabled), TerminateAt: terminateEdge}
	if m.TerminateAt != nil && *m.TerminateAt != "" {
		t.TerminateAt = *m.TerminateAt
	}
	if t.TerminateAt == terminateEdge {
		v := defaultMinTLSVersion
		if m.MinVersion != nil {
			v = *m.MinVersion
		}
		t.MinVersion = &v
	}
	return t, nil
}

// EndpointTLSTerminationAtEdge is the request shape on HTTPS edges, which always terminate at the
// edge; responses show terminate_at "edge".
type EndpointTLSTerminationAtEdge struct {
	Enabled    *bool   `json:"enabled"`
	MinVersion *string `json:"min_version"`
}

// Validate checks min_version.
func (m *EndpointTLSTerminationAtEdge) Validate() error { return validateMinVersion(m.MinVersion) }

// Build fills the default version.
func (m *EndpointTLSTerminationAtEdge) Build(*Op) (any, error) {
	v := defaultMinTLSVersion
	if m.MinVersion != nil {
		v = *m.MinVersion
	}
	return &EndpointTLSTermination{Enabled: enabled(m.Enabled), TerminateAt: terminateEdge, MinVersion: &v}, nil
}

// --- circuit_breaker ---------------------------------------------------------------------------

// Circuit breaker defaults for values left 0.
const (
	defaultTrippedDuration = 10
	defaultRollingWindow   = 10
	defaultNumBuckets      = 10
	defaultVolumeThreshold = 20
	defaultErrorThreshold  = 0.5
	maxNumBuckets          = 128
)

// EndpointCircuitBreaker rejects requests while the upstream fails too often.
type EndpointCircuitBreaker struct {
	Enabled                  bool    `json:"enabled"`
	TrippedDuration          uint32  `json:"tripped_duration"`
	RollingWindow            uint32  `json:"rolling_window"`
	NumBuckets               uint32  `json:"num_buckets"`
	VolumeThreshold          uint32  `json:"volume_threshold"`
	ErrorThresholdPercentage float64 `json:"error_threshold_percentage"`
}

// EndpointCircuitBreakerMutate is the request shape of EndpointCircuitBreaker.
type EndpointCircuitBreakerMutate struct {
	Enabled                  *bool    `json:"enabled"`
	TrippedDuration          *uint32  `json:"tripped_duration"`
	RollingWindow            *uint32  `json:"rolling_window"`
	NumBuckets               *uint32  `json:"num_buckets"`
	VolumeThreshold          *uint32  `json:"volume_threshold"`
	ErrorThresholdPercentage *float64 `json:"error_threshold_percentage"`
}

// Validate checks the ranges: a fraction from 0 to 1 (not a percentage), and 1 to 128 buckets.
func (m *EndpointCircuitBreakerMutate) Validate() error {
	if p := m.ErrorThresholdPercentage; p != nil && (*p < 0 || *p > 1) {
		return Invalid(CodeBadErrorThreshold, "error_threshold_percentage", "must be a fraction from 0 to 1.0 (not 0-100), got %v", *p)
	}
	if n := m.NumBuckets; n != nil && *n > maxNumBuckets {
		return Invalid(CodeBadNumBuckets, "num_buckets", "must be from 1 to 128, got %d", *n)
	}
	return nil
}

// Build substitutes the defaults for values left 0.
func (m *EndpointCircuitBreakerMutate) Build(*Op) (any, error) {
	or := func(v *uint32, d uint32) uint32 {
		if v == nil || *v == 0 {
			return d
		}
		return *v
	}
	p := defaultErrorThreshold
	if m.ErrorThresholdPercentage != nil && *m.ErrorThresholdPercentage != 0 {
		p = *m.ErrorThresholdPercentage
	}
	return &EndpointCircuitBreaker{
		Enabled:                  enabled(m.Enabled),
		TrippedDuration:          or(m.TrippedDuration, defaultTrippedDuration),
		RollingWindow:            or(m.RollingWindow, defaultRollingWindow),
		NumBuckets:               or(m.NumBuckets, defaultNumBuckets),
		VolumeThreshold:          or(m.VolumeThreshold, defaultVolumeThreshold),
		ErrorThresholdPercentage: p,
	}, nil
}

// --- compression, websocket_tcp_converter ------------------------------------------------------

// EndpointToggle is a module with nothing but enabled: compression, websocket_tcp_converter.
type EndpointToggle struct {
	Enabled bool `json:"enabled"`
}

// EndpointToggleMutate is the request shape of EndpointToggle.
type EndpointToggleMutate struct {
	Enabled *bool `json:"enabled"`
}

// Validate accepts any body.
func (m *EndpointToggleMutate) Validate() error { return nil }

// Build applies the enabled default.
func (m *EndpointToggleMutate) Build(*Op) (any, error) {
	return &EndpointToggle{Enabled: enabled(m.Enabled)}, nil
}

// --- request_headers, response_headers ---------------------------------------------------------

// EndpointHeaders adds and removes HTTP headers (on requests upstream or responses to clients).
type EndpointHeaders struct {
	Enabled bool              `json:"enabled"`
	Add     map[string]string `json:"add"`
	Remove  []string          `json:"remove"`
}

// EndpointHeadersMutate is the request shape of EndpointHeaders.
type EndpointHeadersMutate struct {
	Enabled *bool             `json:"enabled"`
	Add     map[string]string `json:"add"`
	Remove  []string          `json:"remove"`
}

// Validate checks header names and values as HTTP defines them, refuses a name added twice in
// two cases, and refuses headers the module may not touch (FixedHeader: hop-by-hop headers,
// Host, Content-Length).
func (m *EndpointHeadersMutate) Validate() error {
	if err := maxEntries(CodeTooManyHeaders, "add", len(m.Add), MaxHeaderEntries); err != nil {
		return err
	}
	if err := maxEntries(CodeTooManyHeaders, "remove", len(m.Remove), MaxHeaderEntries); err != nil {
		return err
	}
	// Names differing only in case are one header: the data plane would send both values, in
	// no set order.
	lower := make(map[string]string, len(m.Add))
	for _, name := range slices.Sorted(maps.Keys(m.Add)) {
		if !validHeaderName(name) {
			return Invalid(CodeInvalid, "add", "%q is not a valid HTTP header name", name)
		}
		if other, dup := lower[strings.ToLower(name)]; dup {
			return Invalid(CodeInvalid, "add", "%q and %q are the same header name", other, name)
		}
		lower[strings.ToLower(name)] = name
		if why := FixedHeader(name); why != "" {
			return Invalid(CodeInvalid, "add", "%q cannot be added: %s", name, why)
		}
		if !validHeaderValue(m.Add[name]) {
			return Invalid(CodeInvalid, "add", "the value of %q has characters not allowed in an HTTP header", name)
		}
	}
	for i, name := range m.Remove {
		if !validHeaderName(name) {
			return Invalid(CodeInvalid, "remove", "entry %d, %q, is not a valid HTTP header name", i, name)
		}
		if why := FixedHeader(name); why != "" {
			return Invalid(CodeInvalid, "remove", "entry %d, %q, cannot be removed: %s", i, name, why)
		}
	}
	return nil
}

// Build returns the module with empty collections rather than nulls.
func (m *EndpointHeadersMutate) Build(*Op) (any, error) {
	h := &EndpointHeaders{Enabled: enabled(m.Enabled), Add: m.Add, Remove: m.Remove}
	if h.Add == nil {
		h.Add = map[string]string{}
	}
	if h.Remove == nil {
		h.Remove = []string{}
	}
	return h, nil
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validHeaderValue: visible characters, spaces and tabs; no CR, LF or other controls.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// --- webhook_verification ----------------------------------------------------------------------

// WebhookProviders are the providers webhook verification knows.
var WebhookProviders = strings.Fields(`aftership airship alchemy autodesk bitbucket bolt box brex
	buildkite calendly castle chargify circleci clearbit clerk coinbase contentful docusign dropbox
	facebook_graph_api facebook_messenger frameio github gitlab go1 graphcms heroku hostedhooks
	hubspot instagram intercom jira launch_darkly linear mailchimp mailgun microsoft_teams
	modern_treasury mongodb mux orb orbit pagerduty pinwheel plivo pusher sendgrid sentry shopify
	signal_sciences slack sns sonatype square stripe svix terraform tiktok trendmicro_conformity
	twilio twitter typeform vmware webex whatsapp worldline xero zendesk zoom`)

// EndpointWebhookValidation verifies that requests come from a webhook provider.
type EndpointWebhookValidation struct {
	Enabled  bool   `json:"enabled"`
	Provider string `json:"provider"`
	Secret   string `json:"secret"`
}

// EndpointWebhookValidationMutate is the request shape of EndpointWebhookValidation.
type EndpointWebhookValidationMutate struct {
	Enabled  *bool   `json:"enabled"`
	Provider *string `json:"provider"`
	Secret   *string `json:"secret"`
}

// Validate checks the provider (case-insensitively) and that a secret is given exactly when the
// provider uses one: every provider but sns.
func (m *EndpointWebhookValidationMutate) Validate() error {
	if m.Provider == nil || *m.Provider == "" {
		return Invalid(CodeProviderUnsupported, "provider", "is required")
	}
	p := strings.ToLower(*m.Provider)
	if !slices.Contains(WebhookProviders, p) {
		return Invalid(CodeProviderUnsupported, "provider", "%q is not a supported webhook provider", *m.Provider)
	}
	hasSecret := m.Secret != nil && *m.Secret != ""
	if p == "sns" && hasSecret {
		return Invalid(CodeProviderNoSecret, "secret", "must be empty: sns messages are verified by their signing certificate, not a secret")
	}
	if p != "sns" && !hasSecret {
		return Invalid(CodeProviderNeedsSecret, "secret", "is required for provider %q", *m.Provider)
	}
	return nil
}

// Secrets declares the webhook secret. It is sealed at rest like every document secret, and
// returned as given: the compatible API returns it, and clients compare what they read with what
// they sent (the spec: "same as request").
func (w *EndpointWebhookValidation) Secrets() []Secret {
	return stringSecret("secret", &w.Secret, false)
}

// Build stores the provider as given.
func (m *EndpointWebhookValidationMutate) Build(*Op) (any, error) {
	w := &EndpointWebhookValidation{Enabled: enabled(m.Enabled), Provider: *m.Provider}
	if m.Secret != nil {
		w.Secret = *m.Secret
	}
	return w, nil
}

// --- lookups shared by modules -----------------------------------------------------------------

// mustExist requires id to be an object of one of the collections in the caller's account.
func mustExist(op *Op, id, field string, code int, what string, in []*Resource) error {
	for _, res := range in {
		if !strings.HasPrefix(id, res.Prefix+"_") {
			continue
		}
		if ok, err := op.Tx.Exists(res, id); err != nil || ok {
			return err
		}
	}
	return Invalid(code, field, "no %s %q in this account", what, id)
}

func refsTo(op *Op, ids []string, field string, code int, what string, in []*Resource) ([]*Ref, error) {
	refs := make([]*Ref, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return nil, Invalid(CodeInvalid, field, "%q is listed twice", id)
		}
		seen[id] = true
		if err := mustExist(op, id, field, code, what, in); err != nil {
			return nil, err
		}
		refs = append(refs, NewRef(id))
	}
	return refs, nil
}
