package plan

import (
	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The user_agent_filter module becomes an enforce.UserAgentFilter stage. The API refuses rules
// that do not compile; one stored otherwise fails the route closed.
func init() {
	registerRouteStage("user_agent_filter", func(cfg any, _ *Snapshot) (enforce.Stage, error) {
		m := cfg.(*ep.EndpointUserAgentFilter)
		return enforce.NewUserAgentFilter(m.Allow, m.Deny)
	})
}
