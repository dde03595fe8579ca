package plan

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestWebhookVerificationStage: a route's webhook_verification becomes a stage refusing
// unsigned requests (403 ERR_NGROK_3204), whatever the provider; a secret the provider cannot
// use fails the route closed naming the module.
func TestWebhookVerificationStage(t *testing.T) {
	route := func(provider, secret string) *Route {
		s := &Snapshot{Account: "acct_wh", Env: &Env{Outbound: http.DefaultClient}, HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_wh"}, Hostports: []string{"wh.example.com:443"}},
			Routes: []*ep.HTTPSEdgeRoute{{Meta: ep.Meta{ID: "edghtsrt_wh"}, MatchType: ep.MatchPathPrefix, Match: "/",
				WebhookVerification: &ep.EndpointWebhookValidation{Enabled: true, Provider: provider, Secret: secret}}}}}}
		return testLive.Build(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })).HTTPS[0].Routes[0]
	}
	for _, p := range []string{"GitHub", "mailgun", "contentful"} {
		rt := route(p, "secret")
		if rt.Unenforced != "" || rt.Handler == nil {
			t.Fatalf("%s: %+v", p, rt)
		}
		w := httptest.NewRecorder()
		rt.Handler.ServeHTTP(w, httptest.NewRequest("POST", "https://wh.example.com/", strings.NewReader("{}")))
		if w.Code != 403 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3204" {
			t.Errorf("%s: an unsigned request: %d %q", p, w.Code, w.Header().Get("ngrok-error-code"))
		}
	}
	if rt := route("sendgrid", "not a key"); !strings.Contains(rt.Unenforced, "webhook_verification") || !strings.Contains(rt.Unenforced, "public key") {
		t.Errorf("a SendGrid secret that is no key: %q", rt.Unenforced)
	}
}
