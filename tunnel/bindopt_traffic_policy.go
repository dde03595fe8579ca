package tunnel

import (
	"encoding/json"
	"errors"
	"fmt"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// An agent's TrafficPolicy option (a JSON or YAML document, as a string) becomes the same stage
// a route's traffic_policy module does: checked as the API checks it, expressions compiled
// once at bind time, and refused (naming what) when it uses what edgeplane does not apply yet.
// On tcp and tls endpoints it becomes the connection policy a TCP or TLS edge's module does:
// its on_tcp_connect rules decide on each public connection before any byte reaches the agent,
// and a document with HTTP phases is refused naming the phase (ngrok's TCP and TLS endpoints
// have none).
//
// The policy's stage gets the bind's environment: its endpoint (endpoint.* and the log
// records' account and endpoint), the data plane's policy log (log) and its outbound client
// (http-request, jwt-validation's key sets, verify-webhook's SNS certificates). Its state
// (rate limits, a circuit breaker) lives as long as the bind.
func init() {
	bindPolicyStage = func(raw json.RawMessage, env bindEnv) (enforce.Stage, error) {
		p, err := bindPolicy(raw)
		if err != nil {
			return nil, err
		}
		st, err := enforce.NewTrafficPolicyWith(p, env.options())
		if err != nil {
			return nil, fmt.Errorf("%v (edgeplane does not apply it to traffic yet)", err)
		}
		return st, nil
	}
	bindPolicyConn = func(raw json.RawMessage, env bindEnv) (*enforce.ConnPolicy, error) {
		p, err := bindPolicy(raw)
		if err != nil {
			return nil, err
		}
		return enforce.NewConnPolicyWith(p, env.options())
	}
	registerBindStage("traffic_policy", func(raw json.RawMessage) (enforce.Stage, error) { return bindPolicyStage(raw, bindEnv{}) })
}

// options are the policy options of the bind's environment; the outbound client is the
// sign-in options' when the bind has none of its own.
func (e bindEnv) options() enforce.PolicyOptions {
	o := enforce.PolicyOptions{Endpoint: e.endpoint, Log: e.log, Outbound: e.outbound, Internal: e.internal, TerminateTLS: e.terminateTLS}
	if env := signInEnv.Load(); env != nil {
		if o.Outbound == nil {
			o.Outbound = env.Outbound
		}
		o.SignIn = &enforce.SignInOptions{SessionKey: env.SessionKey, OAuthApps: env.OAuthApps, OAuthEndpoints: env.OAuthEndpoints}
	}
	return o
}

// bindPolicy parses the option's document after checking it as the API does.
func bindPolicy(raw json.RawMessage) (*trafficpolicy.Policy, error) {
	var doc string
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, errors.New("the traffic policy is not a string holding a JSON or YAML document")
	}
	if err := ep.ValidatePolicyDocument(doc); err != nil {
		return nil, err
	}
	return ep.ParseTrafficPolicy(doc)
}
