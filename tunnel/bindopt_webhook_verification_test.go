package tunnel

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWebhookVerificationBindOption: the option builds a stage for a provider edgeplane
// verifies; a sealed secret alone, an unimplemented provider, an unknown one, sns with a
// secret and a malformed option are refused, naming why.
func TestWebhookVerificationBindOption(t *testing.T) {
	build := bindStages["webhook_verification"]
	if st, err := build(json.RawMessage(`{"provider":"github","secret":"s"}`)); err != nil || st.Name() != "webhook_verification" {
		t.Errorf("github: %v", err)
	}
	for raw, want := range map[string]string{
		`{"provider":"github","sealed_secret":"AAEC"}`: "sealed secret",
		`{"provider":"mailgun","secret":"s"}`:          "cannot verify webhooks from mailgun",
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
