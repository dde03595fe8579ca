package plan

import (
	"encoding/json"
	"errors"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// A route's circuit breaker: its window and state must outlive the plan it was built in (an
// account's plan is rebuilt on every change of its configuration and every 30 s, and a breaker
// reset each time would never trip), so it is kept in the planner's live state keyed by the route and
// the module's configuration: a rebuild with the same configuration reuses it, a changed
// configuration starts a new breaker (closed, with an empty window).
func routeCircuitBreaker(cfg any, at RouteEnv) (enforce.Stage, error) {
	m := cfg.(*ep.EndpointCircuitBreaker)
	return at.live.breakers.get(breakerKey{account: at.Account, route: at.Route.ID, cfg: *m}, func() (*enforce.Breaker, error) {
		return enforce.NewBreaker(enforce.BreakerConfig{
			Tripped:   time.Duration(m.TrippedDuration) * time.Second,
			Window:    time.Duration(m.RollingWindow) * time.Second,
			Buckets:   int(m.NumBuckets),
			Volume:    int(m.VolumeThreshold),
			Threshold: m.ErrorThresholdPercentage,
		})
	})
}

type breakerKey struct {
	account, route string
	cfg            ep.EndpointCircuitBreaker
}

// The circuit_breaker bind option ({"error_threshold":0.5}) carries only the threshold; the
// window, buckets, volume and tripped duration take the module's defaults. The breaker lives as
// long as the bind.
func bindCircuitBreaker(raw json.RawMessage, _ BindEnv) (enforce.Stage, error) {
	var opt struct {
		ErrorThreshold float64 `json:"error_threshold"`
	}
	if err := json.Unmarshal(raw, &opt); err != nil {
		return nil, errors.New("the option is not an object with an error_threshold number")
	}
	return enforce.NewBreaker(enforce.BreakerConfig{Threshold: opt.ErrorThreshold})
}
