package plan

import (
	"encoding/json"

	"github.com/edgeplane/edgeplane/enforce"
)

// The compression module has nothing to configure: enabled on a route, or present as an
// agent's Compression option (an empty object), the endpoint's responses are compressed by an
// enforce.Compression stage.
func routeCompression(any, RouteEnv) (enforce.Stage, error) { return enforce.NewCompression(), nil }

func bindCompression(json.RawMessage, BindEnv) (enforce.Stage, error) {
	return enforce.NewCompression(), nil
}
