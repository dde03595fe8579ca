package tunnel

import (
	"encoding/json"
	"net/http"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// policyTLSSettings builds the endpointTLS of an https or tls bind from its traffic policy's
// terminate-tls actions (nil when it has none): on a tls bind the listener terminates the
// client's TLS (the agent gets the plaintext), on both it presents the action's certificate or
// the host's, accepts the TLS versions it names and asks for client certificates as it says.
// An action in a rule with expressions applies to the connections whose ClientHello its rule
// matches (plan.TLSSelector); the others keep the endpoint's default (the host's certificate on
// an https bind, the client's TLS passed through on a tls bind). The bind's own TLSTermination
// and MutualTLSCA options say the same things: giving both is refused (withOptions), rather
// than one silently overriding the other.
func policyTLSSettings(proto string, raw json.RawMessage, withOptions bool, endpoint *trafficpolicy.Endpoint) (*endpointTLS, *bindError) {
	p, err := plan.ParseBindPolicy(raw)
	if err != nil {
		return nil, refuse(ep.AgentCodeBadBind, "traffic_policy: %v", err)
	}
	sel, err := plan.NewTLSSelector(p, endpoint)
	if err != nil {
		return nil, refuse(ep.AgentCodeBadBind, "traffic_policy: %v", err)
	}
	if sel == nil {
		return nil, nil
	}
	if withOptions {
		return nil, refuse(ep.AgentCodeBadBind, "traffic_policy: the policy's terminate-tls and the TLSTermination or MutualTLSCA options both set the endpoint's TLS: give one of them.")
	}
	s := &endpointTLS{digest: sel.Digest}
	if c, ok := sel.Fixed(); ok {
		s.terminate, s.policy, s.cert = proto == "tls", c.Policy, c.Cert
		return s, nil
	}
	s.sel = sel
	return s, nil
}

// connTLS is the TLS of one public connection to the bind, by its ClientHello.
func (s *endpointTLS) connTLS(h plan.Hello) (plan.ConnTLS, error) {
	switch {
	case s == nil:
		return plan.ConnTLS{}, nil
	case s.sel != nil:
		c, ok, err := s.sel.Choose(h)
		if !ok || err != nil {
			return plan.ConnTLS{}, err
		}
		return c, nil
	}
	return plan.ConnTLS{Policy: s.policy, Cert: s.cert, Terminate: s.terminate}, nil
}

// requestPolicy is the client-certificate policy a request of an https bind is held to: the
// bind's, or under a terminate-tls chosen by expressions, the one its connection's ClientHello
// chose (chosen again from what the request knows of it); false when none asks anything. An
// expression that fails to evaluate asks for a certificate no client has.
func (s *endpointTLS) requestPolicy(r *http.Request) (plan.TLSPolicy, bool) {
	if s.sel == nil {
		return s.policy, s.policy.MutualTLS
	}
	c, ok, err := s.sel.Choose(plan.RequestHello(r))
	if err != nil {
		return plan.TLSPolicy{MutualTLS: true}, true
	}
	return c.Policy, ok && c.Policy.MutualTLS
}
