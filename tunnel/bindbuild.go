package tunnel

import (
	"encoding/json"
	"net"
	"strconv"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// bindModules is what a bind's options make of its endpoint: the stages of its modules, the
// connection policy of a tcp or tls bind, what it asks of its clients' TLS, and whether a tls
// bind's TLS is carried untouched. The replica holding the agent builds them at the bind, and
// every other replica builds them from the tunnel's row (its options, stored sealed) with the
// same function, so a public connection arriving anywhere meets the same modules.
type bindModules struct {
	chain       *enforce.Chain
	policy      *enforce.ConnPolicy
	tls         *endpointTLS
	passthrough bool
}

// buildModules decodes a bind's options for proto and builds its modules, with env for its
// traffic policy; the refusal is the bind's (an option edgeplane does not enforce, one that is
// not valid).
func buildModules(proto string, raw json.RawMessage, env plan.BindEnv) (*bindOpts, bindModules, *bindError) {
	var o bindOpts
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, bindModules{}, refuse(ep.AgentCodeBadBind, "The bind options are not valid: %v", err)
		}
	}
	env.TerminateTLS = proto == "https" || proto == "tls" // the listener applies terminate-tls (tlsSettings)
	o.env = env
	chain, policy, berr := o.chain(proto, raw)
	if berr != nil {
		return nil, bindModules{}, berr
	}
	etls, berr := tlsSettingsFor(proto, raw, env.Endpoint)
	if berr != nil {
		return nil, bindModules{}, berr
	}
	return &o, bindModules{chain: etls.guard(proto, chain), policy: policy, tls: etls,
		passthrough: proto == "tls" && (etls == nil || !etls.terminate)}, nil
}

// fillEndpoint completes a bind's endpoint as its traffic policy sees it (the endpoint.*
// variables): its row id, URL, host and port, from the bind's resolved name or tcp address.
func fillEndpoint(e *trafficpolicy.Endpoint, rowID, url, host, addr string) {
	e.ID, e.URL, e.Host = rowID, url, host
	switch e.Protocol {
	case "tcp":
		if h, port, err := net.SplitHostPort(addr); err == nil {
			e.Host = h
			e.Port, _ = strconv.Atoi(port)
		}
	case "http":
		e.Port = 80
	default:
		e.Port = 443
	}
}
