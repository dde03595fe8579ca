package tunnel

import (
	"encoding/json"

	"github.com/edgeplane/edgeplane/enforce"
)

// The websocket_tcp_converter bind option is an empty object ({}): the endpoint's websocket
// requests reach the agent as raw byte streams.
func init() {
	registerBindStage("websocket_tcp_converter", func(json.RawMessage) (enforce.Stage, error) {
		return enforce.NewWSTCP(), nil
	})
}
