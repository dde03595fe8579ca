package ingress

import "github.com/edgeplane/edgeplane/plan"

// Who serves a host. The reservation covering a host (the exact name's, else the wildcard's one
// level up: plan.Holder) decides which account may serve it: only that account's edges and
// endpoints are routed to, whatever else claims the host. A host no reservation covers (a name
// under a service domain) is served by the endpoints online on it, which belong to one account
// (the agent gateway and the store see to that), else by an edge whose wildcard hostport reaches
// it from further up; an endpoint online on the exact name comes before another account's
// wildcard edge. Between an edge and an endpoint of the one account that may serve a host, the
// edge comes first, as it always has.
//
// The API and the agent gateway never let two accounts claim one host; this is the listeners'
// own check, so that a state they did not foresee (rows written before the rules, a replica
// that could not see a reservation) never carries one account's traffic to another.

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
	if ep != nil && holder != "" && ep.AccountID() != holder {
		ep = nil
	}
	if edge && holder != "" && edgeAccount != holder {
		edge = false
	}
	if edge && holder == "" && ep != nil && ep.AccountID() != edgeAccount {
		edge = false
	}
	if edge {
		return true, nil
	}
	return false, ep
}
