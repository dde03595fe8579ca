package tunnel

import (
	"encoding/json"

	"github.com/edgeplane/edgeplane/enforce"
)

// An agent's Compression option is an empty object: present, the endpoint's responses are
// compressed (enforce.Compression).
func init() {
	registerBindStage("compression", func(json.RawMessage) (enforce.Stage, error) {
		return enforce.NewCompression(), nil
	})
}
