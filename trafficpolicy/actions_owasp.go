package trafficpolicy

import "slices"

// OWASPCRSConfig is the configuration of owasp-crs-request and owasp-crs-response, as ngrok
// documents it: whether a block (or an error of the engine) halts the policy or lets the request
// go on with the decision recorded, whether the body is inspected as well as the headers, and
// the Core Rule Set rules left out of the evaluation (to silence a false positive). The anomaly
// thresholds and the paranoia level are not settings: ngrok fixes them at the Core Rule Set's
// defaults (inbound 5, outbound 4, paranoia level 1), and so does edgeplane.
type OWASPCRSConfig struct {
	OnError        string `json:"on_error"`
	ProcessBody    bool   `json:"process_body"`
	ExcludeRuleIDs []int  `json:"exclude_rule_ids"`
}

// The range of rule ids exclude_rule_ids takes: ngrok's, the Core Rule Set's own ids.
const (
	MinCRSRuleID = 900000
	MaxCRSRuleID = 999999
	// maxExcludedRules bounds the list so that a document cannot make every request carry
	// an arbitrarily long list (the Core Rule Set has fewer than 1,000 rules).
	maxExcludedRules = 1000
)

// Halts reports whether a blocked request or an error of the engine stops the policy
// (on_error: halt, the default) rather than letting the request go on.
func (c *OWASPCRSConfig) Halts() bool { return c.OnError != "continue" }

func init() {
	implemented["owasp-crs-request"] = decodeOWASPCRS
	implemented["owasp-crs-response"] = decodeOWASPCRS
}

func decodeOWASPCRS(a *Action) (any, error) {
	c := &OWASPCRSConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if c.OnError != "" && c.OnError != "continue" && c.OnError != "halt" {
		return nil, errorf(p+".on_error", "must be continue or halt, got %q", c.OnError)
	}
	if len(c.ExcludeRuleIDs) > maxExcludedRules {
		return nil, errorf(p+".exclude_rule_ids", "at most %d rule ids, got %d", maxExcludedRules, len(c.ExcludeRuleIDs))
	}
	for _, id := range c.ExcludeRuleIDs {
		if id < MinCRSRuleID || id > MaxCRSRuleID {
			return nil, errorf(p+".exclude_rule_ids", "%d is not a Core Rule Set rule id (%d to %d)", id, MinCRSRuleID, MaxCRSRuleID)
		}
	}
	slices.Sort(c.ExcludeRuleIDs)
	c.ExcludeRuleIDs = slices.Compact(c.ExcludeRuleIDs)
	return c, nil
}
