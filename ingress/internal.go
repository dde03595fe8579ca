package ingress

import (
	"net"
	"net/http"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
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

// InternalOnline reports whether account has the internal endpoint target online, here or on
// another replica, for forward-internal in on_tcp_connect.
func (s *Server) InternalOnline(account string, target trafficpolicy.Target) bool {
	return s.internalEndpoint(account, target) != nil
}

// internalEndpoint is account's internal endpoint target, nil when none is online: looked up
// by its account-scoped name, so another account's of the same URL is never found.
func (s *Server) internalEndpoint(account string, target trafficpolicy.Target) Endpoint {
	if s.cfg.Lookup == nil || account == "" {
		return nil
	}
	e := s.cfg.Lookup(target.Scheme, ep.InternalEndpointKey(account, target.Host, target.Port))
	if e == nil || e.AccountID() != account {
		return nil
	}
	return e
}

// maxConnForwards bounds the internal endpoints one connection is handed through, so that
// endpoints forwarding to each other end.
const maxConnForwards = 8

// carryForwarded carries a public connection that a forward-internal action of on_tcp_connect
// (verdict v) handed to an internal tcp or tls endpoint: that endpoint's own connection stages
// run on it (and may forward it again, up to maxConnForwards times), then its agent gets it as
// a public connection of its own, with the client's address, under the public connections'
// idle timeout and the account's connection share the listener already counted; hello is a TLS
// connection's ClientHello (nil for TCP), which the endpoint's rules read as conn.tls.sni and
// conn.tls.ja4_fingerprint. An endpoint gone since the policy found it closes the connection
// unanswered.
func (s *Server) carryForwarded(c net.Conn, v enforce.ConnVerdict, hello *enforce.TLSHello, tr *connTrace) {
	sni := ""
	if hello != nil {
		sni = hello.ServerName
	}
	for hops := 0; ; hops++ {
		if hops >= maxConnForwards {
			tr.refused(forwardLoop)
			return
		}
		e := s.internalEndpoint(v.Account, *v.Forward)
		if e == nil {
			tr.refused(noBackend)
			return
		}
		scheme := v.Forward.Scheme
		v = e.DecideConn(c, hello)
		switch {
		case !v.Allow:
			tr.refused(refusedByEndpoint)
			return
		case v.Forward != nil:
			continue
		case scheme == "tls":
			s.carryTLS(c, e, sni, tr)
		default:
			s.carryTo(c, e, "tcp", false, tr)
		}
		return
	}
}
