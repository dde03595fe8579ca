package tunnel

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
)

// TestOAuthBindRefusalCode: chain refuses the bind with the builder's own code, naming the
// module, and an http bind with a working option gets the oauth stage.
func TestOAuthBindRefusalCode(t *testing.T) {
	o := bindOpts{env: plan.BindEnv{Env: &plan.Env{SessionKey: make([]byte, 32), Outbound: http.DefaultClient}}}
	_, _, be := o.chain("https", json.RawMessage(`{"OAuth":{"provider":"github"}}`))
	if be == nil || be.code != ep.AgentCodeUnsupportedOpt || !strings.HasPrefix(be.msg, "oauth: ") || !strings.Contains(be.msg, "--oauth-app") {
		t.Fatalf("no managed application: %+v", be)
	}
	c, _, be := o.chain("https", json.RawMessage(`{"OAuth":{"provider":"github","client_id":"c","client_secret":"s"}}`))
	if be != nil || c == nil || len(c.HTTP) != 1 || c.HTTP[0].Name() != "oauth" {
		t.Fatalf("own application: %+v %+v", c, be)
	}
	if _, _, be := o.chain("tcp", json.RawMessage(`{"OAuth":{"provider":"github","client_id":"c","client_secret":"s"}}`)); be == nil || be.code != ep.AgentCodeBadBind {
		t.Fatalf("oauth on a tcp bind: %+v", be)
	}
}
