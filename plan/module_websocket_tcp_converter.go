package plan

import (
	"encoding/json"

	"github.com/edgeplane/edgeplane/enforce"
)

// The websocket_tcp_converter module has nothing to configure beyond enabled (on a bind, an
// empty object): its stage marks websocket requests, and the final handler carries them as raw
// streams to the route's backend or the agent.
func routeWSTCP(any, RouteEnv) (enforce.Stage, error) { return enforce.NewWSTCP(), nil }

func bindWSTCP(json.RawMessage, BindEnv) (enforce.Stage, error) { return enforce.NewWSTCP(), nil }
