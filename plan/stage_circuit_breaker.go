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
// configuration starts a new breaker (closed, with an empty window). Entries are weak: a breaker
// no plan uses any more is collected, and its entry pruned.
var breakers = struct {
	sync.Mutex
	m map[breakerKey]weak.Pointer[enforce.Breaker]
}{m: map[breakerKey]weak.Pointer[enforce.Breaker]{}}

type breakerKey struct {
	account, route string
	cfg            ep.EndpointCircuitBreaker
}

func init() {
	registerRouteStage("circuit_breaker", func(cfg any, s *Snapshot) (enforce.Stage, error) {
		m := cfg.(*ep.EndpointCircuitBreaker)
		key := breakerKey{account: s.Account, route: routeOf(s, m), cfg: *m}
		breakers.Lock()
		defer breakers.Unlock()
		for k, p := range breakers.m {
			if p.Value() == nil {
				delete(breakers.m, k)
			}
		}
		if key.route != "" {
			if b := breakers.m[key].Value(); b != nil {
				return b, nil
			}
		}
		b, err := enforce.NewBreaker(enforce.BreakerConfig{
			Tripped:   time.Duration(m.TrippedDuration) * time.Second,
			Window:    time.Duration(m.RollingWindow) * time.Second,
			Buckets:   int(m.NumBuckets),
			Volume:    int(m.VolumeThreshold),
			Threshold: m.ErrorThresholdPercentage,
		})
		if err != nil {
			return nil, err
		}
		if key.route != "" {
			breakers.m[key] = weak.Make(b)
		}
		return b, nil
	})
}

// routeOf finds the id of the route whose circuit_breaker module is m (the builder hands a
// stage only its module's configuration, which the snapshot's route holds by pointer).
func routeOf(s *Snapshot, m *ep.EndpointCircuitBreaker) string {
	for _, e := range s.HTTPSEdges {
		for _, r := range e.Routes {
			if r.CircuitBreaker == m {
				return r.ID
			}
		}
	}
	return ""
}
