package tunnel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// policyTLSSettings builds the endpointTLS of an https or tls bind from its traffic policy's
// terminate-tls action (nil when it has none): on a tls bind the listener terminates the
// client's TLS (the agent gets the plaintext), on both it presents the action's certificate or
// the host's, accepts the TLS versions it names and asks for client certificates as it says. The
// bind's own TLSTermination and MutualTLSCA options say the same things: giving both is refused
// (withOptions), rather than one silently overriding the other.
func policyTLSSettings(proto string, raw json.RawMessage, withOptions bool) (*endpointTLS, *bindError) {
	p, err := plan.ParseBindPolicy(raw)
	if err != nil {
		return nil, refuse(ep.AgentCodeBadBind, "traffic_policy: %v", err)
	}
	tt, err := trafficpolicy.TerminateTLS(p)
	if err != nil {
		return nil, refuse(ep.AgentCodeBadBind, "traffic_policy: %v", err)
	}
	if tt == nil {
		return nil, nil
	}
	if withOptions {
		return nil, refuse(ep.AgentCodeBadBind, "traffic_policy: the policy's terminate-tls and the TLSTermination or MutualTLSCA options both set the endpoint's TLS: give one of them.")
	}
	s := &endpointTLS{terminate: proto == "tls", cert: tt.Certificate,
		policy: plan.TLSPolicy{MinVersion: tt.MinVersion, MaxVersion: tt.MaxVersion, ClientAuth: tt.ClientAuth}}
	h := sha256.New()
	h.Write([]byte("terminate-tls\n"))
	_ = binary.Write(h, binary.BigEndian, []uint16{tt.MinVersion, tt.MaxVersion, uint16(tt.ClientAuth)})
	if tt.Certificate != nil {
		for _, der := range tt.Certificate.Certificate {
			h.Write(der)
		}
	}
	for _, ca := range tt.ClientCAs {
		s.policy.AddClientCA(ca)
		h.Write(ca.Raw)
	}
	s.policy.MutualTLS = tt.MutualTLS
	h.Sum(s.digest[:0])
	return s, nil
}
