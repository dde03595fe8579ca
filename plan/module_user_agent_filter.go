package plan

import (
	"encoding/json"
	"fmt"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The user_agent_filter module becomes an enforce.UserAgentFilter stage. The API refuses rules
// that do not compile; one stored otherwise fails the route closed.
func routeUserAgentFilter(cfg any, _ RouteEnv) (enforce.Stage, error) {
	m := cfg.(*ep.EndpointUserAgentFilter)
	return enforce.NewUserAgentFilter(m.Allow, m.Deny)
}

// An agent's UserAgentFilter option, {"allow": [regexps], "deny": [regexps]}, becomes the same
// stage; a rule that does not compile refuses the bind, naming it.
func bindUserAgentFilter(raw json.RawMessage, _ BindEnv) (enforce.Stage, error) {
	var o struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("the option is not {\"allow\": [regexps], \"deny\": [regexps]}: %v", err)
	}
	return enforce.NewUserAgentFilter(o.Allow, o.Deny)
}
