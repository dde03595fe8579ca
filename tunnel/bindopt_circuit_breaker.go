package tunnel

import (
	"encoding/json"
	"errors"

	"github.com/edgeplane/edgeplane/enforce"
)

// The circuit_breaker bind option ({"error_threshold":0.5}) carries only the threshold; the
// window, buckets, volume and tripped duration take the module's defaults. The breaker lives as
// long as the bind.
func init() {
	registerBindStage("circuit_breaker", func(raw json.RawMessage) (enforce.Stage, error) {
		var opt struct {
			ErrorThreshold float64 `json:"error_threshold"`
		}
		if err := json.Unmarshal(raw, &opt); err != nil {
			return nil, errors.New("the option is not an object with an error_threshold number")
		}
		return enforce.NewBreaker(enforce.BreakerConfig{Threshold: opt.ErrorThreshold})
	})
}
