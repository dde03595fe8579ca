package edgeplane

import (
	"strings"
	"time"
)

// The resource table and the module table, in one place. Each resource entry declares a
// collection; each module entry a module on a parent collection. The store and the HTTP layer
// serve every entry with the same generic code, and the tests walk these lists so a new entry
// gets its lifecycle tests for free.

// APIKeys is /api_keys.
var APIKeys = &Resource{
	Kind: "api_key", Path: "/api_keys", ListKey: "keys", Prefix: "ak", Ops: AllOps,
	New:       func() Document { return new(APIKey) },
	NewCreate: func() Creator { return new(APIKeyCreate) },
	NewUpdate: func() Updater { return new(APIKeyUpdate) },
}

// Credentials is /credentials.
var Credentials = &Resource{
	Kind: "credential", Path: "/credentials", ListKey: "credentials", Prefix: "cr", Ops: AllOps,
	New:       func() Document { return new(Credential) },
	NewCreate: func() Creator { return new(CredentialCreate) },
	NewUpdate: func() Updater { return new(CredentialUpdate) },
}

// BotUsers is /bot_users.
var BotUsers = &Resource{
	Kind: "bot_user", Path: "/bot_users", ListKey: "bot_users", Prefix: "bot", Ops: AllOps,
	New:       func() Document { return new(BotUser) },
	NewCreate: func() Creator { return new(BotUserCreate) },
	NewUpdate: func() Updater { return new(BotUserUpdate) },
	OnDelete:  deleteBotPrincipal,
}

// IPPolicies is /ip_policies.
var IPPolicies = &Resource{
	Kind: "ip_policy", Path: "/ip_policies", ListKey: "ip_policies", Prefix: "ipp", Ops: AllOps,
	New:       func() Document { return new(IPPolicy) },
	NewCreate: func() Creator { return new(IPPolicyCreate) },
	NewUpdate: func() Updater { return new(IPPolicyUpdate) },
}

// IPPolicyRules is /ip_policy_rules.
var IPPolicyRules = &Resource{
	Kind: "ip_policy_rule", Path: "/ip_policy_rules", ListKey: "ip_policy_rules", Prefix: "ipr", Ops: AllOps,
	New:       func() Document { return new(IPPolicyRule) },
	NewCreate: func() Creator { return new(IPPolicyRuleCreate) },
	NewUpdate: func() Updater { return new(IPPolicyRuleUpdate) },
}

// ReservedDomains is /reserved_domains. Names are unique across accounts (claims); a domain
// that an edge's hostports use cannot be deleted.
var ReservedDomains = &Resource{
	Kind: "reserved_domain", Path: "/reserved_domains", ListKey: "reserved_domains", Prefix: "rd", Ops: AllOps,
	New:       func() Document { return new(ReservedDomain) },
	NewCreate: func() Creator { return new(ReservedDomainCreate) },
	NewUpdate: func() Updater { return new(ReservedDomainUpdate) },
	InUse:     domainInUse,
}

// TLSCertificates is /tls_certificates. A certificate attached to a reserved domain cannot be
// deleted.
var TLSCertificates = &Resource{
	Kind: "tls_certificate", Path: "/tls_certificates", ListKey: "tls_certificates", Prefix: "cert", Ops: AllOps,
	New:       func() Document { return new(TLSCertificate) },
	NewCreate: func() Creator { return new(TLSCertificateCreate) },
	NewUpdate: func() Updater { return new(TLSCertificateUpdate) },
	InUse:     certificateInUse,
}

// CertificateAuthorities is /certificate_authorities.
var CertificateAuthorities = &Resource{
	Kind: "certificate_authority", Path: "/certificate_authorities", ListKey: "certificate_authorities", Prefix: "ca", Ops: AllOps,
	New:       func() Document { return new(CertificateAuthority) },
	NewCreate: func() Creator { return new(CertificateAuthorityCreate) },
	NewUpdate: func() Updater { return new(CertificateAuthorityUpdate) },
}

// SSHCertificateAuthorities is /ssh_certificate_authorities. A CA that still has certificates
// cannot be deleted.
var SSHCertificateAuthorities = &Resource{
	Kind: "ssh_certificate_authority", Path: "/ssh_certificate_authorities", ListKey: "ssh_certificate_authorities", Prefix: "sshca", Ops: AllOps,
	New:       func() Document { return new(SSHCertificateAuthority) },
	NewCreate: func() Creator { return new(SSHCertificateAuthorityCreate) },
	NewUpdate: func() Updater { return new(SSHCertificateAuthorityUpdate) },
	InUse:     sshCAInUse,
}

// SSHUserCertificates is /ssh_user_certificates.
var SSHUserCertificates = &Resource{
	Kind: "ssh_user_certificate", Path: "/ssh_user_certificates", ListKey: "ssh_user_certificates", Prefix: "sucrt", Ops: AllOps,
	New:       func() Document { return new(SSHUserCertificate) },
	NewCreate: func() Creator { return new(SSHUserCertificateCreate) },
	NewUpdate: func() Updater { return new(SSHUserCertificateUpdate) },
}

// SSHHostCertificates is /ssh_host_certificates.
var SSHHostCertificates = &Resource{
	Kind: "ssh_host_certificate", Path: "/ssh_host_certificates", ListKey: "ssh_host_certificates", Prefix: "shcrt", Ops: AllOps,
	New:       func() Document { return new(SSHHostCertificate) },
	NewCreate: func() Creator { return new(SSHHostCertificateCreate) },
	NewUpdate: func() Updater { return new(SSHHostCertificateUpdate) },
}

// Resources is the resource table, in the order the API documents them.
var Resources = []*Resource{APIKeys, Credentials, BotUsers, IPPolicies, IPPolicyRules,
	ReservedDomains, TLSCertificates, CertificateAuthorities, SSHCertificateAuthorities, SSHUserCertificates, SSHHostCertificates,
	ReservedAddrs, TunnelGroupBackends, StaticBackends, HTTPResponseBackends, FailoverBackends, WeightedBackends,
	TLSEdges, HTTPSEdges, HTTPSEdgeRoutes, TCPEdges}

// Principal id prefixes: users have no collection of their own.
const (
	UserPrefix    = "usr"
	AccountPrefix = "acct"
)

var pathByPrefix = func() map[string]string {
	m := map[string]string{}
	for _, r := range append(Resources, LiveResources...) {
		if r.Parent == nil {
			m[r.Prefix] = r.Path
		}
	}
	return m
}()

// PathOf returns the path of a top-level object from its id's prefix, for the uri of a Ref; ""
// when the prefix names no top-level collection.
func PathOf(id string) string {
	prefix, _, ok := strings.Cut(id, "_")
	if !ok {
		return ""
	}
	if p, ok := pathByPrefix[prefix]; ok {
		return p + "/" + id
	}
	return ""
}

// Edges.
var (
	TLSEdges = &Resource{
		Kind: "tls_edge", Path: "/edges/tls", ListKey: "tls_edges", Prefix: "edgtls", Ops: AllOps,
		New:       func() Document { return new(TLSEdge) },
		NewCreate: func() Creator { return new(TLSEdgeBody) },
		NewUpdate: func() Updater { return new(TLSEdgeBody) },
	}
	HTTPSEdges = &Resource{
		Kind: "https_edge", Path: "/edges/https", ListKey: "https_edges", Prefix: "edghts", Ops: AllOps,
		New:       func() Document { return new(HTTPSEdge) },
		NewCreate: func() Creator { return new(HTTPSEdgeBody) },
		NewUpdate: func() Updater { return new(HTTPSEdgeBody) },
	}
	TCPEdges = &Resource{
		Kind: "tcp_edge", Path: "/edges/tcp", ListKey: "tcp_edges", Prefix: "edgtcp", Ops: AllOps,
		New:       func() Document { return new(TCPEdge) },
		NewCreate: func() Creator { return new(TCPEdgeBody) },
		NewUpdate: func() Updater { return new(TCPEdgeBody) },
	}
	// HTTPSEdgeRoutes are nested under their edge and embedded in it when it is shown. Their list
	// (not in the compatible API, where the edge shows its routes) is served for convenience.
	HTTPSEdgeRoutes = &Resource{
		Kind: "https_edge_route", Path: "/edges/https/{edge_id}/routes", ListKey: "routes", Prefix: "edghtsrt",
		Parent: HTTPSEdges, Ops: AllOps,
		New:       func() Document { return new(HTTPSEdgeRoute) },
		NewCreate: func() Creator { return new(HTTPSEdgeRouteBody) },
		NewUpdate: func() Updater { return new(HTTPSEdgeRouteBody) },
	}
)

// Reserved addresses and backends.
var (
	ReservedAddrs = &Resource{
		Kind: "reserved_addr", Path: "/reserved_addrs", ListKey: "reserved_addrs", Prefix: "ra", Ops: AllOps,
		New:       func() Document { return new(ReservedAddr) },
		NewCreate: func() Creator { return new(ReservedAddrCreate) },
		NewUpdate: func() Updater { return new(ReservedAddrUpdate) },
		InUse:     addrInUse,
	}
	TunnelGroupBackends = &Resource{
		Kind: "tunnel_group_backend", Path: "/backends/tunnel_group", ListKey: "backends", Prefix: "bkdtg", Ops: AllOps,
		New:       func() Document { return new(TunnelGroupBackend) },
		NewCreate: func() Creator { return new(TunnelGroupBackendBody) },
		NewUpdate: func() Updater { return new(TunnelGroupBackendBody) },
		InUse:     backendInUse,
	}
	StaticBackends = &Resource{
		Kind: "static_backend", Path: "/backends/static", ListKey: "backends", Prefix: "bkdsa", Ops: AllOps,
		New:       func() Document { return new(StaticBackend) },
		NewCreate: func() Creator { return new(StaticBackendBody) },
		NewUpdate: func() Updater { return new(StaticBackendBody) },
		InUse:     backendInUse,
	}
	HTTPResponseBackends = &Resource{
		Kind: "http_response_backend", Path: "/backends/http_response", ListKey: "backends", Prefix: "bkdhr", Ops: AllOps,
		New:       func() Document { return new(HTTPResponseBackend) },
		NewCreate: func() Creator { return new(HTTPResponseBackendBody) },
		NewUpdate: func() Updater { return new(HTTPResponseBackendBody) },
		InUse:     backendInUse,
	}
	FailoverBackends = &Resource{
		Kind: "failover_backend", Path: "/backends/failover", ListKey: "backends", Prefix: "bkdfo", Ops: AllOps,
		New:       func() Document { return new(FailoverBackend) },
		NewCreate: func() Creator { return new(FailoverBackendBody) },
		NewUpdate: func() Updater { return new(FailoverBackendBody) },
		InUse:     backendInUse,
	}
	WeightedBackends = &Resource{
		Kind: "weighted_backend", Path: "/backends/weighted", ListKey: "backends", Prefix: "bkdwd", OldPrefix: "bkdwt", Ops: AllOps,
		New:       func() Document { return new(WeightedBackend) },
		NewCreate: func() Creator { return new(WeightedBackendBody) },
		NewUpdate: func() Updater { return new(WeightedBackendBody) },
		InUse:     backendInUse,
	}
)

// An HTTPS edge shows its routes; set here because the two entries refer to each other.
func init() { HTTPSEdges.Embeds = HTTPSEdgeRoutes }

func newReq[T any, PT interface {
	*T
	ModuleRequest
}]() func() ModuleRequest {
	return func() ModuleRequest { return PT(new(T)) }
}

// Modules is the module table: every module on every parent.
var Modules = []*Module{
	// TLS edges
	moduleOn(TLSEdges, newReq[EndpointBackendMutate](), func(e *TLSEdge) **EndpointBackend { return &e.Backend }),
	moduleOn(TLSEdges, newReq[EndpointIPPolicyMutate](), func(e *TLSEdge) **EndpointIPPolicy { return &e.IPRestriction }),
	moduleOn(TLSEdges, newReq[EndpointMutualTLSMutate](), func(e *TLSEdge) **EndpointMutualTLS { return &e.MutualTLS }),
	moduleOn(TLSEdges, newReq[EndpointTLSTerminationMutate](), func(e *TLSEdge) **EndpointTLSTermination { return &e.TLSTermination }),
	moduleOn(TLSEdges, newReq[EndpointTrafficPolicyMutate](), func(e *TLSEdge) **EndpointTrafficPolicy { return &e.TrafficPolicy }),
	// HTTPS edges
	moduleOn(HTTPSEdges, newReq[EndpointMutualTLSMutate](), func(e *HTTPSEdge) **EndpointMutualTLS { return &e.MutualTLS }),
	moduleOn(HTTPSEdges, newReq[EndpointTLSTerminationAtEdge](), func(e *HTTPSEdge) **EndpointTLSTermination { return &e.TLSTermination }),
	// TCP edges
	moduleOn(TCPEdges, newReq[EndpointBackendMutate](), func(e *TCPEdge) **EndpointBackend { return &e.Backend }),
	moduleOn(TCPEdges, newReq[EndpointIPPolicyMutate](), func(e *TCPEdge) **EndpointIPPolicy { return &e.IPRestriction }),
	moduleOn(TCPEdges, newReq[EndpointTrafficPolicyMutate](), func(e *TCPEdge) **EndpointTrafficPolicy { return &e.TrafficPolicy }),
	// HTTPS edge routes
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointBackendMutate](), func(r *HTTPSEdgeRoute) **EndpointBackend { return &r.Backend }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointIPPolicyMutate](), func(r *HTTPSEdgeRoute) **EndpointIPPolicy { return &r.IPRestriction }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointCircuitBreakerMutate](), func(r *HTTPSEdgeRoute) **EndpointCircuitBreaker { return &r.CircuitBreaker }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointToggleMutate](), func(r *HTTPSEdgeRoute) **EndpointToggle { return &r.Compression }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointHeadersMutate](), func(r *HTTPSEdgeRoute) **EndpointHeaders { return &r.RequestHeaders }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointHeadersMutate](), func(r *HTTPSEdgeRoute) **EndpointHeaders { return &r.ResponseHeaders }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointWebhookValidationMutate](), func(r *HTTPSEdgeRoute) **EndpointWebhookValidation { return &r.WebhookVerification }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointToggleMutate](), func(r *HTTPSEdgeRoute) **EndpointToggle { return &r.WebsocketTCPConverter }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointTrafficPolicyMutate](), func(r *HTTPSEdgeRoute) **EndpointTrafficPolicy { return &r.TrafficPolicy }),
	// HTTPS edge routes: the visitor-facing modules (route_auth.go and its neighbours)
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointOAuthMutate](), func(r *HTTPSEdgeRoute) **EndpointOAuth { return &r.OAuth }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointSAMLMutate](), func(r *HTTPSEdgeRoute) **EndpointSAML { return &r.SAML }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointOIDCMutate](), func(r *HTTPSEdgeRoute) **EndpointOIDC { return &r.OIDC }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointUserAgentFilterMutate](), func(r *HTTPSEdgeRoute) **EndpointUserAgentFilter { return &r.UserAgentFilter }),
	moduleOn(HTTPSEdgeRoutes, newReq[EndpointJWTValidationMutate](), func(r *HTTPSEdgeRoute) **EndpointJWTValidation { return &r.JWTValidation }),
	// Reserved domains: what can be detached (schema: DELETE only).
	deleteOnly(ReservedDomains, "certificate",
		func(d *ReservedDomain) bool { return d.Certificate != nil },
		func(d *ReservedDomain) { d.Certificate = nil }),
	deleteOnly(ReservedDomains, "certificate_management_policy",
		func(d *ReservedDomain) bool { return d.CertificateManagementPolicy != nil },
		func(d *ReservedDomain) { d.setPolicy(nil, time.Time{}) }),
}
