// Package plan turns the stored configuration of accounts (edges, routes, backends, IP policies,
// certificate authorities) into a routing plan the public listeners read on every connection:
// hosts and addresses indexed, route matchers ordered, references resolved (IP rules as
// netip.Prefix, CA pools, backend trees). Building is pure: no I/O, no clock; the state of
// stages that outlives a plan is the builder's (Live). A plan is built whole and never
// mutated: the Planner (planner.go) reads the store, rebuilds an account's part when the
// change feed announces it, and swaps in the new plan. Each module's data-plane code is in
// module_<name>.go, listed in the module table (modules.go).
package plan

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// Plan is the routing plan of every account, by public host (HTTPS and TLS edges) and address
// (TCP edges). Hostports are unique across accounts (the API claims them), so one index serves all.
type Plan struct {
	https map[string]*HTTPSEdge
	tls   map[string]*TLSEdge
	tcp   map[string]*TCPEdge
	// domains are every account's reserved names; certs the certificates uploaded for them.
	domains map[string]bool
	certs   map[string]*tls.Certificate
	// holders is the account of each exact reserved name, zones the account of each wildcard
	// by the domain it covers ("example.com" for "*.example.com"): who may serve a host.
	holders, zones map[string]string
	// Accounts holds each account's part, so one account's change rebuilds only that part.
	Accounts map[string]*Account
}

// Account is one account's part of the plan.
type Account struct {
	ID    string
	HTTPS []*HTTPSEdge
	TLS   []*TLSEdge
	TCP   []*TCPEdge
	// Domains are the account's reserved domain names (lowercase, "*.x" for wildcards); Certs
	// the certificates uploaded for them, by name.
	Domains []string
	Certs   map[string]*tls.Certificate
}

// Edge is what every kind of edge has: its id and account, the module it cannot enforce (a
// non-empty Unenforced fails traffic closed with a 503 naming it), and its connection stages.
type Edge struct {
	ID, Account string
	Hosts       []string // lowercase hostnames ("*.example.com" for a wildcard), or TCP addresses
	Unenforced  string
	Chain       *enforce.Chain
	// Policy is the on_tcp_connect phase of a TLS or TCP edge's traffic_policy (nil: none).
	Policy *enforce.ConnPolicy
}

// HTTPSEdge is an HTTPS edge: TLS terminated with the host's certificate, then routes.
type HTTPSEdge struct {
	Edge
	TLS TLSPolicy
	// Select is the terminate-tls rules of its routes' traffic policies (nil: none), which set
	// its handshake beside the modules (ConnTLS).
	Select *TLSSelector
	Routes []*Route // most specific first: exact paths, then prefixes longest first
}

// TLSPolicy is what an edge asks of a client's TLS: a minimum version and, for mutual TLS, the
// pool of CAs a client certificate must chain to (nil: no client certificate asked for).
type TLSPolicy struct {
	MinVersion uint16
	// MaxVersion is the newest TLS version accepted (0: the listener's, TLS 1.3).
	MaxVersion uint16
	// ClientAuth is how a client certificate is asked for under MutualTLS (0: required and
	// verified against ClientCAs); a traffic policy's terminate-tls may ask for one unverified.
	ClientAuth tls.ClientAuthType
	ClientCAs  *x509.CertPool
	// MutualTLS is set when the mutual_tls module is on; ClientCAs may then be empty (its CAs
	// were deleted), and every client certificate is refused.
	MutualTLS bool
	// roots are the SHA-256 digests of the CA certificates in ClientCAs, for Admits.
	roots map[[32]byte]bool
}

// AddClientCA adds a CA a client certificate may chain to, turning mutual TLS on.
func (t *TLSPolicy) AddClientCA(ca *x509.Certificate) {
	if t.ClientCAs == nil {
		t.ClientCAs = x509.NewCertPool()
	}
	if t.roots == nil {
		t.roots = map[[32]byte]bool{}
	}
	t.MutualTLS = true
	t.ClientCAs.AddCert(ca)
	t.roots[sha256.Sum256(ca.Raw)] = true
}

// Admits reports whether a request on a connection of state may pass this policy's mutual TLS:
// always when it has none, else when the connection's handshake verified a client certificate
// chaining to one of its CAs now (under a terminate-tls that asks for any certificate, when it
// presented one; under one that only requests it, always). The listener asks for the certificate in the handshake, by
// server name; a keep-alive connection made before mutual TLS was turned on (or its CAs
// changed) was never asked, so each request shows it again. A request it refuses is answered
// 421, so that the client connects again and that handshake asks for the certificate.
func (t TLSPolicy) Admits(state *tls.ConnectionState) bool {
	switch {
	case !t.MutualTLS || t.ClientAuth == tls.RequestClientCert:
		return true
	case state == nil:
		return false
	case t.ClientAuth == tls.RequireAnyClientCert:
		return len(state.PeerCertificates) > 0
	}
	for _, chain := range state.VerifiedChains {
		if n := len(chain); n > 0 && t.roots[sha256.Sum256(chain[n-1].Raw)] {
			return true
		}
	}
	return false
}

// Route is one route of an HTTPS edge.
type Route struct {
	ID         string
	Exact      bool
	Match      string
	Unenforced string
	// UnenforcedErr is the error of the module whose build failed the route closed, when one
	// did: the data plane names some refusals on the route's page (a forward-internal target of
	// another protocol, trafficpolicy.OtherProtocolError).
	UnenforcedErr error
	Chain         *enforce.Chain
	Backend       *Backend // nil: the route has no (enabled) backend
	// Handler runs the route's stages in front of the final handler given to Build.
	Handler http.Handler
}

// TLSEdge is a TLS edge: terminated at the edge (Terminate) or passed through.
type TLSEdge struct {
	Edge
	Terminate bool
	TLS       TLSPolicy
	// Select is the terminate-tls actions of its traffic_policy (nil: none); ConnTLS applies
	// them beside the modules.
	Select  *TLSSelector
	Backend *Backend
}

// TCPEdge is a TCP edge on the port of each of its reserved addresses.
type TCPEdge struct {
	Edge
	Backend *Backend
}

// HTTPS returns the HTTPS edge serving host: its exact hostport, else the wildcard one level up.
func (p *Plan) HTTPS(host string) *HTTPSEdge {
	if p == nil {
		return nil
	}
	return lookup(p.https, host)
}

// TLS returns the TLS edge serving host.
func (p *Plan) TLS(host string) *TLSEdge {
	if p == nil {
		return nil
	}
	return lookup(p.tls, host)
}

// TCP returns the TCP edge of a reserved address (host:port).
func (p *Plan) TCP(addr string) *TCPEdge {
	if p == nil {
		return nil
	}
	return p.tcp[strings.ToLower(addr)]
}

// TCPAddrs lists the addresses TCP edges serve.
func (p *Plan) TCPAddrs() []string {
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(p.tcp))
	for a := range p.tcp {
		out = append(out, a)
	}
	return out
}

// Serves reports whether an edge serves host (for issuing its certificate).
func (p *Plan) Serves(host string) bool { return p.HTTPS(host) != nil || p.TLS(host) != nil }

// Reserved reports whether a reserved domain covers host (the name itself or the wildcard one
// level up, as ep.DomainClaimsFor says).
func (p *Plan) Reserved(host string) bool {
	if p == nil {
		return false
	}
	for _, name := range ep.DomainClaimsFor(strings.ToLower(host)) {
		if p.domains[name] {
			return true
		}
	}
	return false
}

// Holder returns the account whose reservation covers host, which alone may serve it: the
// exact name's, else the wildcard's one level up, as ep.DomainClaimsFor says; "" when no
// reservation covers host. host is lowercase. It allocates nothing: the listeners ask it on
// every request.
func (p *Plan) Holder(host string) string {
	if p == nil {
		return ""
	}
	if a, ok := p.holders[host]; ok {
		return a
	}
	if _, zone, ok := strings.Cut(host, "."); ok {
		return p.zones[zone]
	}
	return ""
}

// Certificate returns the certificate uploaded for the reserved domain covering host (the
// name's own reservation first, then the wildcard's), or nil.
func (p *Plan) Certificate(host string) *tls.Certificate {
	if p == nil {
		return nil
	}
	for _, name := range ep.DomainClaimsFor(strings.ToLower(host)) {
		if p.domains[name] {
			return p.certs[name] // the covering reservation decides, with or without a certificate
		}
	}
	return nil
}

// lookup finds the edge of host: its exact hostport, else the nearest wildcard above it
// (*.b.example.com, then *.example.com, …), so a wildcard hostport serves every subdomain.
func lookup[E any](m map[string]*E, host string) *E {
	host = strings.ToLower(host)
	if e := m[host]; e != nil {
		return e
	}
	for rest := host; ; {
		_, parent, ok := strings.Cut(rest, ".")
		if !ok || !strings.Contains(parent, ".") {
			return nil
		}
		if e := m["*."+parent]; e != nil {
			return e
		}
		rest = parent
	}
}

// Route returns the route for a request path: the route a saml module's URL names, else an
// exact match first, then the longest prefix; nil when none matches.
func (e *HTTPSEdge) Route(path string) *Route {
	if strings.HasPrefix(path, ep.SAMLPathPrefix) { // a saml route's own URLs (module_saml.go)
		if r := e.samlRoute(path); r != nil {
			return r
		}
	}
	for _, r := range e.Routes {
		if r.Exact && r.Match == path {
			return r
		}
	}
	for _, r := range e.Routes {
		if !r.Exact && strings.HasPrefix(path, r.Match) {
			return r
		}
	}
	return nil
}

// Config returns the TLS configuration of a connection to this edge, from the listener's base.
func (t TLSPolicy) Config(base *tls.Config) *tls.Config {
	c := base.Clone()
	if t.MinVersion != 0 {
		c.MinVersion = t.MinVersion
	}
	if t.MaxVersion != 0 {
		c.MaxVersion = t.MaxVersion
	}
	if t.MutualTLS {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if t.ClientAuth != 0 {
			c.ClientAuth = t.ClientAuth
		}
		c.ClientCAs = t.ClientCAs
		if c.ClientCAs == nil {
			c.ClientCAs = x509.NewCertPool() // its CAs were deleted: no certificate verifies
		}
	}
	return c
}

// Merge builds the plan of all accounts from their parts. A host or address claimed twice (which
// the API's claims prevent) goes to the first account in the map's order that has it.
func Merge(accounts map[string]*Account) *Plan {
	p := &Plan{https: map[string]*HTTPSEdge{}, tls: map[string]*TLSEdge{}, tcp: map[string]*TCPEdge{}, Accounts: accounts,
		domains: map[string]bool{}, certs: map[string]*tls.Certificate{}, holders: map[string]string{}, zones: map[string]string{}}
	for _, a := range accounts {
		for _, d := range a.Domains {
			p.domains[d] = true
			if zone, ok := strings.CutPrefix(d, "*."); ok {
				p.zones[zone] = a.ID
			} else {
				p.holders[d] = a.ID
			}
		}
		for name, c := range a.Certs {
			p.certs[name] = c
		}
		for _, e := range a.HTTPS {
			for _, h := range e.Hosts {
				if p.https[h] == nil {
					p.https[h] = e
				}
			}
		}
		for _, e := range a.TLS {
			for _, h := range e.Hosts {
				if p.tls[h] == nil {
					p.tls[h] = e
				}
			}
		}
		for _, e := range a.TCP {
			for _, h := range e.Hosts {
				if p.tcp[h] == nil {
					p.tcp[h] = e
				}
			}
		}
	}
	return p
}
