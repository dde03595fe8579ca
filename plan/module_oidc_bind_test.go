package plan

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// TestOIDCBindOption: the oidc bind option builds the sign-in stage from the agent's JSON, and
// is refused with a reason when it cannot work: no session key yet, a sealed secret only, an
// issuer that is not https, or JSON that is not an object.
func TestOIDCBindOption(t *testing.T) {
	var env BindEnv
	build := func(raw json.RawMessage) (enforce.Stage, error) { return bindOIDC(raw, env) }
	ok := json.RawMessage(`{"issuer_url":"https://idp.example","client_id":"c","client_secret":"s","allow_domains":["example.com"]}`)
	env = BindEnv{}
	if _, err := build(ok); err == nil || !strings.Contains(err.Error(), "session key") {
		t.Fatalf("without the environment: %v", err)
	}
	env = BindEnv{Env: &Env{SessionKey: make([]byte, 32), Outbound: http.DefaultClient}}
	if st, err := build(ok); err != nil || st.Name() != "oidc" {
		t.Fatalf("complete option: %v", err)
	}
	for raw, want := range map[string]string{
		`{"issuer_url":"https://idp.example","client_id":"c","sealed_client_secret":"AAEC"}`: "sealed",
		`{"issuer_url":"http://idp.example","client_id":"c","client_secret":"s"}`:            "https",
		`[1]`: "JSON object",
	} {
		if _, err := build(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	// A sealed secret only is an option this server cannot apply as given: 3208, as for oauth.
	_, err := build(json.RawMessage(`{"issuer_url":"https://idp.example","client_id":"c","sealed_client_secret":"AAEC"}`))
	if code := RefusalCode(err); code != ep.AgentCodeUnsupportedOpt {
		t.Errorf("a sealed secret only refuses with %d, want %d", code, ep.AgentCodeUnsupportedOpt)
	}
}
