package ingress

import (
	"net/http"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// ServeInternal serves a request a forward-internal action hands over on account's internal
// endpoint target: its stages (its own traffic policy) then its agent, as a public request to
// an endpoint is served, over the endpoint's protocol. The endpoint is looked up by its
// account-scoped name (ep.InternalEndpointKey), here or on another replica, so another
// account's endpoint of the same URL is never found; false, with nothing written, when the
// account has none online. The request keeps its Host: the internal endpoint's upstream sees
// the name the client asked for, with the X-Forwarded headers of the public request.
func (s *Server) ServeInternal(w http.ResponseWriter, r *http.Request, account string, target trafficpolicy.Target) bool {
	if s.cfg.Lookup == nil || (target.Scheme != "http" && target.Scheme != "https") {
		return false
	}
	e := s.cfg.Lookup(target.Scheme, ep.InternalEndpointKey(account, target.Host, target.Port))
	if e == nil || e.AccountID() != account {
		return false
	}
	proto := target.Scheme
	e.HTTPHandler(func() http.Handler { return e.Chain().Handler(s.proxy.endpointFinal(e, proto)) }).ServeHTTP(w, r)
	return true
}
