package edgeplane

import (
	"net/netip"
	"strconv"
	"strings"
)

// Credential is a tunnel authtoken for agents (spec "Credential"). Its token is shown once, like
// an API key's; its ACL restricts what an agent using it may bind.
type Credential struct {
	Meta
	Annotations
	Token   *string  `json:"token"`
	ACL     []string `json:"acl"`
	OwnerID string   `json:"owner_id"`
}

// SetToken shows the token in the create response.
func (c *Credential) SetToken(plain string) { c.Token = &plain }

// References makes deleting a bot user delete the credentials it owns.
func (c *Credential) References() []Reference {
	return []Reference{{To: c.OwnerID, Mode: RefCascade}}
}

// CredentialCreate is the body of POST /credentials.
type CredentialCreate struct {
	Echo
	AnnotationFields
	ACL     []string `json:"acl"`
	OwnerID *string  `json:"owner_id"`
}

// Validate checks the annotations and every ACL rule.
func (c *CredentialCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	return ValidateACL(c.ACL)
}

// Create builds the credential and issues its token.
func (c *CredentialCreate) Create(op *Op) (Document, error) {
	owner, err := op.Owner(c.OwnerID)
	if err != nil {
		return nil, err
	}
	cr := &Credential{OwnerID: owner, ACL: c.ACL}
	if cr.ACL == nil {
		cr.ACL = []string{}
	}
	c.ApplyTo(&cr.Annotations)
	op.IssueToken(owner)
	return cr, nil
}

// CredentialUpdate is the body of PATCH /credentials/{id}. An acl of [] clears the list; an
// absent or null acl leaves it.
type CredentialUpdate struct {
	Echo
	AnnotationFields
	ACL []string `json:"acl"`
}

// Validate checks the annotations and every ACL rule.
func (u *CredentialUpdate) Validate() error {
	if err := u.AnnotationFields.Validate(); err != nil {
		return err
	}
	return ValidateACL(u.ACL)
}

// Apply changes description, metadata and the ACL.
func (u *CredentialUpdate) Apply(op *Op, doc Document) error {
	cr := doc.(*Credential)
	u.ApplyTo(&cr.Annotations)
	if u.ACL != nil {
		cr.ACL = u.ACL
	}
	return nil
}

// ValidateACL checks each rule against the grammar of the spec and reports the first bad one,
// quoted, with 400 ERR_NGROK_600.
func ValidateACL(rules []string) error {
	for i, rule := range rules {
		if why := aclRuleProblem(rule); why != "" {
			return Invalid(CodeBadACLRule, "acl["+strconv.Itoa(i)+"]", "invalid rule %q: %s", rule, why)
		}
	}
	return nil
}

// aclRuleProblem returns why rule is not valid, or "" when it is. The grammar, rule by rule:
// "*" (no restriction); "bind:<domain>" (a hostname); "bind:*.<suffix>" (any hostname ending in
// .<suffix>, and the wildcard form itself); "bind:<host>:<port>" (an address: a hostname or IP
// and a port 1-65535); "bind:<key>=<value>" (a label; key and value may each be "*").
func aclRuleProblem(rule string) string {
	if rule == "*" {
		return ""
	}
	target, ok := strings.CutPrefix(rule, "bind:")
	if !ok {
		return "the only rule kind is bind, as in \"bind:example.com\", or \"*\" for no restriction"
	}
	switch {
	case target == "":
		return "bind needs a domain, address or label"
	case strings.Contains(target, "="):
		key, value, _ := strings.Cut(target, "=")
		if !labelPart(key) || !labelPart(value) {
			return "a label bind is key=value, each letters, digits, '.', '_', '-', or * for any"
		}
		return ""
	case strings.Contains(target, ":"):
		host, port, err := splitHostPort(target)
		if err != "" {
			return err
		}
		// An IP address with a zone ("fe80::1%eth0") is not an address an agent binds: the zone
		// is free text (spaces, control characters) and names an interface of some other machine.
		if a, ipErr := netip.ParseAddr(host); (ipErr != nil || a.Zone() != "") && !ValidHostname(host, false) {
			return "address host " + strconv.Quote(host) + " is not a hostname or IP address"
		}
		if !validPort(port) {
			return "address port " + strconv.Quote(port) + " is not a number from 1 to 65535"
		}
		return ""
	case target == "*" || target == "*.":
		return "a wildcard bind needs a domain suffix, as in \"bind:*.example.com\""
	case strings.Contains(target[1:], "*"):
		return "only a leading \"*.\" wildcard is allowed"
	case !ValidHostname(target, true):
		return strconv.Quote(target) + " is not a valid domain name"
	}
	return ""
}

// splitHostPort splits "host:port" and "[v6]:port"; it returns a reason when s has neither shape.
func splitHostPort(s string) (host, port, problem string) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]:")
		if end < 0 {
			return "", "", "an IPv6 address bind is \"[addr]:port\""
		}
		return s[1:end], s[end+2:], ""
	}
	i := strings.LastIndexByte(s, ':')
	host, port = s[:i], s[i+1:]
	if host == "" || port == "" || strings.Contains(host, ":") {
		return "", "", "an address bind is \"host:port\""
	}
	return host, port, ""
}

func labelPart(s string) bool {
	if s == "*" {
		return true
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
