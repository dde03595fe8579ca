package plan

import "github.com/edgeplane/edgeplane/enforce"

// The websocket_tcp_converter module has nothing to configure beyond enabled: its stage marks
// websocket requests, and the final handler carries them as raw streams to the route's backend.
func init() {
	registerRouteStage("websocket_tcp_converter", func(any, *Snapshot) (enforce.Stage, error) {
		return enforce.NewWSTCP(), nil
	})
}
