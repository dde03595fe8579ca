package enforce

import (
	"fmt"
	"net/http"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The verify-webhook action checks the request as the webhook_verification module does
// (WebhookVerification: the provider's signature over the raw body with the secret, timestamps
// within the provider's tolerance): a request that fails is answered 403 ERR_NGROK_3204 naming
// why (413 for a body over MaxWebhookBody), and a verified one goes on with its body intact. With
// enforce: false every request goes on unchecked (ngrok then only records the result, in
// action result variables edgeplane does not have).
//
// The secret is taken as written: CEL interpolation in it is not evaluated, so a secret with
// ${…} fails the stage's build naming it, as does an unknown provider or a secret the
// provider's scheme cannot use.
func init() {
	registerRequestAction("verify-webhook", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.VerifyWebhookConfig)
		if trafficpolicy.Interpolates(c.Secret) {
			return nil, fmt.Errorf("%s.config.secret: CEL interpolation (${…}) in the secret is not applied yet", a.Path)
		}
		v, err := NewWebhookVerification(c.Provider, c.Secret, WebhookOptions{Client: tp.opts.Outbound})
		if err != nil {
			return nil, fmt.Errorf("%s.config: %v", a.Path, err)
		}
		if c.Enforce != nil && !*c.Enforce {
			return func(_ http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request { return r }, nil
		}
		results := tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			if !v.Verify(w, r) {
				return nil
			}
			if results {
				trafficpolicy.SetResult(vars(), "verify_webhook", map[string]any{"verified": true})
			}
			return r
		}, nil
	})
}
