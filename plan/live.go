package plan

import (
	"sync"
	"weak"

	"github.com/edgeplane/edgeplane/enforce"
)

// Live is the state of stages that outlives a plan: an account's plan is rebuilt on every change
// of its configuration and every 30 s, and state reset each time would be no state at all (a
// breaker that never trips, a rate limit that never fills), and compiling every traffic policy
// again on each rebuild would cost the data plane the time it should spend on traffic. It
// belongs to the instance that rebuilds plans (a Planner holds one), not to the package: two
// data planes in one process (tests, benchmarks) do not share breakers or limits.
type Live struct {
	// breakers are routes' circuit breakers (module_circuit_breaker.go), by the route and the
	// module's configuration: a rebuild with the same configuration reuses one, a changed
	// configuration starts a new one (closed, with an empty window).
	breakers *liveRegistry[breakerKey, enforce.Breaker]
	// limiters and policyBreakers are the rate limiters and breakers of routes' traffic
	// policies, by the route, the action's place in the document and its configuration: an
	// unchanged action of a route gets its state back, with its counts; a changed one starts
	// afresh.
	limiters       *liveRegistry[limiterKey, enforce.RateLimiter]
	policyBreakers *liveRegistry[limiterKey, enforce.Breaker]
	// policies are the compiled traffic policy stages (module_traffic_policy.go), costs the
	// estimates of their documents (policy_budget.go).
	policies *policyCache
	costs    *costCache
	// selectors are edges' terminate-tls rules (terminate_tls.go), by the edge and its document,
	// so that rebuilds do not compile them again.
	selectors *liveRegistry[selectorKey, TLSSelector]
}

// NewLive returns empty live state, for one data plane's plans.
func NewLive() *Live {
	return &Live{
		breakers:       newLiveRegistry[breakerKey, enforce.Breaker](),
		limiters:       newLiveRegistry[limiterKey, enforce.RateLimiter](),
		policyBreakers: newLiveRegistry[limiterKey, enforce.Breaker](),
		policies:       &policyCache{m: map[policyKey]policyEntry{}},
		costs:          &costCache{m: map[[32]byte]int{}},
		selectors:      newLiveRegistry[selectorKey, TLSSelector](),
	}
}

// liveRegistry keeps the state of stages that must survive the plan's rebuilds, by a key naming
// the route and the configuration. Entries are weak: state no plan uses any more is collected,
// and its entry pruned once the registry has doubled since it last pruned.
type liveRegistry[K comparable, V any] struct {
	mu     sync.Mutex
	m      map[K]weak.Pointer[V]
	pruned int // entries after the last pruning
}

func newLiveRegistry[K comparable, V any]() *liveRegistry[K, V] {
	return &liveRegistry[K, V]{m: map[K]weak.Pointer[V]{}}
}

// get returns the live state under k, or makes it (and keeps it under k).
func (r *liveRegistry[K, V]) get(k K, create func() (*V, error)) (*V, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= max(2*r.pruned, 64) {
		for k, p := range r.m {
			if p.Value() == nil {
				delete(r.m, k)
			}
		}
		r.pruned = len(r.m)
	}
	if v := r.m[k].Value(); v != nil {
		return v, nil
	}
	v, err := create()
	if err != nil {
		return nil, err
	}
	r.m[k] = weak.Make(v)
	return v, nil
}
