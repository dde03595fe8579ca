package edgeplane

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// ParseTrafficPolicy parses a traffic policy document the way ngrok checks one (phases, rules,
// action types, CEL expressions, the configuration of the actions edgeplane applies) and refuses
// header names a policy may not add or remove, as the header modules do (FixedHeader). The
// error names the part of the document at fault, say on_http_request[0].expressions[1].
func ParseTrafficPolicy(doc string) (*trafficpolicy.Policy, error) {
	p, err := trafficpolicy.Parse(doc)
	if err != nil {
		return nil, err
	}
	for _, r := range p.Rules() {
		for _, a := range r.Actions {
			if a.Type != "add-headers" && a.Type != "remove-headers" {
				continue
			}
			for _, name := range a.HeaderNames() {
				if why := FixedHeader(name); why != "" {
					return nil, fmt.Errorf("%s.config.headers: %q cannot be added or removed: %s", a.Path, name, why)
				}
			}
		}
	}
	return p, nil
}

// validateTrafficPolicy is the API's check of a traffic_policy value: a JSON object or YAML
// mapping that ParseTrafficPolicy accepts; anything else is a 400 naming the problem.
func validateTrafficPolicy(v string) error {
	if err := ValidatePolicyDocument(v); err != nil {
		return err
	}
	if _, err := ParseTrafficPolicy(v); err != nil {
		return Invalid(CodeInvalid, "value", "is not a valid traffic policy: %v", err)
	}
	return nil
}

// EndpointTrafficPolicy holds a traffic policy document, JSON or YAML, as a string.
type EndpointTrafficPolicy struct {
	Enabled bool   `json:"enabled"`
	Value   string `json:"value"`
}

// EndpointTrafficPolicyMutate is the request shape of EndpointTrafficPolicy.
type EndpointTrafficPolicyMutate struct {
	Enabled *bool   `json:"enabled"`
	Value   *string `json:"value"`
}

// Validate requires a traffic policy document ngrok would accept (validateTrafficPolicy).
func (m *EndpointTrafficPolicyMutate) Validate() error {
	if m.Value == nil || strings.TrimSpace(*m.Value) == "" {
		return Invalid(CodeInvalid, "value", "is required: a traffic policy document in JSON or YAML")
	}
	return validateTrafficPolicy(*m.Value)
}

// Build keeps the document as given.
func (m *EndpointTrafficPolicyMutate) Build(*Op) (any, error) {
	return &EndpointTrafficPolicy{Enabled: enabled(m.Enabled), Value: *m.Value}, nil
}

// ValidatePolicyDocument accepts a JSON object or a YAML mapping of at most MaxTrafficPolicyBytes
// whose estimated compiled size fits in MaxAccountPolicyCost.
func ValidatePolicyDocument(v string) error {
	if len(v) > MaxTrafficPolicyBytes {
		return Invalid(CodeInvalid, "value", "must be at most %d bytes, got %d", MaxTrafficPolicyBytes, len(v))
	}
	trimmed := strings.TrimSpace(v)
	if strings.HasPrefix(trimmed, "{") {
		var doc map[string]any
		if err := json.Unmarshal([]byte(trimmed), &doc); err != nil {
			return Invalid(CodeInvalid, "value", "is not a valid JSON object: %v", err)
		}
		return policyFits(v)
	}
	if err := parseYAMLMapping(trimmed); err != nil {
		return Invalid(CodeInvalid, "value", "is neither a JSON object nor a YAML mapping: %v", err)
	}
	return policyFits(v)
}

// policyFits refuses a document that could never be applied: one whose compiled stages are
// estimated (TrafficPolicyCost) above what a whole account's routing plan may hold. Accepted, it
// would only ever fail its edge or route closed; refused, its author learns why at once. It is
// checked before the document is compiled, which for such a document takes megabytes.
func policyFits(v string) error {
	if c := TrafficPolicyCost(v); c > MaxAccountPolicyCost {
		return Invalid(CodeInvalid, "value", "would compile to an estimated %d KiB of traffic policy, more than the %d KiB an account's routing plan may hold (MaxAccountPolicyCost, docs/api.md): use fewer or shorter expressions",
			c>>10, MaxAccountPolicyCost>>10)
	}
	return nil
}
