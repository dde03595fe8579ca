package plan

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The traffic_policy module of a route becomes an enforce.TrafficPolicy stage: the document is
// parsed and its expressions compiled in the plan build, never per request. A document the API
// would now refuse, or one using what edgeplane does not apply yet (an action such as
// owasp-crs-request), fails the route closed naming it. The stage gets the data plane's
// outbound client (jwt-validation's key sets, verify-webhook's SNS certificates), and its
// rate-limit actions keep their counts across rebuilds in the limiters registry, keyed by the
// route, the action's place in the document and its configuration.
func init() {
	registerRouteStage("traffic_policy", func(cfg any, s *Snapshot) (enforce.Stage, error) {
		m := cfg.(*ep.EndpointTrafficPolicy)
		k := policyKey{sum: sha256.Sum256([]byte(m.Value))}
		var opts enforce.PolicyOptions
		if s.Env != nil && s.Env.Outbound != nil {
			opts.Outbound, k.outbound = s.Env.Outbound, true
		}
		// A document that may hold rate limits (a cheap test of its text) has state of its
		// route's own: its stage serves that route only.
		if strings.Contains(m.Value, "rate-limit") {
			if route := routeOf(s, func(r *ep.HTTPSEdgeRoute) bool { return r.TrafficPolicy == m }); route != "" {
				k.account, k.route = s.Account, route
				opts.Limiter = func(key string, create func() *enforce.RateLimiter) *enforce.RateLimiter {
					l, _ := limiters.get(limiterKey{account: s.Account, route: route, action: key},
						func() (*enforce.RateLimiter, error) { return create(), nil })
					return l
				}
			}
		}
		st, err := policyStages.get(k, len(m.Value), func() policyBuilt {
			p, err := ep.ParseTrafficPolicy(m.Value)
			if err != nil {
				return policyBuilt{err: err}
			}
			tp, err := enforce.NewTrafficPolicyWith(p, opts)
			return policyBuilt{stage: tp, err: err}
		})
		if err != nil {
			return nil, err
		}
		return st.(*enforce.TrafficPolicy), nil
	})
}

// limiters keeps the rate limiters of routes' traffic policies across rebuilds of the plan (as
// breakers does for circuit breakers): an unchanged rate-limit action of a route gets its
// limiter back, with its counts; a changed one starts afresh.
var limiters = newLiveRegistry[limiterKey, enforce.RateLimiter]()

type limiterKey struct {
	account, route string
	action         string // the action's path in the document and its configuration
}

// connPolicy builds the on_tcp_connect phase of a TLS or TCP edge's traffic_policy; a document
// with what edgeplane does not apply there fails the edge closed, naming it.
func connPolicy(e *Edge, m *ep.EndpointTrafficPolicy) {
	if m == nil || !m.Enabled || e.Unenforced != "" {
		return
	}
	st, err := policyStages.get(policyKey{conn: true, sum: sha256.Sum256([]byte(m.Value))}, len(m.Value), func() policyBuilt {
		p, err := ep.ParseTrafficPolicy(m.Value)
		if err != nil {
			return policyBuilt{err: err}
		}
		cp, err := enforce.NewConnPolicy(p)
		return policyBuilt{stage: cp, err: err}
	})
	if err != nil {
		e.Unenforced = fmt.Sprintf("traffic_policy (%v)", err)
		return
	}
	e.Policy = st.(*enforce.ConnPolicy)
}

// policyStages keeps the stage built for each document, so the periodic rebuilds of the plan do
// not parse and compile the same documents again: a stage without rate limits holds no
// per-route state and may serve every route (or edge) with that document; one with rate limits
// is kept per route. Documents are keyed by their SHA-256; the cache forgets everything once it
// holds maxCachedPolicies documents or maxCachedPolicyBytes of them, so what it keeps beyond
// the live plan stays bounded (rate limiters outlive a forgetting, in limiters).
var policyStages = &policyCache{m: map[policyKey]policyBuilt{}}

const (
	maxCachedPolicies    = 4096
	maxCachedPolicyBytes = 32 << 20
)

type policyKey struct {
	conn bool // the on_tcp_connect stage of a TLS or TCP edge, not a route's
	sum  [sha256.Size]byte
	// outbound is whether the stage was built with the outbound client (jwt-validation needs it).
	outbound bool
	// account and route are set for a route's document with rate limits (state of its own).
	account, route string
}

type policyBuilt struct {
	stage any // *enforce.TrafficPolicy or *enforce.ConnPolicy
	err   error
}

type policyCache struct {
	mu    sync.Mutex
	m     map[policyKey]policyBuilt
	bytes int
}

// get returns the stage under k (a document of size bytes), building it the first time.
func (c *policyCache) get(k policyKey, size int, build func() policyBuilt) (any, error) {
	c.mu.Lock()
	b, ok := c.m[k]
	c.mu.Unlock()
	if !ok {
		b = build()
		c.mu.Lock()
		if len(c.m) >= maxCachedPolicies || c.bytes+size > maxCachedPolicyBytes {
			clear(c.m)
			c.bytes = 0
		}
		c.m[k] = b
		c.bytes += size
		c.mu.Unlock()
	}
	return b.stage, b.err
}
