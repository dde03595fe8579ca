package tunnel

import (
	"encoding/json"
	"errors"

	"github.com/edgeplane/edgeplane/enforce"
)

// The webhook_verification bind option (ngrok-go's WithWebhookVerification): provider and
// secret as the agent sends them. A sealed secret is encrypted for ngrok's own servers, so
// edgeplane cannot open it; a bind giving only that is refused. SNS certificates are fetched
// with the data plane's outbound client (its --outbound-ca and outbound guard), as the route
// module's are; without it, with the guard's own client trusting the system roots.
func init() {
	registerBindStage("webhook_verification", func(raw json.RawMessage) (enforce.Stage, error) {
		var o struct {
			Provider     string `json:"provider"`
			Secret       string `json:"secret"`
			SealedSecret []byte `json:"sealed_secret"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, errors.New("the option is not a JSON object")
		}
		if o.Secret == "" && len(o.SealedSecret) > 0 {
			return nil, errors.New("only a sealed secret was given; sealed secrets are encrypted for ngrok's servers and edgeplane cannot open them, so give the secret itself")
		}
		if o.Provider == "sns" && o.Secret != "" {
			return nil, errors.New("sns takes no secret: its messages are verified by their signing certificate")
		}
		var opts enforce.WebhookOptions
		if env := signInEnv.Load(); env != nil {
			opts.Client = env.Outbound
		}
		return enforce.NewWebhookVerification(o.Provider, o.Secret, opts)
	})
}
