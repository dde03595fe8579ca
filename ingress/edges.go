package ingress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/outbound"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// Edges: public traffic for an edge's hostport is routed by the plan, filtered by the edge's and
// route's modules, and carried to the backend the configuration names.

// unenforcedPage answers traffic of an edge or route with a module the data plane does not
// apply yet: it fails closed, naming the module.
func unenforcedPage(w http.ResponseWriter, r *http.Request, what, id, module string) {
	enforce.ErrorPage(w, r, http.StatusServiceUnavailable, 3210,
		"The "+what+" "+id+" has the "+module+" module enabled, which this edgeplane server does not apply to traffic yet; it refuses the traffic rather than serve it without the module.")
}

// routeClosedPage answers traffic of a route that fails closed: a forward-internal target of
// another protocol is a refusal ngrok makes too, so it gets ngrok's code for it and says so,
// where anything else is a module the data plane does not apply yet.
func routeClosedPage(w http.ResponseWriter, r *http.Request, route *plan.Route) {
	if op, ok := errors.AsType[*trafficpolicy.OtherProtocolError](route.UnenforcedErr); ok {
		msg := op.Error()
		enforce.ErrorPage(w, r, http.StatusServiceUnavailable, 3502, "The traffic policy of route "+route.ID+" is refused: "+msg+
			". The route refuses its traffic until the policy forwards to an internal endpoint of its own protocol.")
		return
	}
	unenforcedPage(w, r, "route", route.ID, route.Unenforced)
}

// serveEdge routes a request of an HTTPS edge: route by path, then the route's handler (its
// stages in front of routeFinal). x is the request's record, nil when the inspector is off.
func (p *proxy) serveEdge(w http.ResponseWriter, r *http.Request, e *plan.HTTPSEdge, x *exchange) {
	x.atEdge(e.Account, e.ID, "")
	if e.Unenforced != "" {
		unenforcedPage(w, r, "edge", e.ID, e.Unenforced)
		return
	}
	tp := e.RequestTLS(r)
	if !tp.Admits(r.TLS) {
		enforce.MisdirectedClientCert(w, r) // a keep-alive connection from before mutual_tls was on
		return
	}
	if tp.MutualTLS {
		enforce.SetClientCertHeaders(r.Header, r.TLS) // what ngrok's mutual TLS module tells the upstream
	}
	route := e.Route(r.URL.Path)
	if route == nil {
		enforce.ErrorPage(w, r, http.StatusNotFound, 3200, "No route of edge "+e.ID+" matches the path "+r.URL.Path+".")
		return
	}
	x.atEdge(e.Account, e.ID, route.ID)
	if route.Unenforced != "" {
		routeClosedPage(w, r, route)
		return
	}
	h := route.Handler
	if h == nil {
		h = route.Chain.Handler(p.routeFinal())
	}
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, edgeRoute{e, route, x})))
}

// routeKey carries the edge and route of a request to the final handler, behind the stages.
type routeKey struct{}

type edgeRoute struct {
	edge  *plan.HTTPSEdge
	route *plan.Route
	x     *exchange // the request's record, nil when the inspector is off
}

// routeFinal is the handler behind every route's stages: choose the route's backend and carry
// the request there (or answer for it).
func (p *proxy) routeFinal() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		er, ok := r.Context().Value(routeKey{}).(edgeRoute)
		if !ok {
			enforce.ErrorPage(w, r, http.StatusInternalServerError, 10000, "The request lost its route.")
			return
		}
		t, ok := p.s.choose(er.route.Backend, conn{account: er.edge.Account, clientAddr: r.RemoteAddr, proto: "https", edgeType: "3"})
		er.x.atBackend(t)
		switch {
		case !ok:
			enforce.ErrorPage(w, r, http.StatusServiceUnavailable, 6515, "No tunnel or backend of route "+er.route.ID+" is available to take this request.")
		case t.respond != nil:
			respond(w, t.respond)
		case p.s.carryRaw(r, t.dial):
			// websocket_tcp_converter: the websocket was carried as a raw stream
		default:
			t.account = er.edge.Account
			p.forward(w, r, "https", t)
		}
	})
}

// EdgeHandler is the final handler routes' stages are built in front of (plan.Build).
func (s *Server) EdgeHandler() http.Handler { return s.proxy.routeFinal() }

// SignInStore is what the sign-in stages keep in the store, shared by the replicas: the ids of
// the SAML assertions accepted (UseOnce) and the sessions single logout ended.
// *store.Store implements it.
type SignInStore interface {
	UseOnce(ctx context.Context, scope, id string, expires time.Time) (fresh bool, err error)
	enforce.RevocationStore
}

// Env is the environment stages are built with: an outbound HTTP client trusting the system
// roots plus --outbound-ca (OutboundRoots), bounded in time and in redirects, that connects to
// no non-public address unless OutboundAllowPrivate (an account's configuration names the URLs
// it fetches), and st's UseOnce, where the saml module keeps the assertions it accepted so that
// none is accepted twice on any replica, and its record of the sessions single logout ended.
// Without st (nil) every saml route refuses all sign-ins. Its caches of key sets (KeySets) and
// of discovered OpenID providers (OIDCProviders) are the environment's own, shared by the
// stages of every plan built with it.
func (s *Server) Env(st SignInStore) *plan.Env {
	env := &plan.Env{Outbound: outbound.NewClient(s.outboundOptions()), Internal: s, KeySets: enforce.NewKeySets(),
		OIDCProviders: enforce.NewOIDCProviders(), Log: s.log}
	if st != nil {
		env.UseOnce = st.UseOnce
		env.Revocations = enforce.NewRevocations(st)
	}
	return env
}

// outboundOptions are the guard of the connections an account's configuration makes edgeplane open.
func (s *Server) outboundOptions() outbound.Options {
	return outbound.Options{Roots: s.cfg.OutboundRoots, AllowPrivate: s.cfg.OutboundAllowPrivate}
}

// serveTLSEdge carries a connection of a TLS edge for the server name sni: terminated here when
// its tls_termination says so or a terminate-tls of its traffic policy applies to the
// connection (plaintext to the backend), else passed through untouched. hello is the
// ClientHello the listener read, which the edge's on_tcp_connect rules read.
func (s *Server) serveTLSEdge(c net.Conn, e *plan.TLSEdge, hello *enforce.TLSHello) {
	defer c.Close()
	sni := hello.ServerName
	forget, ok := s.trackConn(c)
	if !ok {
		return
	}
	defer forget()
	tr := s.traceConn(inspect.KindTLS, c, sni)
	tr.atEdge(e.Account, e.ID)
	client, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	v := enforce.ConnVerdict{}
	if e.Unenforced == "" && e.Chain.AllowConn(client.Addr()) {
		v = e.Policy.Decide(c.RemoteAddr(), c.LocalAddr(), hello)
	}
	switch {
	case !v.Allow:
		tr.refused(refusedByEdge)
		return
	case v.Forward != nil:
		s.carryForwarded(c, v, hello, tr)
		return
	}
	var pub net.Conn = c
	ct, err := e.ConnTLS(plan.Hello{Client: c.RemoteAddr(), Server: c.LocalAddr(), ServerName: sni})
	if err != nil {
		tr.refused(handshakeFailed)
		return
	}
	if ct.Terminate {
		cfg := connTLS(s.tlsBase, ct.Policy, ct.Cert)
		cfg.NextProtos = nil // the plaintext goes to the backend as it is, whatever it speaks
		tc, ok := s.terminate(c, cfg)
		if !ok {
			tr.refused(handshakeFailed)
			return
		}
		pub = tc
	}
	t, ok := s.choose(e.Backend, conn{account: e.Account, clientAddr: c.RemoteAddr().String(), proto: "tls", edgeType: "2", passthrough: !ct.Terminate})
	if !ok || t.dial == nil {
		tr.refused(noBackend)
		return
	}
	tr.atBackend(t)
	s.carry(pub, t, tr)
}

// serveTCPEdge carries a connection arriving on the port of a TCP edge's address.
func (s *Server) serveTCPEdge(addr string, c net.Conn) {
	defer c.Close()
	e := s.plan().TCP(addr)
	if e == nil {
		return
	}
	tr := s.traceConn(inspect.KindTCP, c, addr)
	tr.atEdge(e.Account, e.ID)
	client, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	v := enforce.ConnVerdict{}
	if e.Unenforced == "" && e.Chain.AllowConn(client.Addr()) {
		v = e.Policy.Decide(c.RemoteAddr(), c.LocalAddr(), nil)
	}
	switch {
	case !v.Allow:
		tr.refused(refusedByEdge)
		return
	case v.Forward != nil:
		s.carryForwarded(c, v, nil, tr)
		return
	}
	t, ok := s.choose(e.Backend, conn{account: e.Account, clientAddr: c.RemoteAddr().String(), proto: "tcp", edgeType: "1"})
	if !ok || t.dial == nil {
		tr.refused(noBackend)
		return
	}
	tr.atBackend(t)
	s.carry(c, t, tr)
}

// Why a connection carried nothing, as the inspector shows it.
const (
	refusedByEdge     = "refused by the edge's IP restriction or traffic policy, or a module the data plane does not apply"
	refusedByEndpoint = "refused by the endpoint's IP restriction or traffic policy"
	handshakeFailed   = "the TLS handshake failed"
	noBackend         = "no tunnel or backend was available"
	unreachable       = "the agent or backend could not be reached"
	forwardLoop       = "forwarded through too many internal endpoints"
)

// carry opens the target's connection and pipes bytes both ways, recording them in tr.
func (s *Server) carry(pub net.Conn, t target, tr *connTrace) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := t.dial(ctx)
	cancel()
	s.routed(pub)
	if err != nil {
		s.log.Debug("edge backend unreachable", "err", err)
		tr.refused(unreachable)
		return
	}
	tr.done(s.pipe(pub, up))
}
