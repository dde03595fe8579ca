package plan

import (
	"fmt"
	"net/http"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The webhook_verification route module: the provider's signature over the raw body, checked
// with the stored secret (SNS certificates fetched with the outbound client).
func init() {
	registerRouteStage("webhook_verification", func(cfg any, s *Snapshot) (enforce.Stage, error) {
		m, ok := cfg.(*ep.EndpointWebhookValidation)
		if !ok {
			return nil, fmt.Errorf("unexpected configuration %T", cfg)
		}
		var client *http.Client
		if s.Env != nil {
			client = s.Env.Outbound
		}
		return enforce.NewWebhookVerification(m.Provider, m.Secret, enforce.WebhookOptions{Client: client})
	})
}
