package plan

import (
	"sync"
	"time"
	"weak"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// A breaker's window and state must outlive the plan it was built in: an account's plan is
// rebuilt on every change of its configuration and every 30 s, and a breaker reset each time
// would never trip. So a route's breaker is kept in a registry keyed by the route and the
// module's configuration: a rebuild with the same configuration reuses it, a changed
// configuration starts a new breaker (closed, with an empty window). The traffic policy's rate
// limiters are kept the same way (stage_traffic_policy.go).
var breakers = newLiveRegistry[breakerKey, enforce.Breaker]()

type breakerKey struct {
	account, route string
	cfg            ep.EndpointCircuitBreaker
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

func init() {
	registerRouteStage("circuit_breaker", func(cfg any, s *Snapshot) (enforce.Stage, error) {
		m := cfg.(*ep.EndpointCircuitBreaker)
		newBreaker := func() (*enforce.Breaker, error) {
			return enforce.NewBreaker(enforce.BreakerConfig{
				Tripped:   time.Duration(m.TrippedDuration) * time.Second,
				Window:    time.Duration(m.RollingWindow) * time.Second,
				Buckets:   int(m.NumBuckets),
				Volume:    int(m.VolumeThreshold),
				Threshold: m.ErrorThresholdPercentage,
			})
		}
		route := routeOf(s, func(r *ep.HTTPSEdgeRoute) bool { return r.CircuitBreaker == m })
		if route == "" {
			return newBreaker()
		}
		return breakers.get(breakerKey{account: s.Account, route: route, cfg: *m}, newBreaker)
	})
}

// routeOf finds the id of the snapshot's route that matches: the one holding a module's
// configuration (the builder hands a stage only its module's configuration, which the
// snapshot's route holds by pointer). It is "" when no route matches.
func routeOf(s *Snapshot, matches func(*ep.HTTPSEdgeRoute) bool) string {
	for _, e := range s.HTTPSEdges {
		for _, r := range e.Routes {
			if matches(r) {
				return r.ID
			}
		}
	}
	return ""
}
