package plan

import "github.com/edgeplane/edgeplane/enforce"

// The compression module has nothing to configure: enabled, it is an enforce.Compression stage.
func init() {
	registerRouteStage("compression", func(any, *Snapshot) (enforce.Stage, error) {
		return enforce.NewCompression(), nil
	})
}
