package plan

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"weak"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The traffic_policy module of a route becomes an enforce.TrafficPolicy stage: the document is
// parsed and its expressions compiled in the plan build, never per request. A document the API
// would now refuse, or one using what edgeplane does not apply (an action such as saml, which
// ngrok marks coming soon), fails the route closed naming it. The stage gets the data plane's
// outbound client (jwt-validation's key sets, verify-webhook's SNS certificates), and its
// rate-limit actions keep their counts across rebuilds in the planner's live state (Live),
// keyed by the route, the action's place in the document and its configuration.
func routeTrafficPolicy(cfg any, at RouteEnv) (enforce.Stage, error) {
	s := at.Snapshot
	m := cfg.(*ep.EndpointTrafficPolicy)
	k := policyKey{sum: sha256.Sum256([]byte(m.Value))}
	// The edge's handshake applies the routes' terminate-tls (httpsEdgeTLSSelector).
	opts := enforce.PolicyOptions{TerminateTLS: true}
	if s.Env != nil && s.Env.Outbound != nil {
		opts.Outbound, k.outbound = s.Env.Outbound, true
		opts.SignIn = &enforce.SignInOptions{SessionKey: s.Env.SessionKey, OAuthApps: s.Env.OAuthApps, OAuthEndpoints: s.Env.OAuthEndpoints}
	}
	if s.Env != nil {
		opts.WAF, opts.KeySets, opts.OIDCProviders = s.Env.WAF, s.Env.KeySets, s.Env.OIDCProviders
	}
	use := policyUse{sum: k.sum}
	// A document that may hold state of its route's own (rate limits, a circuit breaker),
	// records naming its route (log) or read its endpoint (a cheap test of its text) is
	// built for its route only.
	if perRoute(m.Value) {
		e, route := at.Edge, at.Route.ID
		k.account, k.route, use.route = s.Account, route, route
		opts.Limiter = func(key string, create func() *enforce.RateLimiter) *enforce.RateLimiter {
			l, _ := at.live.limiters.get(limiterKey{account: s.Account, route: route, action: key},
				func() (*enforce.RateLimiter, error) { return create(), nil })
			return l
		}
		opts.Breaker = func(key string, create func() *enforce.Breaker) *enforce.Breaker {
			b, _ := at.live.policyBreakers.get(limiterKey{account: s.Account, route: route, action: key},
				func() (*enforce.Breaker, error) { return create(), nil })
			return b
		}
		opts.Endpoint = edgeEndpoint(s.Account, e.ID, "https", e.Hostports)
		opts.Endpoint.Route = route
		if s.Env != nil {
			opts.Log, opts.Internal = s.Env.PolicyLog, s.Env.Internal
		}
	}
	if s.refusedPolicies[use] {
		return nil, at.live.costs.overBudget(k.sum, m.Value)
	}
	tp, err := at.live.policies.route(k, func() (*enforce.TrafficPolicy, error) {
		p, err := ep.ParseTrafficPolicy(m.Value)
		if err != nil {
			return nil, err
		}
		return enforce.NewTrafficPolicyWith(p, opts)
	})
	if err != nil {
		return nil, err
	}
	return tp, nil
}

type limiterKey struct {
	account, route string
	action         string // the action's path in the document and its configuration
}

// perRoute reports whether a document's stage is its route's (or edge's) own
// (ep.PolicyPerObject): the API's budget check keys documents the same way.
func perRoute(doc string) bool { return ep.PolicyPerObject(doc) }

// edgeEndpoint is what the endpoint.* variables of an edge's policy read: the edge's id, and
// the URL of its first hostport that is not a wildcard.
func edgeEndpoint(account, id, proto string, hostports []string) *trafficpolicy.Endpoint {
	e := &trafficpolicy.Endpoint{ID: id, Protocol: proto, Account: account}
	for _, hp := range hostports {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || strings.Contains(host, "*") {
			continue
		}
		e.Host = host
		e.Port, _ = strconv.Atoi(port)
		e.URL = proto + "://" + host
		if proto == "tcp" {
			e.URL = "tcp://" + hp
		}
		break
	}
	return e
}

// connPolicyUse is the use a TLS or TCP edge's document makes: shared by the account's edges
// with that document, unless it is built for its edge (perRoute).
func connPolicyUse(edgeID, doc string) policyUse {
	u := policyUse{conn: true, sum: sha256.Sum256([]byte(doc))}
	if perRoute(doc) {
		u.route = edgeID
	}
	return u
}

// connPolicy builds the on_tcp_connect phase of a TLS or TCP edge's traffic_policy; a document
// with what edgeplane does not apply there, or over the account's budget, fails the edge closed,
// naming it. terminateTLS is set for TLS edges, whose listener applies terminate-tls
// (edgeTLSSelector).
func (b *builder) connPolicy(e *Edge, proto string, hostports []string, m *ep.EndpointTrafficPolicy, terminateTLS bool) {
	if m == nil || !m.Enabled || e.Unenforced != "" {
		return
	}
	use := connPolicyUse(e.ID, m.Value)
	if b.s.refusedPolicies[use] {
		e.Unenforced = fmt.Sprintf("traffic_policy (%v)", b.live.costs.overBudget(use.sum, m.Value))
		return
	}
	// Only a document with terminate-tls is built apart for TLS edges: the others are the same
	// stage on TLS and TCP edges.
	terminateTLS = terminateTLS && strings.Contains(m.Value, "terminate-tls")
	k := policyKey{conn: true, sum: use.sum, terminateTLS: terminateTLS}
	opts := enforce.PolicyOptions{TerminateTLS: terminateTLS}
	if use.route != "" {
		k.account, k.route = b.s.Account, e.ID
		opts.Endpoint = edgeEndpoint(b.s.Account, e.ID, proto, hostports)
		if b.s.Env != nil {
			opts.Log, opts.Internal = b.s.Env.PolicyLog, b.s.Env.Internal
		}
	}
	cp, err := b.live.policies.conn(k, func() (*enforce.ConnPolicy, error) {
		p, err := ep.ParseTrafficPolicy(m.Value)
		if err != nil {
			return nil, err
		}
		return enforce.NewConnPolicyWith(p, opts)
	})
	if err != nil {
		e.Unenforced = fmt.Sprintf("traffic_policy (%v)", err)
		return
	}
	e.Policy = cp
}

// policyCache keeps the stage built for each document, so the periodic rebuilds of the plan do
// not parse and compile the same documents again: a stage without rate limits holds no
// per-route state and may serve every route (or edge) with that document; one with rate limits
// is kept per route. Documents are keyed by their SHA-256.
//
// The cache holds its stages weakly: a stage is kept while a routing plan uses it, and collected
// with the last plan that did. A compiled stage is many times its document (a 64 KiB document
// of CEL expressions compiles to about 1.2 MiB), and the cache used to keep every stage it had
// built until it held 32 MiB of documents: an account replacing one edge's policy 100 times
// left 118 MiB of stages no plan used. Documents that do not compile are kept with their error
// (a few hundred bytes each) so that rebuilds do not compile them again; the cache forgets
// everything once it holds maxCachedPolicies entries that are alive.
const maxCachedPolicies = 4096

type policyKey struct {
	conn bool // the on_tcp_connect stage of a TLS or TCP edge, not a route's
	sum  [sha256.Size]byte
	// outbound is whether the stage was built with the outbound client (jwt-validation needs it).
	outbound bool
	// account and route are set for a route's document with rate limits (state of its own).
	account, route string
	// terminateTLS is set for a TLS edge's stage, where terminate-tls is applied.
	terminateTLS bool
}

// policyEntry is a built stage, held weakly (one of the two, by the key's conn), or the error
// its document gave.
type policyEntry struct {
	route weak.Pointer[enforce.TrafficPolicy]
	conn  weak.Pointer[enforce.ConnPolicy]
	err   error
}

// alive reports whether the entry still answers: an error, or a stage some plan still holds.
func (e policyEntry) alive() bool {
	return e.err != nil || e.route.Value() != nil || e.conn.Value() != nil
}

type policyCache struct {
	mu     sync.Mutex
	m      map[policyKey]policyEntry
	pruned int // entries after the last pruning
}

// route returns the route stage under k, building it the first time (or once no plan holds it).
func (c *policyCache) route(k policyKey, build func() (*enforce.TrafficPolicy, error)) (*enforce.TrafficPolicy, error) {
	if e, ok := c.lookup(k); ok {
		if e.err != nil {
			return nil, e.err
		}
		if st := e.route.Value(); st != nil {
			return st, nil
		}
	}
	st, err := build()
	e := policyEntry{err: err}
	if err == nil {
		e.route = weak.Make(st)
	}
	c.store(k, e)
	return st, err
}

// conn returns the connection stage under k, building it the first time (or once no plan holds
// it).
func (c *policyCache) conn(k policyKey, build func() (*enforce.ConnPolicy, error)) (*enforce.ConnPolicy, error) {
	if e, ok := c.lookup(k); ok {
		if e.err != nil {
			return nil, e.err
		}
		if st := e.conn.Value(); st != nil {
			return st, nil
		}
	}
	st, err := build()
	e := policyEntry{err: err}
	if err == nil {
		e.conn = weak.Make(st)
	}
	c.store(k, e)
	return st, err
}

func (c *policyCache) lookup(k policyKey) (policyEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	return e, ok
}

// store keeps e under k. Entries whose stages were collected are pruned once the map has doubled
// since the last pruning; if those alive still reach maxCachedPolicies, all are forgotten.
func (c *policyCache) store(k policyKey, e policyEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= max(2*c.pruned, 64) {
		for k, old := range c.m {
			if !old.alive() {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCachedPolicies {
			clear(c.m)
		}
		c.pruned = len(c.m)
	}
	c.m[k] = e
}

// An agent's TrafficPolicy option (a JSON or YAML document, as a string) becomes the same stage
// a route's traffic_policy module does: checked as the API checks it, expressions compiled
// once at bind time, and refused (naming what) when it uses what edgeplane does not apply yet.
// On tcp and tls endpoints it becomes the connection policy a TCP or TLS edge's module does:
// its on_tcp_connect rules decide on each public connection before any byte reaches the agent,
// and a document with HTTP phases is refused naming the phase (ngrok's TCP and TLS endpoints
// have none).
//
// The policy's stage gets the bind's environment: its endpoint (endpoint.* and the log
// records' account and endpoint), the data plane's policy log (log) and its outbound client
// (http-request, jwt-validation's key sets, verify-webhook's SNS certificates). Its state
// (rate limits, a circuit breaker) lives as long as the bind.
func bindTrafficPolicy(raw json.RawMessage, env BindEnv) (enforce.Stage, error) {
	p, err := bindPolicy(raw)
	if err != nil {
		return nil, err
	}
	st, err := enforce.NewTrafficPolicyWith(p, env.options())
	if errors.Is(err, trafficpolicy.ErrOtherProtocol) {
		return nil, err // ngrok refuses it too: nothing edgeplane lacks
	}
	if err != nil {
		return nil, fmt.Errorf("%v (edgeplane does not apply it to traffic yet)", err)
	}
	return st, nil
}

func connTrafficPolicy(raw json.RawMessage, env BindEnv) (*enforce.ConnPolicy, error) {
	p, err := bindPolicy(raw)
	if err != nil {
		return nil, err
	}
	return enforce.NewConnPolicyWith(p, env.options())
}

// options are the policy options of the bind's environment.
func (e BindEnv) options() enforce.PolicyOptions {
	o := enforce.PolicyOptions{Endpoint: e.Endpoint, Log: e.Log, Outbound: e.outbound(), TerminateTLS: e.TerminateTLS}
	if e.Env != nil {
		o.WAF, o.KeySets, o.OIDCProviders = e.Env.WAF, e.Env.KeySets, e.Env.OIDCProviders
		o.Internal = e.Env.Internal
		o.SignIn = &enforce.SignInOptions{SessionKey: e.Env.SessionKey, OAuthApps: e.Env.OAuthApps, OAuthEndpoints: e.Env.OAuthEndpoints}
	}
	return o
}

// ParseBindPolicy parses an agent's TrafficPolicy option as the bind's stages do (checked as
// the API checks it), for what the listener takes from it (terminate-tls).
func ParseBindPolicy(raw json.RawMessage) (*trafficpolicy.Policy, error) { return bindPolicy(raw) }

// bindPolicy parses the option's document after checking it as the API does.
func bindPolicy(raw json.RawMessage) (*trafficpolicy.Policy, error) {
	var doc string
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, errors.New("the traffic policy is not a string holding a JSON or YAML document")
	}
	if err := ep.ValidatePolicyDocument(doc); err != nil {
		return nil, err
	}
	return ep.ParseTrafficPolicy(doc)
}
