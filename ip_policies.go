package edgeplane

import (
	"net/netip"
	"strings"
)

// IPPolicy is a named set of allow/deny rules (spec "IPPolicy"). Deleting it deletes its rules;
// modules that reference it keep their Ref and act as if it had no rules.
type IPPolicy struct {
	Meta
	Annotations
}

// IPPolicyCreate is the body of POST /ip_policies. (The long-retired "action" field of the policy
// itself is not accepted: actions live on rules.)
type IPPolicyCreate struct {
	Echo
	AnnotationFields
}

// Create builds the policy.
func (c *IPPolicyCreate) Create(op *Op) (Document, error) {
	p := &IPPolicy{}
	c.ApplyTo(&p.Annotations)
	return p, nil
}

// IPPolicyUpdate is the body of PATCH /ip_policies/{id}.
type IPPolicyUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *IPPolicyUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*IPPolicy).Annotations)
	return nil
}

// IPPolicyRule allows or denies one CIDR within a policy (spec "IPPolicyRule").
type IPPolicyRule struct {
	Meta
	Annotations
	CIDR     string `json:"cidr"`
	IPPolicy *Ref   `json:"ip_policy"`
	Action   string `json:"action"`
}

// ParentID makes the rule part of its policy: it is deleted with it.
func (r *IPPolicyRule) ParentID() string { return r.IPPolicy.ID }

// IPPolicyRuleCreate is the body of POST /ip_policy_rules.
type IPPolicyRuleCreate struct {
	Echo
	AnnotationFields
	CIDR       *string `json:"cidr"`
	IPPolicyID *string `json:"ip_policy_id"`
	Action     *string `json:"action"`
}

// Validate checks the CIDR, the action and that a policy is named.
func (c *IPPolicyRuleCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	if c.CIDR == nil || *c.CIDR == "" {
		return Invalid(CodeBadCIDR, "cidr", "is required")
	}
	cidr, err := CanonicalCIDR(*c.CIDR)
	if err != nil {
		return err
	}
	c.CIDR = &cidr
	if c.Action == nil || (*c.Action != "allow" && *c.Action != "deny") {
		got := "nothing"
		if c.Action != nil {
			got = "\"" + *c.Action + "\""
		}
		return Invalid(CodeBadAction, "action", "must be \"allow\" or \"deny\", got %s", got)
	}
	if c.IPPolicyID == nil || *c.IPPolicyID == "" {
		return Invalid(CodeIPPolicyMissing, "ip_policy_id", "is required")
	}
	return nil
}

// Create builds the rule once the policy is found in the caller's account.
func (c *IPPolicyRuleCreate) Create(op *Op) (Document, error) {
	if ok, err := op.Tx.Exists(IPPolicies, *c.IPPolicyID); err != nil || !ok {
		if err == nil {
			err = Invalid(CodeIPPolicyMissing, "ip_policy_id", "no IP policy %q in this account", *c.IPPolicyID)
		}
		return nil, err
	}
	if err := roomForChild(op, IPPolicyRules, *c.IPPolicyID, MaxRulesPerIPPolicy, CodeInvalid, "ip_policy_id", "rules"); err != nil {
		return nil, err
	}
	r := &IPPolicyRule{CIDR: *c.CIDR, IPPolicy: NewRef(*c.IPPolicyID), Action: *c.Action}
	c.ApplyTo(&r.Annotations)
	return r, nil
}

// IPPolicyRuleUpdate is the body of PATCH /ip_policy_rules/{id}; the policy and action are fixed.
type IPPolicyRuleUpdate struct {
	Echo
	AnnotationFields
	CIDR *string `json:"cidr"`
}

// Validate checks the CIDR when one is given.
func (u *IPPolicyRuleUpdate) Validate() error {
	if err := u.AnnotationFields.Validate(); err != nil {
		return err
	}
	if u.CIDR == nil {
		return nil
	}
	cidr, err := CanonicalCIDR(*u.CIDR)
	if err != nil {
		return err
	}
	u.CIDR = &cidr
	return nil
}

// Apply changes description, metadata and CIDR.
func (u *IPPolicyRuleUpdate) Apply(op *Op, doc Document) error {
	r := doc.(*IPPolicyRule)
	u.ApplyTo(&r.Annotations)
	if u.CIDR != nil {
		r.CIDR = *u.CIDR
	}
	return nil
}

// CanonicalCIDR parses an IPv4 or IPv6 range in CIDR notation, or a single address, which becomes
// a /32 or /128. A range with host bits set is refused rather than silently widened, naming the
// range the user probably meant. An IPv4-mapped IPv6 range (::ffff:192.0.2.0/120) becomes the
// IPv4 range it stands for (192.0.2.0/24): clients are matched by their IPv4 address, which the
// IPv6 form never contains, so as written the rule would match nobody.
func CanonicalCIDR(s string) (string, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return "", Invalid(CodeBadCIDR, "cidr", "%q is not an IP address or a CIDR range", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()).String(), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", Invalid(CodeBadCIDR, "cidr", "%q is not an IP address or a CIDR range", s)
	}
	if m := p.Masked(); m != p {
		return "", Invalid(CodeBadCIDR, "cidr", "%q has bits set after the prefix length; did you mean %q?", s, m.String())
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.String(), nil
}
