package plan

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// Snapshot is one account's configuration as the store holds it, read in one go.
type Snapshot struct {
	Account    string
	HTTPSEdges []*ep.HTTPSEdge // with their routes embedded
	TLSEdges   []*ep.TLSEdge
	TCPEdges   []*ep.TCPEdge
	Backends   map[string]ep.Document // every backend of the account, by id
	Rules      []*ep.IPPolicyRule
	CAs        map[string]*ep.CertificateAuthority
	// Domains are the account's reserved domains; Certificates the TLS certificates attached to
	// them, with their private keys, by certificate id.
	Domains      []*ep.ReservedDomain
	Certificates map[string]CertKey
	// SAMLKeys are the private keys (PEM) of the SAML request signing certificates of the routes
	// with the saml module, by route id: the store keeps them encrypted, never in the route's
	// document, so only the data plane sees them.
	SAMLKeys map[string]string
	// Env is what stages may use beyond the configuration (an HTTP client for fetching keys);
	// nil in tests that need none.
	Env *Env
	// refusedPolicies are the traffic policy documents over the account's budget
	// (policy_budget.go), set by Build.
	refusedPolicies map[policyUse]bool
}

// CertKey is an uploaded certificate chain and its private key, in PEM.
type CertKey struct{ CertPEM, KeyPEM string }

// Env is the data plane's environment as stages see it.
type Env struct {
	// Outbound is the client for the requests modules make themselves (JWKS, webhook
	// providers' signing keys): it trusts the system roots plus --outbound-ca, with timeouts.
	Outbound *http.Client
	// SessionKey seals the sessions of the sign-in modules (oauth, oidc, saml): 32 bytes, the
	// store's "identity-sessions" secret, so every replica opens every replica's cookies.
	SessionKey []byte
	// OAuthApps are the operator's managed OAuth applications by provider (--oauth-app): they
	// serve every oauth module naming that provider without a client of its own.
	OAuthApps map[string]enforce.OAuthApp
	// OAuthEndpoints override providers' endpoints (--oauth-endpoints), by provider.
	OAuthEndpoints map[string]enforce.OAuthEndpoints
	// BindSignIn limits the sessions of agents' oauth and oidc bind options (--bind-sign-in-*),
	// whose options carry no limits of their own.
	BindSignIn BindSignInLimits
	// UseOnce records that id is used in scope until expires and reports whether it was unused
	// before, on every replica (the store's UseOnce): the saml module keeps each accepted
	// assertion's id there, because its stateless sign-in cookie alone cannot stop a captured
	// answer from being posted again. nil makes every saml ACS refuse (fail closed).
	UseOnce func(ctx context.Context, scope, id string, expires time.Time) (bool, error)
	// Revocations are the sessions single logout ended, one view per process read from the
	// store, so that every plan's saml routes refuse them. nil refuses the IdPs' LogoutRequests.
	Revocations *enforce.Revocations
	// PolicyLog receives the records of traffic policies' log actions; nil refuses a policy
	// with a log action (its route or edge fails closed).
	PolicyLog *enforce.PolicyLog
	// Internal serves traffic policies' forward-internal actions on their account's internal
	// endpoints; nil refuses a policy with one (its route fails closed).
	Internal enforce.InternalEndpoints
	// WAF is the engine of traffic policies' owasp-crs actions, compiled once for every plan;
	// nil makes each stage with such an action compile its own.
	WAF *enforce.WAF
	// KeySets caches the key sets of jwt_validation modules and jwt-validation actions, routes'
	// and agents' alike, so rebuilds keep them; nil gives each stage its own.
	KeySets *enforce.KeySets
	// OIDCProviders caches the providers oidc modules, oidc bind options and openid-connect
	// actions discover, so rebuilds keep them; nil makes each stage discover its own.
	OIDCProviders *enforce.OIDCProviders
	// Log receives stages' warnings for the operator (an IdP refusing a saml route's
	// back-channel logout); nil discards them.
	Log *slog.Logger
}

// BackendKind says what a backend does with a connection.
type BackendKind int

// The kinds of backends.
const (
	TunnelGroup BackendKind = iota + 1
	Static
	HTTPResponse
	Failover
	Weighted
)

// Backend is a resolved backend: a tunnel group (Labels), a static address, a fixed HTTP
// response, or a failover or weighted choice among Children.
type Backend struct {
	ID      string
	Kind    BackendKind
	Labels  map[string]string
	Address string
	TLS     bool
	Status  int
	Headers map[string]string
	Body    string
	// Children are the backends of a failover (in order) or weighted (with Weights) backend.
	Children []*Backend
	Weights  []int64
	// Missing is set for a reference to a backend that no longer exists (or a loop): such a
	// backend takes no connection.
	Missing bool
}

// enabledModule reports whether a configured module acts: a module with "enabled": false does
// not, and is not refused either.
func enabledModule(v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return false
		}
		rv = rv.Elem()
	}
	if f := rv.FieldByName("Enabled"); f.IsValid() && f.Kind() == reflect.Bool {
		return f.Bool()
	}
	if f := rv.FieldByName("Enabled"); f.IsValid() && f.Kind() == reflect.Pointer && !f.IsNil() {
		return f.Elem().Bool()
	}
	return true
}

// unenforced returns the first enabled module of doc the data plane does not apply, walking the
// module table of the document's collection.
func unenforced(res *ep.Resource, doc ep.Document) string {
	for _, m := range ep.ModulesOf(res) {
		if v := m.Get(doc); v != nil && enabledModule(v) && !EnforcedOn(res, m.Name) {
			return m.Name
		}
	}
	return ""
}

// Build makes one account's part of the plan from its snapshot. final is the handler behind
// every route's stages (the data plane's: choose the backend and carry the request); it finds
// the route in the request's context.
// State that outlives the plan (breakers, rate limits, compiled policies) is l's.
func (l *Live) Build(s *Snapshot, final http.Handler) *Account {
	a := &Account{ID: s.Account}
	rules := map[string][]*ep.IPPolicyRule{}
	for _, r := range s.Rules {
		if r.IPPolicy != nil {
			rules[r.IPPolicy.ID] = append(rules[r.IPPolicy.ID], r)
		}
	}
	s.refusedPolicies = refusedPolicies(s, l.costs)
	// Sized up front: an account of 100,000 routes otherwise grows these maps and slices step by
	// step on every rebuild, garbage the collector then has to chase (BenchmarkBuild).
	b := &builder{s: s, live: l, rules: rules, final: final, ipFilters: map[string]*enforce.IPFilter{},
		backends: make(map[backendAt]*Backend, len(s.Backends))}
	a.HTTPS = make([]*HTTPSEdge, 0, len(s.HTTPSEdges))
	for _, e := range s.HTTPSEdges {
		pe := &HTTPSEdge{Edge: b.edge(e.ID, e.Hostports, ep.HTTPSEdges, e), TLS: b.tlsPolicy(e.TLSTermination, e.MutualTLS),
			Routes: make([]*Route, 0, len(e.Routes))}
		for _, r := range e.Routes {
			pe.Routes = append(pe.Routes, b.route(e, r))
		}
		pe.Select = b.httpsEdgeTLSSelector(e, pe)
		sortRoutes(pe.Routes)
		a.HTTPS = append(a.HTTPS, pe)
	}
	for _, e := range s.TLSEdges {
		pe := &TLSEdge{Edge: b.edge(e.ID, e.Hostports, ep.TLSEdges, e), Backend: b.backendOf(e.Backend)}
		pe.Chain = b.ipChain(e.IPRestriction)
		b.connPolicy(&pe.Edge, "tls", e.Hostports, e.TrafficPolicy, true)
		if t := e.TLSTermination; t != nil && t.Enabled && t.TerminateAt == "edge" {
			pe.Terminate = true
		}
		pe.TLS = b.tlsPolicy(e.TLSTermination, e.MutualTLS)
		pe.Select = b.edgeTLSSelector(&pe.Edge, e.Hostports, e.TrafficPolicy, pe.TLS.MutualTLS)
		a.TLS = append(a.TLS, pe)
	}
	for _, e := range s.TCPEdges {
		pe := &TCPEdge{Edge: b.edge(e.ID, e.Hostports, ep.TCPEdges, e), Backend: b.backendOf(e.Backend)}
		pe.Chain = b.ipChain(e.IPRestriction)
		b.connPolicy(&pe.Edge, "tcp", e.Hostports, e.TrafficPolicy, false)
		a.TCP = append(a.TCP, pe)
	}
	a.Certs = map[string]*tls.Certificate{}
	for _, d := range s.Domains {
		name := strings.ToLower(d.Domain)
		a.Domains = append(a.Domains, name)
		if d.Certificate == nil {
			continue
		}
		ck, ok := s.Certificates[d.Certificate.ID]
		if !ok {
			continue
		}
		// A pair that does not load (the API checked it) leaves the name to edgeplane's CA.
		if pair, err := tls.X509KeyPair([]byte(ck.CertPEM), []byte(ck.KeyPEM)); err == nil {
			a.Certs[name] = &pair
		}
	}
	return a
}

type builder struct {
	s     *Snapshot
	live  *Live
	rules map[string][]*ep.IPPolicyRule
	final http.Handler
	// ipFilters are the IP policies' rules, parsed once per build and shared by every edge and
	// route referring to them (nil: a rule does not parse).
	ipFilters map[string]*enforce.IPFilter
	// caCerts are the certificate authorities' certificates, parsed once per build, and
	// clientCAs the pools of mutual_tls modules, by their list of authorities: a pool copies each
	// certificate's subject, so edges with the same authorities share one.
	caCerts   map[string][]*x509.Certificate
	clientCAs map[string]TLSPolicy
	// backends are the backends resolved so far (resolve).
	backends map[backendAt]*Backend
}

// edge fills what every edge has. HTTPS and TLS edges are found by host (the hostport's port is
// the public port, served by the TLS listener whatever it is); TCP edges by their full address.
func (b *builder) edge(id string, hostports []string, res *ep.Resource, doc ep.Document) Edge {
	e := Edge{ID: id, Account: b.s.Account, Unenforced: unenforced(res, doc)}
	for _, hp := range hostports {
		hp = strings.ToLower(hp)
		if res != ep.TCPEdges {
			hp, _, _ = strings.Cut(hp, ":")
		}
		if !slices.Contains(e.Hosts, hp) {
			e.Hosts = append(e.Hosts, hp)
		}
	}
	return e
}

func (b *builder) route(e *ep.HTTPSEdge, r *ep.HTTPSEdgeRoute) *Route {
	rt := &Route{ID: r.ID, Exact: r.MatchType == ep.MatchExactPath, Match: r.Match,
		Unenforced: unenforced(ep.HTTPSEdgeRoutes, r), Chain: b.ipChain(r.IPRestriction), Backend: b.backendOf(r.Backend)}
	if rt.Unenforced == "" {
		if err := b.routeStages(e, r, rt); err != nil {
			rt.Unenforced, rt.UnenforcedErr = err.Error(), err
		}
	}
	if b.final != nil {
		rt.Handler = rt.Chain.Handler(b.final)
	}
	return rt
}

// sortRoutes orders routes for Route: exact paths first, then prefixes from the longest.
func sortRoutes(rs []*Route) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].Exact != rs[j].Exact {
			return rs[i].Exact
		}
		return len(rs[i].Match) > len(rs[j].Match)
	})
}

// ipChain builds the ip_restriction stage: the union of the rules of the module's policies (a
// deleted policy has no rules). Each policy's rules are parsed once per build and shared by the
// stages of every edge and route referring to it.
func (b *builder) ipChain(m *ep.EndpointIPPolicy) *enforce.Chain {
	if m == nil || !m.Enabled {
		return nil
	}
	parts := make([]*enforce.IPFilter, 0, len(m.IPPolicies))
	for _, ref := range m.IPPolicies {
		f := b.ipPolicyFilter(ref.ID)
		if f == nil { // the API validated every CIDR; refuse everyone rather than guess
			f, _ = enforce.NewIPFilter(nil, []string{"0.0.0.0/0", "::/0"})
			parts = []*enforce.IPFilter{f}
			break
		}
		parts = append(parts, f)
	}
	return &enforce.Chain{Conn: []enforce.ConnStage{enforce.JoinIPFilters(parts...)}}
}

// ipPolicyFilter returns the filter of one IP policy's rules (nil when one does not parse).
func (b *builder) ipPolicyFilter(id string) *enforce.IPFilter {
	if f, ok := b.ipFilters[id]; ok {
		return f
	}
	if b.ipFilters == nil {
		b.ipFilters = map[string]*enforce.IPFilter{}
	}
	var allow, deny []string
	for _, r := range b.rules[id] {
		if r.Action == "deny" {
			deny = append(deny, r.CIDR)
		} else {
			allow = append(allow, r.CIDR)
		}
	}
	f, err := enforce.NewIPFilter(allow, deny)
	if err != nil {
		f = nil
	}
	b.ipFilters[id] = f
	return f
}

var tlsVersions = map[string]uint16{"1.0": tls.VersionTLS10, "1.1": tls.VersionTLS11, "1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// tlsPolicy resolves tls_termination's minimum version and mutual_tls's CAs (a deleted CA
// counts as no certificates).
func (b *builder) tlsPolicy(t *ep.EndpointTLSTermination, m *ep.EndpointMutualTLS) TLSPolicy {
	p := TLSPolicy{MinVersion: tls.VersionTLS12}
	if t != nil && t.Enabled && t.MinVersion != nil {
		p.MinVersion = tlsVersions[*t.MinVersion]
	}
	if m != nil && m.Enabled {
		ids := make([]string, len(m.CertificateAuthorities))
		for i, ref := range m.CertificateAuthorities {
			ids[i] = ref.ID
		}
		key := strings.Join(ids, ",")
		if shared, ok := b.clientCAs[key]; ok {
			p.MutualTLS, p.ClientCAs, p.roots = true, shared.ClientCAs, shared.roots
			return p
		}
		p.MutualTLS = true
		p.ClientCAs = x509.NewCertPool()
		for _, id := range ids {
			for _, cert := range b.caCertificates(id) {
				p.AddClientCA(cert)
			}
		}
		if b.clientCAs == nil {
			b.clientCAs = map[string]TLSPolicy{}
		}
		b.clientCAs[key] = p
	}
	return p
}

// caCertificates returns the parsed certificates of a certificate authority (none when it was
// deleted), parsed once per build: the pools of every edge with mutual_tls on it share them, where
// each edge used to hold a parsed copy of each of its up to 32 authorities.
func (b *builder) caCertificates(id string) []*x509.Certificate {
	if certs, ok := b.caCerts[id]; ok {
		return certs
	}
	if b.caCerts == nil {
		b.caCerts = map[string][]*x509.Certificate{}
	}
	var certs []*x509.Certificate
	if ca := b.s.CAs[id]; ca != nil {
		certs = parsePEMCertificates([]byte(ca.CAPEM))
	}
	b.caCerts[id] = certs
	return certs
}

// parsePEMCertificates returns the certificates of a PEM bundle, skipping what does not parse
// (the API checked the bundle when it was stored).
func parsePEMCertificates(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, cert)
		}
	}
}

// backendOf resolves the backend module (nil when absent or disabled).
func (b *builder) backendOf(m *ep.EndpointBackend) *Backend {
	if m == nil || !m.Enabled || m.Backend == nil {
		return nil
	}
	return b.resolve(m.Backend.ID, 0)
}

// maxDepth bounds nested failover and weighted backends (the API refuses cycles; this keeps a
// plan finite whatever is stored).
const maxDepth = 16

// backendAt names a backend resolved at a depth: the resolution depends on nothing else.
type backendAt struct {
	id    string
	depth int
}

// resolve returns the backend id at depth, resolved once per build and shared by every edge,
// route and parent backend reaching it there: the API refuses cycles, not shared children, and
// resolving each path again made a tree of every path, exponential in the depth (32 layers of 32
// failover backends each listing the 32 below: 32^depth nodes per route). Backends are read,
// never changed, by the data plane.
func (b *builder) resolve(id string, depth int) *Backend {
	k := backendAt{id, depth}
	if r, ok := b.backends[k]; ok {
		return r
	}
	if b.backends == nil {
		b.backends = map[backendAt]*Backend{}
	}
	r := b.resolveOnce(id, depth)
	b.backends[k] = r
	return r
}

func (b *builder) resolveOnce(id string, depth int) *Backend {
	d := b.s.Backends[id]
	if d == nil || depth > maxDepth {
		return &Backend{ID: id, Missing: true}
	}
	switch v := d.(type) {
	case *ep.TunnelGroupBackend:
		return &Backend{ID: id, Kind: TunnelGroup, Labels: v.Labels}
	case *ep.StaticBackend:
		return &Backend{ID: id, Kind: Static, Address: v.Address, TLS: v.TLS.Enabled}
	case *ep.HTTPResponseBackend:
		return &Backend{ID: id, Kind: HTTPResponse, Status: int(v.StatusCode), Headers: v.Headers, Body: v.Body}
	case *ep.FailoverBackend:
		out := &Backend{ID: id, Kind: Failover}
		for _, c := range v.Backends {
			out.Children = append(out.Children, b.resolve(c, depth+1))
		}
		return out
	case *ep.WeightedBackend:
		out := &Backend{ID: id, Kind: Weighted}
		ids := make([]string, 0, len(v.Backends))
		for c := range v.Backends {
			ids = append(ids, c)
		}
		sort.Strings(ids)
		for _, c := range ids {
			out.Children = append(out.Children, b.resolve(c, depth+1))
			out.Weights = append(out.Weights, v.Backends[c])
		}
		return out
	}
	return &Backend{ID: id, Missing: true}
}
