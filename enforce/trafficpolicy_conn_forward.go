package enforce

import (
	"fmt"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// forward-internal in on_tcp_connect hands a TCP or TLS connection to an internal tcp or tls
// endpoint of the policy's own account (an agent's bind on tcp://name.internal:PORT or
// tls://name.internal[:PORT]) before any byte of it is read: the listener then carries the
// connection to that endpoint (through its own connection stages) instead of the policy's
// endpoint or backend, and no later action of the phase runs. An endpoint that is not online
// (another account's of the same name is never found) or a URL that does not render to an
// internal tcp or tls one is a failure: on_error halt (the default) closes the connection,
// continue lets the next actions run.

// forwardFunc picks the internal endpoint of a forward-internal action for a connection with
// vars: the target when it is online, else nil and whether the phase goes on (continue).
type forwardFunc func(vars map[string]any) (target *trafficpolicy.Target, goOn bool)

// newConnForward makes a forward-internal action of on_tcp_connect ready.
func newConnForward(a *trafficpolicy.Action, c *trafficpolicy.ForwardInternalConfig, o PolicyOptions) (forwardFunc, error) {
	if o.Internal == nil {
		return nil, fmt.Errorf("%s: forward-internal needs the data plane's internal endpoints, which this stage was built without", a.Path)
	}
	if o.Endpoint == nil || o.Endpoint.Account == "" {
		return nil, fmt.Errorf("%s: forward-internal needs the policy's account, which this stage was built without", a.Path)
	}
	url, err := trafficpolicy.CompileTemplate(a.Phase, c.URL)
	if err != nil {
		return nil, fmt.Errorf("%s.config.url: %v", a.Path, err)
	}
	internal, endpoint, halt := o.Internal, o.Endpoint, c.Halts()
	return func(vars map[string]any) (*trafficpolicy.Target, bool) {
		s, err := url.Render(vars)
		if err != nil {
			return nil, !halt
		}
		target, err := trafficpolicy.InternalURL(a.Phase, s)
		if err != nil || !internal.InternalOnline(endpoint.Account, target) {
			return nil, !halt
		}
		return &target, true
	}, nil
}
