package ingress

import "github.com/edgeplane/edgeplane/plan"

// Who serves a host. The reservation covering a host (the exact name's, else the wildcard's one
// level up: plan.Holder) decides which account may serve it: only that account's edges and
// endpoints are routed to, whatever else claims the host. A host no reservation covers (a name
// under a service domain) is served by the endpoints online on it, which belong to one account
// (the agent gateway and the store see to that); edges serve reserved names only. Between an
// edge and an endpoint of the account that may serve a host, the edge comes first, as always.
//
// The API and the agent gateway never let two accounts claim one host; this is the listeners'
// own check, so that a state they did not foresee (a reservation made while the replica holding
// the name's agent could not reach the store, rows written before the rules) never carries a
// host's traffic to an account that does not hold it.

// httpsRoute returns what serves host over HTTPS: an HTTPS edge, or else an https endpoint;
// both nil when neither may.
func (s *Server) httpsRoute(host string) (*plan.HTTPSEdge, Endpoint) {
	p := s.plan()
	e := p.HTTPS(host)
	account := ""
	if e != nil {
		account = e.Account
	}
	edge, ep := choose(p.Holder(host), e != nil, account, s.cfg.Lookup("https", host))
	if edge {
		return e, nil
	}
	return nil, ep
}

// tlsRoute returns what serves host on the TLS listener before HTTPS: a TLS edge, or else a tls
// endpoint; both nil when neither may.
func (s *Server) tlsRoute(host string) (*plan.TLSEdge, Endpoint) {
	p := s.plan()
	e := p.TLS(host)
	account := ""
	if e != nil {
		account = e.Account
	}
	edge, ep := choose(p.Holder(host), e != nil, account, s.cfg.Lookup("tls", host))
	if edge {
		return e, nil
	}
	return nil, ep
}

// endpoint returns the endpoint of proto online on host, if its account may serve host.
func (s *Server) endpoint(proto, host string) Endpoint {
	_, ep := choose(s.plan().Holder(host), false, "", s.cfg.Lookup(proto, host))
	return ep
}

// choose applies the rule above to a host whose reservation holder is holder ("" for none),
// with an edge of edgeAccount (when edge is set) and an online endpoint ep (nil for none): it
// reports whether the edge serves, else which endpoint does (nil for none).
func choose(holder string, edge bool, edgeAccount string, ep Endpoint) (bool, Endpoint) {
	if holder != "" {
		edge = edge && edgeAccount == holder
		if ep != nil && ep.AccountID() != holder {
			ep = nil
		}
	}
	if edge {
		return true, nil
	}
	return false, ep
}
