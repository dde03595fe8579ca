package edgeplane

import "time"

// The edge and backend collections of the resource table, and the module table.

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
var Modules = append([]*Module{
	// TLS edges
	moduleOn(TLSEdges, "backend", newReq[EndpointBackendMutate](), func(e *TLSEdge) **EndpointBackend { return &e.Backend }),
	moduleOn(TLSEdges, "ip_restriction", newReq[EndpointIPPolicyMutate](), func(e *TLSEdge) **EndpointIPPolicy { return &e.IPRestriction }),
	moduleOn(TLSEdges, "mutual_tls", newReq[EndpointMutualTLSMutate](), func(e *TLSEdge) **EndpointMutualTLS { return &e.MutualTLS }),
	moduleOn(TLSEdges, "tls_termination", newReq[EndpointTLSTerminationMutate](), func(e *TLSEdge) **EndpointTLSTermination { return &e.TLSTermination }),
	moduleOn(TLSEdges, "traffic_policy", newReq[EndpointTrafficPolicyMutate](), func(e *TLSEdge) **EndpointTrafficPolicy { return &e.TrafficPolicy }),
	// HTTPS edges
	moduleOn(HTTPSEdges, "mutual_tls", newReq[EndpointMutualTLSMutate](), func(e *HTTPSEdge) **EndpointMutualTLS { return &e.MutualTLS }),
	moduleOn(HTTPSEdges, "tls_termination", newReq[EndpointTLSTerminationAtEdge](), func(e *HTTPSEdge) **EndpointTLSTermination { return &e.TLSTermination }),
	// TCP edges
	moduleOn(TCPEdges, "backend", newReq[EndpointBackendMutate](), func(e *TCPEdge) **EndpointBackend { return &e.Backend }),
	moduleOn(TCPEdges, "ip_restriction", newReq[EndpointIPPolicyMutate](), func(e *TCPEdge) **EndpointIPPolicy { return &e.IPRestriction }),
	moduleOn(TCPEdges, "traffic_policy", newReq[EndpointTrafficPolicyMutate](), func(e *TCPEdge) **EndpointTrafficPolicy { return &e.TrafficPolicy }),
	// HTTPS edge routes
	moduleOn(HTTPSEdgeRoutes, "backend", newReq[EndpointBackendMutate](), func(r *HTTPSEdgeRoute) **EndpointBackend { return &r.Backend }),
	moduleOn(HTTPSEdgeRoutes, "ip_restriction", newReq[EndpointIPPolicyMutate](), func(r *HTTPSEdgeRoute) **EndpointIPPolicy { return &r.IPRestriction }),
	moduleOn(HTTPSEdgeRoutes, "circuit_breaker", newReq[EndpointCircuitBreakerMutate](), func(r *HTTPSEdgeRoute) **EndpointCircuitBreaker { return &r.CircuitBreaker }),
	moduleOn(HTTPSEdgeRoutes, "compression", newReq[EndpointToggleMutate](), func(r *HTTPSEdgeRoute) **EndpointToggle { return &r.Compression }),
	moduleOn(HTTPSEdgeRoutes, "request_headers", newReq[EndpointHeadersMutate](), func(r *HTTPSEdgeRoute) **EndpointHeaders { return &r.RequestHeaders }),
	moduleOn(HTTPSEdgeRoutes, "response_headers", newReq[EndpointHeadersMutate](), func(r *HTTPSEdgeRoute) **EndpointHeaders { return &r.ResponseHeaders }),
	moduleOn(HTTPSEdgeRoutes, "webhook_verification", newReq[EndpointWebhookValidationMutate](), func(r *HTTPSEdgeRoute) **EndpointWebhookValidation { return &r.WebhookVerification }),
	moduleOn(HTTPSEdgeRoutes, "websocket_tcp_converter", newReq[EndpointToggleMutate](), func(r *HTTPSEdgeRoute) **EndpointToggle { return &r.WebsocketTCPConverter }),
	moduleOn(HTTPSEdgeRoutes, "traffic_policy", newReq[EndpointTrafficPolicyMutate](), func(r *HTTPSEdgeRoute) **EndpointTrafficPolicy { return &r.TrafficPolicy }),
	// Reserved domains: what can be detached (schema: DELETE only).
	deleteOnly(ReservedDomains, "certificate",
		func(d *ReservedDomain) bool { return d.Certificate != nil },
		func(d *ReservedDomain) { d.Certificate = nil }),
	deleteOnly(ReservedDomains, "certificate_management_policy",
		func(d *ReservedDomain) bool { return d.CertificateManagementPolicy != nil },
		func(d *ReservedDomain) { d.setPolicy(nil, time.Time{}) }),
}, routeAuthModules...)
