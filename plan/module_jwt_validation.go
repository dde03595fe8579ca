package plan

import (
	"errors"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The jwt_validation module's keys come from its additional_jkus, fetched with the data plane's
// outbound client when a request first needs them and cached per URL in the data plane's
// KeySets while a plan uses them (so a plan rebuild does not fetch them again).
func routeJWTValidation(cfg any, s RouteEnv) (enforce.Stage, error) {
	m := cfg.(*ep.EndpointJWTValidation)
	if s.Env == nil || s.Env.Outbound == nil {
		return nil, errors.New("no outbound HTTP client to fetch signing keys with")
	}
	c := enforce.JWTConfig{Algorithms: m.JWS.AllowedAlgorithms, JKUs: m.JWS.Keys.Sources.AdditionalJKUs, Client: s.Env.Outbound, KeySets: s.Env.KeySets}
	for _, v := range m.Issuer.AllowList {
		c.Issuers = append(c.Issuers, v.Value)
	}
	for _, v := range m.Audience.AllowList {
		c.Audiences = append(c.Audiences, v.Value)
	}
	for _, t := range m.HTTP.Tokens {
		c.Tokens = append(c.Tokens, enforce.JWTToken{Type: t.Type, Method: t.Method, Name: t.Name, Prefix: t.Prefix})
	}
	return enforce.NewJWT(c)
}
