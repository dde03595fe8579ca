package tunnel

import (
	"encoding/json"
	"fmt"

	"github.com/edgeplane/edgeplane/enforce"
)

// An agent's UserAgentFilter option, {"allow": [regexps], "deny": [regexps]}, becomes an
// enforce.UserAgentFilter; a rule that does not compile refuses the bind, naming it.
func init() {
	registerBindStage("user_agent_filter", func(raw json.RawMessage) (enforce.Stage, error) {
		var o struct {
			Allow []string `json:"allow"`
			Deny  []string `json:"deny"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("the option is not {\"allow\": [regexps], \"deny\": [regexps]}: %v", err)
		}
		return enforce.NewUserAgentFilter(o.Allow, o.Deny)
	})
}
