package plan

import (
	"sync"
	"weak"

	"github.com/edgeplane/edgeplane/enforce"
)

// breakers keeps routes' circuit breakers across rebuilds of the plan (module_circuit_breaker.go);
// the traffic policy's rate limiters and breakers are kept the same way
// (module_traffic_policy.go).
var breakers = newLiveRegistry[breakerKey, enforce.Breaker]()

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
