package edgeplane

import (
	"net/http"
	"strconv"
	"strings"
)

// Edge and route error codes (docs/decisions.md gives the exact meanings
// edgeplane gives the 71xx hostport family).
const (
	CodeBadHostport        = 7104 // not host:port
	CodeHostNotReserved    = 7116 // TLS/HTTPS hostport's host is not a reserved domain of the account
	CodeHostportPort       = 7117 // TLS/HTTPS hostport's port is not 443
	CodeAddrNotReserved    = 7118 // TCP hostport is not a reserved address of the account
	CodeHostportTaken      = 7122 // hostport already on another edge
	CodeRouteMatchTaken    = 7126 // route match already used on the edge
	CodeBadMatchType       = 7130 // match_type not exact_path or path_prefix
	CodeHostportDuplicated = 7133 // the same hostport twice in one list
)

// ClaimHostport is the claim namespace of edge hostports: a hostport is served by one edge.
const ClaimHostport = "hostport"

// hostportKind says which reservations may back an edge's hostports.
type hostportKind int

const (
	domainHostports hostportKind = iota // TLS and HTTPS edges: reserved domains on port 443
	addrHostports                       // TCP edges: reserved addresses
)

// Edge is what the three edge types share: hostports and their claims and references.
type Edge struct {
	Meta
	Annotations
	Hostports []string `json:"hostports"`
}

// Claims makes each hostport belong to one edge across all accounts.
func (e *Edge) Claims() []Claim {
	out := make([]Claim, 0, len(e.Hostports))
	for _, hp := range e.Hostports {
		out = append(out, Claim{Namespace: ClaimHostport, Value: hp})
	}
	return out
}

// Conflict is 409 ERR_NGROK_7122: another edge serves the hostport.
func (e *Edge) Conflict(c Claim, _ bool) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeHostportTaken, Field: "hostports",
		Msg: "hostports: " + strconv.Quote(c.Value) + " is already served by another edge"}
}

// hostportRefs refuses deleting a reserved domain or address that backs one of the hostports:
// each hostport refers to the reservation claiming its host (or the wildcard above it).
func hostportRefs(hostports []string, kind hostportKind) []Reference {
	var refs []Reference
	for _, hp := range hostports {
		host, _, _ := strings.Cut(hp, ":")
		if kind == addrHostports {
			refs = append(refs, Reference{ToClaim: &Claim{Namespace: ClaimAddr, Value: hp}, Mode: RefRestrict})
			continue
		}
		refs = append(refs, Reference{ToClaim: &Claim{Namespace: ClaimDomain, Value: host}, Mode: RefRestrict})
		if _, parent, ok := strings.Cut(host, "."); ok {
			refs = append(refs, Reference{ToClaim: &Claim{Namespace: ClaimDomain, Value: "*." + parent}, Mode: RefRestrict})
		}
	}
	return refs
}

// checkHostports validates the shape of a hostport list and lowercases it.
func checkHostports(hostports []string) ([]string, error) {
	if err := maxEntries(CodeTooManyHostports, "hostports", len(hostports), MaxHostportsPerEdge); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(hostports))
	seen := map[string]bool{}
	for i, hp := range hostports {
		field := "hostports[" + strconv.Itoa(i) + "]"
		host, port, ok := strings.Cut(strings.ToLower(strings.TrimSpace(hp)), ":")
		if !ok || host == "" || !validPort(port) || !ValidHostname(host, false) {
			return nil, Invalid(CodeBadHostport, field, "%q is not a host:port with a hostname and a port from 1 to 65535", hp)
		}
		v := host + ":" + port
		if seen[v] {
			return nil, Invalid(CodeHostportDuplicated, field, "%q is listed twice", hp)
		}
		seen[v] = true
		out = append(out, v)
	}
	return out, nil
}

// mineClaimed is NotFound unless the caller's account holds the claim.
func mineClaimed(op *Op, namespace, value string) error {
	_, mine, err := op.Tx.Claimed(namespace, value)
	if err == nil && !mine {
		return NotFound()
	}
	return err
}

// resolveHostports checks that each hostport is backed by a reservation of the caller's account.
func resolveHostports(op *Op, hostports []string, kind hostportKind) error {
	for i, hp := range hostports {
		field := "hostports[" + strconv.Itoa(i) + "]"
		host, port, _ := strings.Cut(hp, ":")
		if kind == addrHostports {
			if err := mineClaimed(op, ClaimAddr, hp); err != nil {
				if IsNotFound(err) {
					return Invalid(CodeAddrNotReserved, field, "%q is not a reserved TCP address of this account", hp)
				}
				return err
			}
			continue
		}
		if port != "443" {
			return Invalid(CodeHostportPort, field, "%q: TLS and HTTPS edges serve port 443 only", hp)
		}
		// The exact name decides when anyone holds it: a wildcard of this account covers only
		// the subdomains nobody has reserved, never a name another account reserved.
		_, mine, err := op.Tx.Claimed(ClaimDomain, host)
		switch {
		case IsNotFound(err):
			if _, parent, ok := strings.Cut(host, "."); ok {
				err = mineClaimed(op, ClaimDomain, "*."+parent)
			}
			if err == nil {
				// Once the wildcard is share-locked, look at the name again: another account's
				// reservation of it, which locks the wildcard exclusively (notServedElsewhere),
				// may have committed while this write waited for the lock, and then it wins.
				if _, mine, again := op.Tx.Claimed(ClaimDomain, host); again == nil && !mine {
					err = NotFound()
				} else if !IsNotFound(again) {
					err = again
				}
			}
		case err == nil && !mine:
			err = NotFound()
		}
		if err != nil {
			if IsNotFound(err) {
				return Invalid(CodeHostNotReserved, field, "%q is not a reserved domain of this account (nor covered by a reserved wildcard)", host)
			}
			return err
		}
	}
	return nil
}

// edgeBody is what the create and update bodies of all edges share.
type edgeBody struct {
	Echo
	AnnotationFields
	Hostports []string `json:"hostports"`
}

func (b *edgeBody) validate(body any) error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if b.Hostports != nil {
		hp, err := checkHostports(b.Hostports)
		if err != nil {
			return err
		}
		b.Hostports = hp
	}
	return validateModules(body)
}

// apply changes the annotations and hostports of e and sets the given modules.
func (b *edgeBody) apply(op *Op, res *Resource, e *Edge, doc Document, body any, kind hostportKind) error {
	b.ApplyTo(&e.Annotations)
	if b.Hostports != nil {
		if err := resolveHostports(op, b.Hostports, kind); err != nil {
			return err
		}
		e.Hostports = b.Hostports
	}
	return applyModules(op, res, doc, body)
}

// --- TLS edges ---------------------------------------------------------------------------------

// TLSEdge serves TLS connections on its hostports (spec "TLSEdge").
type TLSEdge struct {
	Edge
	Backend        *EndpointBackend        `json:"backend"`
	IPRestriction  *EndpointIPPolicy       `json:"ip_restriction"`
	MutualTLS      *EndpointMutualTLS      `json:"mutual_tls"`
	TLSTermination *EndpointTLSTermination `json:"tls_termination"`
	TrafficPolicy  *EndpointTrafficPolicy  `json:"traffic_policy"`
}

// References: the reservations behind the hostports, and the backend.
func (e *TLSEdge) References() []Reference {
	return append(hostportRefs(e.Hostports, domainHostports), backendRef(e.Backend)...)
}

// CheckModules refuses modules that need TLS terminated at the edge when it passes through.
func (e *TLSEdge) CheckModules() error {
	if e.TLSTermination != nil && e.TLSTermination.TerminateAt == terminateUpstream && e.MutualTLS != nil {
		return Invalid(CodeNeedsEdgeTermination, "mutual_tls", "needs TLS terminated at the edge, but tls_termination.terminate_at is \"upstream\"")
	}
	return nil
}

// TLSEdgeBody is the body of POST and PATCH /edges/tls.
type TLSEdgeBody struct {
	edgeBody
	Backend        *EndpointBackendMutate        `json:"backend"`
	IPRestriction  *EndpointIPPolicyMutate       `json:"ip_restriction"`
	MutualTLS      *EndpointMutualTLSMutate      `json:"mutual_tls"`
	TLSTermination *EndpointTLSTerminationMutate `json:"tls_termination"`
	TrafficPolicy  *EndpointTrafficPolicyMutate  `json:"traffic_policy"`
}

// Validate checks the body without the store.
func (b *TLSEdgeBody) Validate() error { return b.validate(b) }

// Create builds a new TLS edge.
func (b *TLSEdgeBody) Create(op *Op) (Document, error) {
	e := &TLSEdge{Edge: Edge{Hostports: []string{}}}
	return e, b.Apply(op, e)
}

// Apply changes what the body names; modules it omits stay.
func (b *TLSEdgeBody) Apply(op *Op, doc Document) error {
	e := doc.(*TLSEdge)
	return b.apply(op, TLSEdges, &e.Edge, e, b, domainHostports)
}

// --- HTTPS edges -------------------------------------------------------------------------------

// HTTPSEdge serves HTTPS on its hostports through its routes (spec "HTTPSEdge"). Routes are
// objects of their own, embedded in the edge when it is shown.
type HTTPSEdge struct {
	Edge
	MutualTLS      *EndpointMutualTLS      `json:"mutual_tls"`
	TLSTermination *EndpointTLSTermination `json:"tls_termination"`
	Routes         []*HTTPSEdgeRoute       `json:"routes"`
}

// References: the reservations behind the hostports.
func (e *HTTPSEdge) References() []Reference { return hostportRefs(e.Hostports, domainHostports) }

// SetChildren embeds the edge's routes, oldest first.
func (e *HTTPSEdge) SetChildren(children []Document) {
	e.Routes = make([]*HTTPSEdgeRoute, len(children))
	for i, c := range children {
		e.Routes[i] = c.(*HTTPSEdgeRoute)
	}
}

// Children returns the embedded routes, so they are rendered with their own uris.
func (e *HTTPSEdge) Children() []Document {
	out := make([]Document, len(e.Routes))
	for i, r := range e.Routes {
		out[i] = r
	}
	return out
}

// StoredForm leaves the routes out of the edge's stored document: they are stored on their own.
func (e *HTTPSEdge) StoredForm() Document {
	c := *e
	c.Routes = nil
	return &c
}

// HTTPSEdgeBody is the body of POST and PATCH /edges/https.
type HTTPSEdgeBody struct {
	edgeBody
	MutualTLS      *EndpointMutualTLSMutate      `json:"mutual_tls"`
	TLSTermination *EndpointTLSTerminationAtEdge `json:"tls_termination"`
}

// Validate checks the body without the store.
func (b *HTTPSEdgeBody) Validate() error { return b.validate(b) }

// Create builds a new HTTPS edge with no routes.
func (b *HTTPSEdgeBody) Create(op *Op) (Document, error) {
	e := &HTTPSEdge{Edge: Edge{Hostports: []string{}}, Routes: []*HTTPSEdgeRoute{}}
	return e, b.Apply(op, e)
}

// Apply changes what the body names; modules it omits stay.
func (b *HTTPSEdgeBody) Apply(op *Op, doc Document) error {
	e := doc.(*HTTPSEdge)
	return b.apply(op, HTTPSEdges, &e.Edge, e, b, domainHostports)
}

// --- TCP edges ---------------------------------------------------------------------------------

// TCPEdge serves TCP on reserved addresses (schema "TCPEdge").
type TCPEdge struct {
	Edge
	Backend       *EndpointBackend       `json:"backend"`
	IPRestriction *EndpointIPPolicy      `json:"ip_restriction"`
	TrafficPolicy *EndpointTrafficPolicy `json:"traffic_policy"`
}

// References: the reserved addresses behind the hostports, and the backend.
func (e *TCPEdge) References() []Reference {
	return append(hostportRefs(e.Hostports, addrHostports), backendRef(e.Backend)...)
}

// TCPEdgeBody is the body of POST and PATCH /edges/tcp.
type TCPEdgeBody struct {
	edgeBody
	Backend       *EndpointBackendMutate       `json:"backend"`
	IPRestriction *EndpointIPPolicyMutate      `json:"ip_restriction"`
	TrafficPolicy *EndpointTrafficPolicyMutate `json:"traffic_policy"`
}

// Validate checks the body without the store.
func (b *TCPEdgeBody) Validate() error { return b.validate(b) }

// Create builds a new TCP edge.
func (b *TCPEdgeBody) Create(op *Op) (Document, error) {
	e := &TCPEdge{Edge: Edge{Hostports: []string{}}}
	return e, b.Apply(op, e)
}

// Apply changes what the body names; modules it omits stay.
func (b *TCPEdgeBody) Apply(op *Op, doc Document) error {
	e := doc.(*TCPEdge)
	return b.apply(op, TCPEdges, &e.Edge, e, b, addrHostports)
}

func backendRef(b *EndpointBackend) []Reference {
	if b == nil || b.Backend == nil {
		return nil
	}
	return []Reference{{To: b.Backend.ID, Mode: RefRestrict}}
}

// --- HTTPS edge routes -------------------------------------------------------------------------

// Route match types.
const (
	MatchExactPath  = "exact_path"
	MatchPathPrefix = "path_prefix"
)

// HTTPSEdgeRoute sends the requests its match selects through its modules (spec
// "HTTPSEdgeRoute").
type HTTPSEdgeRoute struct {
	EdgeID string `json:"edge_id"`
	Meta
	MatchType string `json:"match_type"`
	Match     string `json:"match"`
	Annotations
	Backend               *EndpointBackend           `json:"backend"`
	IPRestriction         *EndpointIPPolicy          `json:"ip_restriction"`
	CircuitBreaker        *EndpointCircuitBreaker    `json:"circuit_breaker"`
	Compression           *EndpointToggle            `json:"compression"`
	RequestHeaders        *EndpointHeaders           `json:"request_headers"`
	ResponseHeaders       *EndpointHeaders           `json:"response_headers"`
	WebhookVerification   *EndpointWebhookValidation `json:"webhook_verification"`
	WebsocketTCPConverter *EndpointToggle            `json:"websocket_tcp_converter"`
	TrafficPolicy         *EndpointTrafficPolicy     `json:"traffic_policy"`
	routeAuth
}

// ParentID makes the route part of its edge: deleted with it, listed under it.
func (r *HTTPSEdgeRoute) ParentID() string { return r.EdgeID }

// Claims makes the match unique within the edge.
func (r *HTTPSEdgeRoute) Claims() []Claim {
	return []Claim{{Namespace: "route_match:" + r.EdgeID, Value: r.Match}}
}

// Conflict is 409 ERR_NGROK_7126.
func (r *HTTPSEdgeRoute) Conflict(c Claim, _ bool) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeRouteMatchTaken, Field: "match",
		Msg: "match: another route of this edge already matches " + strconv.Quote(c.Value)}
}

// References: the backend.
func (r *HTTPSEdgeRoute) References() []Reference { return backendRef(r.Backend) }

// HTTPSEdgeRouteBody is the body of POST and PATCH on routes.
type HTTPSEdgeRouteBody struct {
	Echo
	AnnotationFields
	MatchType             *string                          `json:"match_type"`
	Match                 *string                          `json:"match"`
	Backend               *EndpointBackendMutate           `json:"backend"`
	IPRestriction         *EndpointIPPolicyMutate          `json:"ip_restriction"`
	CircuitBreaker        *EndpointCircuitBreakerMutate    `json:"circuit_breaker"`
	Compression           *EndpointToggleMutate            `json:"compression"`
	RequestHeaders        *EndpointHeadersMutate           `json:"request_headers"`
	ResponseHeaders       *EndpointHeadersMutate           `json:"response_headers"`
	WebhookVerification   *EndpointWebhookValidationMutate `json:"webhook_verification"`
	WebsocketTCPConverter *EndpointToggleMutate            `json:"websocket_tcp_converter"`
	TrafficPolicy         *EndpointTrafficPolicyMutate     `json:"traffic_policy"`
	routeAuthBody
}

// Validate checks match_type, match and every module given.
func (b *HTTPSEdgeRouteBody) Validate() error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if b.MatchType != nil && *b.MatchType != MatchExactPath && *b.MatchType != MatchPathPrefix {
		return Invalid(CodeBadMatchType, "match_type", "must be \"exact_path\" or \"path_prefix\", got %q", *b.MatchType)
	}
	if b.Match != nil {
		if err := validateMatch(*b.Match); err != nil {
			return err
		}
	}
	return validateModules(b)
}

// Create requires match_type and match and builds the route under the edge of the path.
func (b *HTTPSEdgeRouteBody) Create(op *Op) (Document, error) {
	if b.MatchType == nil {
		return nil, Invalid(CodeBadMatchType, "match_type", "is required: \"exact_path\" or \"path_prefix\"")
	}
	if b.Match == nil {
		return nil, Invalid(CodeInvalid, "match", "is required")
	}
	if err := roomForChild(op, HTTPSEdgeRoutes, op.ParentID, MaxRoutesPerEdge, CodeTooManyRoutes, "routes", "routes"); err != nil {
		return nil, err
	}
	r := &HTTPSEdgeRoute{EdgeID: op.ParentID}
	return r, b.Apply(op, r)
}

// Apply changes what the body names; modules it omits stay.
func (b *HTTPSEdgeRouteBody) Apply(op *Op, doc Document) error {
	r := doc.(*HTTPSEdgeRoute)
	b.ApplyTo(&r.Annotations)
	if b.MatchType != nil {
		r.MatchType = *b.MatchType
	}
	if b.Match != nil {
		r.Match = *b.Match
	}
	if err := applyModules(op, HTTPSEdgeRoutes, r, b); err != nil {
		return err
	}
	return maxDocument("route", r, MaxRouteBytes)
}

// validateMatch accepts a path ("/api"), a host ("app.example.com") or a host and path.
func validateMatch(m string) error {
	if m == "" {
		return Invalid(CodeInvalid, "match", "must not be empty")
	}
	if len(m) > 2048 {
		return Invalid(CodeInvalid, "match", "must be at most 2048 bytes")
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c <= ' ' || c == 0x7f {
			return Invalid(CodeInvalid, "match", "must not contain spaces or control characters")
		}
	}
	if m[0] == '/' {
		return nil
	}
	host, _, _ := strings.Cut(m, "/")
	if !ValidHostname(host, true) {
		return Invalid(CodeInvalid, "match", "%q is neither a path starting with / nor a host name with an optional path", m)
	}
	return nil
}
