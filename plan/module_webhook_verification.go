package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The webhook_verification route module: the provider's signature over the raw body, checked
// with the stored secret (SNS certificates fetched with the outbound client).
func routeWebhookVerification(cfg any, at RouteEnv) (enforce.Stage, error) {
	m, ok := cfg.(*ep.EndpointWebhookValidation)
	if !ok {
		return nil, fmt.Errorf("unexpected configuration %T", cfg)
	}
	var client *http.Client
	if at.Env != nil {
		client = at.Env.Outbound
	}
	return enforce.NewWebhookVerification(m.Provider, m.Secret, enforce.WebhookOptions{Client: client})
}

// The webhook_verification bind option (ngrok-go's WithWebhookVerification): provider and
// secret as the agent sends them. A sealed secret is encrypted for ngrok's own servers, so
// edgeplane cannot open it; a bind giving only that is refused. SNS certificates are fetched
// with the data plane's outbound client (its --outbound-ca and outbound guard), as the route
// module's are; without it, with the guard's own client trusting the system roots.
func bindWebhookVerification(raw json.RawMessage, env BindEnv) (enforce.Stage, error) {
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
	if env.Env != nil {
		opts.Client = env.Env.Outbound
	}
	return enforce.NewWebhookVerification(o.Provider, o.Secret, opts)
}
