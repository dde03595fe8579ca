package enforce

import (
	"fmt"
	"net/netip"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// terminate-tls sets up the TLS handshake of the endpoint's or edge's public connections: the
// listener applies it (trafficpolicy.TerminateTLS, plan.TLSSelector) when the ClientHello is read,
// before any rule runs, so in the rules it does nothing more. A stage whose listener does not
// apply it (PolicyOptions.TerminateTLS unset: a TCP edge's, an http or tcp endpoint's) is
// refused, naming the action, rather than ignore it.
func init() {
	registerConnAction("terminate-tls", func(a *trafficpolicy.Action, _ any, o PolicyOptions, _ bool) (connFunc, error) {
		if !o.TerminateTLS {
			return nil, fmt.Errorf("%s: terminate-tls applies to https and tls endpoints and edges only", a.Path)
		}
		return func(map[string]any, netip.Addr) (bool, error) { return true, nil }, nil
	})
}
