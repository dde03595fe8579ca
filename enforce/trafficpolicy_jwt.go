package enforce

import (
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// errNoOutbound is why jwt-validation cannot be built without the data plane's outbound client.
var errNoOutbound = errors.New("jwt-validation needs the data plane's outbound HTTP client (trusting --outbound-ca) to fetch key sets, and an agent's own traffic policy has none: put the policy on an edge route, or use the route's jwt_validation module")

// The jwt-validation action checks the request as the jwt_validation module does (JWT: a token
// from the configured headers or body fields, signed with an allowed algorithm by a key of the
// key sets, from an allowed issuer for an allowed audience, within exp and nbf): a request
// without a token is answered 401 ERR_NGROK_3406, one whose tokens all fail 401 ERR_NGROK_3401,
// both with a Bearer WWW-Authenticate challenge; an admitted request goes on unchanged. Key sets
// are fetched with the stage's outbound client (PolicyOptions.Outbound), which the plan gives
// routes; without one (an agent's traffic policy) the stage's build fails naming why.
//
// When a rule reads actions, an admitted request records actions.ngrok.jwt_validation.tokens:
// the tokens checked, in the order of the configured locations up to the one that admitted it,
// each with its type, method and name (where it was found), verified, its JOSE header and
// claims (those of a token whose signature did not verify are left empty: they are nobody's
// word). A refused request runs no later rule, so error is never seen set.
//
// As with the module, one valid token admits the request. Values are taken as written: CEL
// interpolation in them fails the build naming the field.
func init() {
	registerRequestAction("jwt-validation", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.JWTValidationConfig)
		if tp.opts.Outbound == nil {
			return nil, fmt.Errorf("%s: %v", a.Path, errNoOutbound)
		}
		jc := JWTConfig{Algorithms: c.JWS.AllowedAlgorithms, JKUs: c.JWS.Keys.Sources.AdditionalJKUs, Client: tp.opts.Outbound, KeySets: tp.opts.KeySets}
		for _, v := range c.Issuer.AllowList {
			jc.Issuers = append(jc.Issuers, v.Value)
		}
		for _, v := range c.Audience.AllowList {
			jc.Audiences = append(jc.Audiences, v.Value)
		}
		for _, t := range c.HTTP.Tokens {
			jc.Tokens = append(jc.Tokens, JWTToken{Type: t.Type, Method: t.Method, Name: t.Name, Prefix: t.Prefix})
		}
		if err := noInterpolationIn(a, map[string][]string{"issuer.allow_list": jc.Issuers,
			"jws.keys.sources.additional_jkus": jc.JKUs, "http.tokens": tokenStrings(jc.Tokens)}); err != nil {
			return nil, err
		}
		j, err := NewJWT(jc)
		if err != nil {
			return nil, fmt.Errorf("%s.config: %v", a.Path, err)
		}
		results := tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			checked, ok := j.admit(w, r, results)
			if !ok {
				return nil
			}
			if results {
				trafficpolicy.SetResult(vars(), "jwt_validation", jwtResult(checked))
			}
			return r
		}, nil
	})
}

// tokenStrings are the names and prefixes of token locations, for the interpolation check.
func tokenStrings(ts []JWTToken) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name, t.Prefix)
	}
	return out
}

// noInterpolationIn refuses CEL interpolation in values edgeplane takes as written.
func noInterpolationIn(a *trafficpolicy.Action, fields map[string][]string) error {
	for field, values := range fields {
		for _, v := range values {
			if trafficpolicy.Interpolates(v) {
				return fmt.Errorf("%s.config.%s: CEL interpolation (${…}) is not applied here yet", a.Path, field)
			}
		}
	}
	return nil
}

// jwtResult is the jwt-validation action's result for the tokens it checked.
func jwtResult(checked []checkedToken) map[string]any {
	tokens := make([]any, 0, len(checked))
	for _, t := range checked {
		tokens = append(tokens, map[string]any{"type": t.loc.Type, "method": t.loc.Method, "name": t.loc.Name,
			"verified": t.err == nil, "header": t.header, "claims": t.claims})
	}
	return map[string]any{"tokens": tokens}
}

// jsonValue is a decoded JSON value as CEL compares it: a whole number is an int64 (claims
// such as exp and iat), other numbers stay float64, and lists and objects are converted through.
func jsonValue(v any) any {
	switch v := v.(type) {
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v)
		}
		return v
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonValue(e)
		}
		return out
	}
	return v
}
