package plan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/enforce"
)

// TestWebhookVerificationBindOption: the option builds a stage for a provider; a sealed secret
// alone, an unknown provider, sns with a secret, a secret the provider cannot use and a
// malformed option are refused, naming why.
func TestWebhookVerificationBindOption(t *testing.T) {
	var env BindEnv
	build := func(raw json.RawMessage) (enforce.Stage, error) { return bindWebhookVerification(raw, env) }
	for _, raw := range []string{`{"provider":"github","secret":"s"}`, `{"provider":"mailgun","secret":"s"}`} {
		if st, err := build(json.RawMessage(raw)); err != nil || st.Name() != "webhook_verification" {
			t.Errorf("%s: %v", raw, err)
		}
	}
	for raw, want := range map[string]string{
		`{"provider":"github","sealed_secret":"AAEC"}`: "sealed secret",
		`{"provider":"vmware","secret":"s"}`:           "username",
		`{"provider":"nosuch","secret":"s"}`:           "not a webhook provider",
		`{"provider":"sns","secret":"s"}`:              "sns takes no secret",
		`{"provider":"github"}`:                        "needs a secret",
		`[1]`:                                          "not a JSON object",
	} {
		if _, err := build(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
