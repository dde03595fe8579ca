package edgeplane

import (
	"strings"
)

// The rules an agent's bind is checked against, defined once here beside the credential ACL's
// validation (credentials.go) and the hostport rules of edges (edges.go), so the API and the
// data plane cannot drift apart.

// Agent protocol error codes (ERR_NGROK_<n>) that the agent gateway answers with; the texts of
// ngrok's error list are reproduced in the messages.
const (
	AgentCodeBadVersion      = 121  // the agent offered no protocol version edgeplane speaks
	AgentCodeBadToken        = 105  // the authtoken does not have the shape of a token
	AgentCodeUnknownToken    = 107  // the authtoken is well formed but unknown
	AgentCodeBadAuth         = 109  // the Auth message is not valid JSON
	AgentCodeRevoked         = 300  // the credential was deleted while a session used it
	AgentCodeBadBind         = 301  // the Bind message is not valid
	AgentCodeACLAddr         = 308  // the credential's ACL does not permit this TCP address
	AgentCodeAddrNotReserved = 307  // the TCP address is not a reserved address of the account
	AgentCodeACLName         = 316  // the credential's ACL does not permit this name
	AgentCodeNotReserved     = 319  // the name is not a reserved domain of the account
	AgentCodeBadProto        = 332  // the bind's protocol is not supported
	AgentCodeOnline          = 334  // the endpoint is already online (and not pooled)
	AgentCodeACLRandomTCP    = 356  // the credential's ACL does not permit random TCP addresses
	AgentCodeEdgeHostport    = 381  // the host and port are already used by an edge
	AgentCodeNoLabels        = 394  // a labeled tunnel without labels
	AgentCodeACLLabel        = 399  // the credential's ACL does not permit this label
	AgentCodeBadName         = 326  // the requested name is not a valid hostname
	AgentCodeUnsupportedOpt  = 3208 // edgeplane: a bind option whose module is not enforced yet
	AgentCodeNoTCPPort       = 325  // no free TCP port for a random address
	AgentCodeSessionLimit    = 324  // the session holds as many tunnels (of a kind) as it may
	AgentCodeAccountLimit    = 5000 // the account holds as many tunnels (of a kind) as it may
	AgentCodeNoToken         = 4018 // the Auth message carries no authtoken
	AgentCodePoolMix         = 6030 // a pooled and an unpooled bind of the same endpoint
)

// Public traffic error codes shown on edgeplane's error pages (`ngrok-error-code` header).
const (
	TrafficCodeOffline     = 3200 // no online endpoint for the host
	TrafficCodeForbidden   = 3205 // refused by an IP restriction
	TrafficCodeBadGateway  = 8012 // the agent could not carry the request
	TrafficCodeNoTunnel    = 6515 // a tunnel group backend with no online tunnel
	TrafficCodeUnauthorize = 3401 // basic auth required: "Your request lacks valid credentials."
)

// ACLTarget is what an agent asks to bind, for the credential ACL check: exactly one of a
// hostname, a TCP address (host:port), a random TCP address, or a set of labels.
type ACLTarget struct {
	Name      string
	Addr      string
	RandomTCP bool
	Labels    map[string]string
}

// ACLPermits reports whether the credential ACL rules allow target. An empty ACL allows
// everything, as does the rule "*". A name is allowed by "bind:<name>" or by "bind:*.<suffix>"
// when it ends in ".<suffix>" (or is the wildcard name itself); an address by
// "bind:<host:port>"; labels when every label is allowed by some "bind:<key>=<value>" rule, where
// "*" matches any key or value. A random TCP address is allowed only by an ACL without rules or
// with "*": no bind rule names a port the server has not chosen yet. For labels, the returned
// string is the first label refused as "key=value", for the error message.
func ACLPermits(acl []string, t ACLTarget) (bool, string) {
	if len(acl) == 0 {
		return true, ""
	}
	for _, r := range acl {
		if r == "*" {
			return true, ""
		}
	}
	switch {
	case t.RandomTCP:
		return false, ""
	case t.Addr != "":
		return anyRule(acl, func(target string) bool { return strings.EqualFold(target, t.Addr) }), ""
	case t.Labels != nil:
		for k, v := range t.Labels {
			if !anyRule(acl, func(target string) bool { return labelRuleMatches(target, k, v) }) {
				return false, k + "=" + v
			}
		}
		return true, ""
	}
	name := strings.ToLower(t.Name)
	return anyRule(acl, func(target string) bool { return nameRuleMatches(strings.ToLower(target), name) }), ""
}

func anyRule(acl []string, match func(target string) bool) bool {
	for _, r := range acl {
		if target, ok := strings.CutPrefix(r, "bind:"); ok && match(target) {
			return true
		}
	}
	return false
}

func nameRuleMatches(rule, name string) bool {
	if strings.Contains(rule, "=") || strings.Contains(rule, ":") {
		return false
	}
	if suffix, ok := strings.CutPrefix(rule, "*."); ok {
		return name == rule || strings.HasSuffix(name, "."+suffix)
	}
	return rule == name
}

func labelRuleMatches(rule, key, value string) bool {
	rk, rv, ok := strings.Cut(rule, "=")
	return ok && (rk == "*" || rk == key) && (rv == "*" || rv == value)
}

// DomainClaimsFor returns the reserved domain names that make host usable by the account holding
// them, most specific first: the name itself, then the wildcard one level above it (the same
// coverage edges' hostports get).
func DomainClaimsFor(host string) []string {
	out := []string{host}
	if _, parent, ok := strings.Cut(host, "."); ok {
		out = append(out, "*."+parent)
	}
	return out
}

// LabelsMatch reports whether a labeled tunnel with labels have serves a tunnel-group backend
// asking for want: every key of want with the same value (keys and values case-sensitive; the
// tunnel may have more labels).
func LabelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
