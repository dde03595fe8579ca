package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// Module names a module of the data plane: its key in the module table (modules), so code
// that means a module names a constant the compiler checks rather than a string.
type Module uint8

// The data plane's modules, in the order an agent bind's stages run (authentication first).
// A route's stages run in the order of the API's module table (ep.Modules) instead.
const (
	ModCircuitBreaker Module = iota
	ModOAuth
	ModOIDC
	ModWebhookVerification
	ModUserAgentFilter
	ModRequestHeaders
	ModResponseHeaders
	ModCompression
	ModWebsocketTCPConverter
	ModMutualTLS
	ModTLSTermination
	ModPolicy
	ModTrafficPolicy
	ModSAML
	ModJWTValidation
	ModBackend
	ModIPRestriction
	numModules
)

// kind says where the data plane applies a module.
type kind uint8

const (
	// stage: a stage on the requests of a route or an http(s) bind, built by the entry's builders.
	stage kind = iota + 1
	// signIn: a stage that tells the upstream who signed in (ngrok-auth-* headers); turned off
	// on a route, it still removes a client's own ngrok-auth-* headers, which the upstream
	// trusts while it is on.
	signIn
	// structure: applied by Build to the plan's structure (the backend, connection filters,
	// the TLS policy), and on binds by tunnel's tlsSettings; it has no stage builder.
	structure
)

// RouteBuilder builds the stage of one route module from its configuration (the module's
// response shape, e.g. *ep.EndpointHeaders) and the route it is on. An error fails the route
// closed, naming the module.
type RouteBuilder func(cfg any, at RouteEnv) (enforce.Stage, error)

// BindBuilder builds the stage of a module asked for in an http(s) bind's options, from the
// option's JSON (the agents' protobuf-shaped objects: snake_case keys, []byte as base64). Its
// error refuses the bind with ERR_NGROK_301, or with the code of an *OptionRefusal.
type BindBuilder func(raw json.RawMessage, env BindEnv) (enforce.Stage, error)

// ConnBuilder builds the connection policy of a module asked for in the options of a tcp or
// tls bind: there is no HTTP request to act on, so the module decides on each public
// connection before any byte is carried (as it does on TCP and TLS edges).
type ConnBuilder func(raw json.RawMessage, env BindEnv) (*enforce.ConnPolicy, error)

// RouteEnv is what a route stage builder gets besides its module's configuration: the
// account's snapshot (its Env, SAML keys), the edge and the route the module is on, and the
// live state of the planner building it (state that outlives one plan).
type RouteEnv struct {
	*Snapshot
	Edge  *ep.HTTPSEdge
	Route *ep.HTTPSEdgeRoute
	live  *Live
}

// BindEnv is what a bind builder gets besides the option: the data plane's environment (the
// sign-in key, the outbound client, the managed OAuth applications; nil refuses the options
// needing them) and the bind's endpoint and policy log, for its traffic policy.
type BindEnv struct {
	Env *Env
	// Endpoint is what the bind's traffic policy reads as endpoint.* and names in its records;
	// the bind fills it in once its name is resolved, before it takes traffic.
	Endpoint *trafficpolicy.Endpoint
	// Log receives the records of the policy's log actions; nil refuses a policy with one.
	Log *enforce.PolicyLog
	// TerminateTLS is set for https and tls binds, whose listener applies the policy's
	// terminate-tls action (trafficpolicy.TerminateTLS); elsewhere the action is refused.
	TerminateTLS bool
}

// outbound is the environment's outbound client, nil without one.
func (e BindEnv) outbound() *http.Client {
	if e.Env == nil {
		return nil
	}
	return e.Env.Outbound
}

// OptionRefusal is a bind builder's error that carries its own refusal code: ngrok's code for
// that exact mistake (an unknown OAuth provider is 365), or ERR_NGROK_3208 for an option that
// is well formed but that this server cannot apply as given (say no managed OAuth
// application), so agents see the same code as for any other option edgeplane does not enforce.
type OptionRefusal struct {
	Code int
	Msg  string
}

func (e *OptionRefusal) Error() string { return e.Msg }

// RefusalCode is the code a bind builder's error refuses the bind with.
func RefusalCode(err error) int {
	var r *OptionRefusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ep.AgentCodeBadBind
}

// dataModule is a module's data-plane code, side by side: its name on the API, the bind
// options agents ask for it with, and its builders. Entries are written as unkeyed literals,
// so an entry missing a piece does not compile; a nil builder is a decision the table shows
// (the module has no such form, and asking for it there is refused by name).
type dataModule struct {
	name string
	kind kind
	// options are the bind options carrying the module, lowercased (Go agents and Rust ones
	// spell some differently); none when agents cannot ask for it.
	options []string
	// route builds its stage on a route; nil: not a route stage (structure, or bind-only).
	route RouteBuilder
	// bind builds its stage on an http(s) bind; nil: refused there (ERR_NGROK_3208).
	bind BindBuilder
	// conn builds its connection policy on a tcp or tls bind; nil: an HTTP module, refused
	// on those binds.
	conn ConnBuilder
}

// modules is the data plane's module table. Every module's builders are in its own file,
// module_<name>.go, with their tests beside them.
var modules = [...]dataModule{
	ModCircuitBreaker:        {"circuit_breaker", stage, []string{"circuitbreaker"}, routeCircuitBreaker, bindCircuitBreaker, nil},
	ModOAuth:                 {"oauth", signIn, []string{"oauth"}, routeOAuth, bindOAuth, nil},
	ModOIDC:                  {"oidc", signIn, []string{"oidc"}, routeOIDC, bindOIDC, nil},
	ModWebhookVerification:   {"webhook_verification", stage, []string{"webhookverification"}, routeWebhookVerification, bindWebhookVerification, nil},
	ModUserAgentFilter:       {"user_agent_filter", stage, []string{"useragentfilter"}, routeUserAgentFilter, bindUserAgentFilter, nil},
	ModRequestHeaders:        {"request_headers", stage, []string{"requestheaders"}, routeRequestHeaders, bindRequestHeaders, nil},
	ModResponseHeaders:       {"response_headers", stage, []string{"responseheaders"}, routeResponseHeaders, bindResponseHeaders, nil},
	ModCompression:           {"compression", stage, []string{"compression"}, routeCompression, bindCompression, nil},
	ModWebsocketTCPConverter: {"websocket_tcp_converter", stage, []string{"websockettcpconverter"}, routeWSTCP, bindWSTCP, nil},
	ModMutualTLS:             {"mutual_tls", structure, []string{"mutualtlsca", "mutualtlsatedge"}, nil, nil, nil},
	ModTLSTermination:        {"tls_termination", structure, []string{"tlstermination"}, nil, nil, nil},
	// The agents' legacy policy option: not applied, so refused by name.
	ModPolicy:        {"policy", stage, []string{"policy"}, nil, nil, nil},
	ModTrafficPolicy: {"traffic_policy", stage, []string{"trafficpolicy"}, routeTrafficPolicy, bindTrafficPolicy, connTrafficPolicy},
	ModSAML:          {"saml", signIn, nil, routeSAML, nil, nil},
	ModJWTValidation: {"jwt_validation", stage, nil, routeJWTValidation, nil, nil},
	ModBackend:       {"backend", structure, nil, nil, nil, nil},
	ModIPRestriction: {"ip_restriction", structure, nil, nil, nil, nil},
}

// A key added without its entry, or an entry without its key, does not compile: the table's
// length is the number of keys (an entry left out between two others is a zero entry, which
// byName refuses at start and TestModuleTable reports).
var (
	_ [len(modules) - int(numModules)]struct{}
	_ [int(numModules) - len(modules)]struct{}
)

// byName finds a module by its API name; the API's module table (ep.Modules) names modules by
// their JSON field, and this is where those names meet the keys, once.
var byName = sync.OnceValue(func() map[string]Module {
	m := make(map[string]Module, numModules)
	for i, d := range modules {
		if d.name == "" {
			panic(fmt.Sprintf("plan: module %d has no entry in the module table", i))
		}
		m[d.name] = Module(i)
	}
	return m
})

// ModuleNamed returns the module of an API name, and whether the data plane knows it.
func ModuleNamed(name string) (Module, bool) {
	m, ok := byName()[name]
	return m, ok
}

// String is the module's API name.
func (m Module) String() string { return modules[m].name }

// Structural reports whether the module is applied to the plan's (or a bind's endpoint's)
// structure rather than by a stage: the backend, IP restriction, mutual TLS, TLS termination.
func (m Module) Structural() bool { return modules[m].kind == structure }

// OnConnections reports whether the module acts on the connections of tcp and tls binds.
func (m Module) OnConnections() bool { return modules[m].conn != nil }

// OnBinds reports whether the module has a stage on http(s) binds.
func (m Module) OnBinds() bool { return modules[m].bind != nil }

// Bind builds the module's stage for an http(s) bind's option; it panics for a module without
// one (OnBinds says).
func (m Module) Bind(raw json.RawMessage, env BindEnv) (enforce.Stage, error) {
	return modules[m].bind(raw, env)
}

// BindConn builds the module's connection policy for a tcp or tls bind's option; it panics for
// a module without one (OnConnections says).
func (m Module) BindConn(raw json.RawMessage, env BindEnv) (*enforce.ConnPolicy, error) {
	return modules[m].conn(raw, env)
}

// BindOption is one bind option that carries a module.
type BindOption struct {
	Option string // lowercased
	Module Module
}

// BindOptions lists the bind options that carry modules, in the order their stages run.
var BindOptions = sync.OnceValue(func() []BindOption {
	var list []BindOption
	for i, d := range modules {
		for _, o := range d.options {
			list = append(list, BindOption{o, Module(i)})
		}
	}
	return list
})

// Enforced reports whether the data plane applies a module to traffic. Every other module the
// API accepts is refused on traffic: an edge or route with it enabled answers 503 naming it, so
// no module is ever carried as if it were not there.
func Enforced(name string) bool {
	m, ok := ModuleNamed(name)
	return ok && (modules[m].kind == structure || modules[m].route != nil)
}

// EnforcedOn is Enforced for a module of one collection: route stages act on routes only; the
// traffic_policy of TLS and TCP edges is applied by the edge's connection policy instead.
func EnforcedOn(res *ep.Resource, name string) bool {
	if (res == ep.TLSEdges || res == ep.TCPEdges) && name == ModTrafficPolicy.String() {
		return true // its on_tcp_connect phase: connPolicy
	}
	if res != ep.HTTPSEdgeRoutes {
		m, ok := ModuleNamed(name)
		return ok && modules[m].kind == structure
	}
	return Enforced(name)
}

// stagedModule is a route module with a stage, and its entry.
type stagedModule struct {
	m    *ep.Module
	data *dataModule
}

// stagedRouteModules lists the route modules with a stage in the API module table's order,
// made once: a rebuild walks it for every route (100,000 routes in the scale benchmark), where
// looking each module up by name cost a quarter of Build (BenchmarkBuild).
var stagedRouteModules = sync.OnceValue(func() []stagedModule {
	var list []stagedModule
	for _, m := range ep.ModulesOf(ep.HTTPSEdgeRoutes) {
		if k, ok := ModuleNamed(m.Name); ok && modules[k].route != nil {
			list = append(list, stagedModule{m, &modules[k]})
		}
	}
	return list
})

// routeStages builds the stages of a route's enabled modules, in the API module table's order.
func (b *builder) routeStages(e *ep.HTTPSEdge, r *ep.HTTPSEdgeRoute, rt *Route) error {
	for _, sm := range stagedRouteModules() {
		m := sm.m
		v := m.Get(r)
		if v == nil || !enabledModule(v) {
			if sm.data.kind == signIn && configuredModule(v) {
				if rt.Chain == nil {
					rt.Chain = &enforce.Chain{}
				}
				rt.Chain.HTTP = append(rt.Chain.HTTP, enforce.IdentityHeaderStrip{Module: m.Name})
			}
			continue
		}
		st, err := sm.data.route(v, RouteEnv{Snapshot: b.s, Edge: e, Route: r, live: b.live})
		if err != nil {
			return fmt.Errorf("%s (%w)", m.Name, err)
		}
		if rt.Chain == nil {
			rt.Chain = &enforce.Chain{}
		}
		rt.Chain.HTTP = append(rt.Chain.HTTP, st)
	}
	return nil
}

// configuredModule reports whether a route holds a module's configuration (enabled or not).
func configuredModule(v any) bool {
	if v == nil {
		return false
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() != reflect.Pointer || !rv.IsNil()
}
