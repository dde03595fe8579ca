package tunnel

import (
	"encoding/json"
	"errors"
	"fmt"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// An agent's TrafficPolicy option (a JSON or YAML document, as a string) becomes the same stage
// a route's traffic_policy module does: checked as the API checks it, expressions compiled
// once at bind time, and refused (naming what) when it uses what edgeplane does not apply yet.
// On tcp and tls endpoints it is refused: their on_tcp_connect phase is not applied to binds
// yet (tunnel/opts.go refuses HTTP stages there).
func init() {
	registerBindStage("traffic_policy", func(raw json.RawMessage) (enforce.Stage, error) {
		var doc string
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, errors.New("the traffic policy is not a string holding a JSON or YAML document")
		}
		if err := ep.ValidatePolicyDocument(doc); err != nil {
			return nil, err
		}
		p, err := ep.ParseTrafficPolicy(doc)
		if err != nil {
			return nil, err
		}
		st, err := enforce.NewTrafficPolicy(p)
		if err != nil {
			return nil, fmt.Errorf("%v (edgeplane does not apply it to traffic yet)", err)
		}
		return st, nil
	})
}
