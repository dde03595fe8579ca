package plan

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// An HTTPS edge's handshake comes before a request picks a route, so the terminate-tls of a
// route's traffic policy sets the edge's handshake: the edge takes the terminate-tls rules its
// routes give when they all give the same ones, applied beside its tls_termination and mutual_tls
// modules as on a TLS edge (withModules), to every connection its rules choose, whatever route
// its requests then take. Routes giving different ones, or asking for client certificates while
// the mutual_tls module is on, fail closed naming why.

// ConnTLS is the TLS of a connection to the edge, by its ClientHello: its modules', or those of
// the terminate-tls its routes' rules choose beside them. An error refuses the handshake.
func (e *HTTPSEdge) ConnTLS(h Hello) (ConnTLS, error) {
	own := ConnTLS{Policy: e.TLS}
	c, ok, err := e.Select.Choose(h)
	if err != nil || !ok {
		return own, err
	}
	return withModules(e.TLS, c), nil
}

// RequestTLS is the client-certificate policy a request of the edge is held to (Admits): the
// one its connection's handshake was given, chosen again from what the request knows of its
// connection. An expression that fails to evaluate asks for a certificate no client has.
func (e *HTTPSEdge) RequestTLS(r *http.Request) TLSPolicy {
	if e.Select == nil {
		return e.TLS
	}
	c, err := e.ConnTLS(RequestHello(r))
	if err != nil {
		return TLSPolicy{MutualTLS: true}
	}
	return c.Policy
}

// RequestHello is what a request tells of its connection's ClientHello: the addresses and the
// server name (its start is not kept; conn.ts.start reads the request's time).
func RequestHello(r *http.Request) Hello {
	var h Hello
	if a, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		h.Client = a
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		h.Server = a
	}
	if r.TLS != nil {
		h.ServerName = r.TLS.ServerName
	}
	return h
}

// httpsEdgeTLSSelector takes the terminate-tls rules of an HTTPS edge's routes (nil when none
// has any), failing closed the routes whose rules cannot set the edge's handshake.
func (b *builder) httpsEdgeTLSSelector(e *ep.HTTPSEdge, pe *HTTPSEdge) *TLSSelector {
	var sel *TLSSelector
	var with []*Route
	fail := func(rt *Route, why string) { rt.Unenforced = "traffic_policy (" + why + ")" }
	for _, r := range e.Routes {
		m := r.TrafficPolicy
		if m == nil || !m.Enabled || !strings.Contains(m.Value, "terminate-tls") {
			continue
		}
		rt := routeByID(pe.Routes, r.ID)
		if rt == nil || rt.Unenforced != "" {
			continue
		}
		s, err := b.tlsSelector(e.ID, "https", e.Hostports, m.Value)
		switch {
		case err != nil:
			fail(rt, err.Error())
			continue
		case s == nil:
			continue
		case pe.TLS.MutualTLS && s.AsksClientCerts():
			fail(rt, "terminate-tls asks for client certificates and the edge's mutual_tls module is on: give one of them")
			continue
		}
		with = append(with, rt)
		if sel == nil {
			sel = s
		} else if sel.Digest != s.Digest {
			for _, rt := range with {
				fail(rt, fmt.Sprintf("terminate-tls sets the edge's handshake, which comes before a route is chosen: the routes of edge %s give different ones", e.ID))
			}
			return nil
		}
	}
	return sel
}

func routeByID(rs []*Route, id string) *Route {
	for _, r := range rs {
		if r.ID == id {
			return r
		}
	}
	return nil
}
