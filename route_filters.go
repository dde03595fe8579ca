package edgeplane

import (
	"regexp"
	"slices"
	"strings"
)

// --- user_agent_filter -------------------------------------------------------------------------

// EndpointUserAgentFilter allows or denies requests by User-Agent, with regular expressions
// (schema "EndpointUserAgentFilter").
type EndpointUserAgentFilter struct {
	Enabled bool     `json:"enabled"`
	Allow   []string `json:"allow"`
	Deny    []string `json:"deny"`
}

// EndpointUserAgentFilterMutate is the request shape of EndpointUserAgentFilter.
type EndpointUserAgentFilterMutate struct {
	Enabled *bool    `json:"enabled"`
	Allow   []string `json:"allow"`
	Deny    []string `json:"deny"`
}

// Validate requires every entry to compile as a Go (RE2) regular expression, the syntax the
// compatible service documents for this module.
func (m *EndpointUserAgentFilterMutate) Validate() error {
	for _, l := range []struct {
		field   string
		entries []string
	}{{"allow", m.Allow}, {"deny", m.Deny}} {
		if err := maxEntries(CodeInvalid, l.field, len(l.entries), MaxUserAgentRegexes); err != nil {
			return err
		}
		for i, re := range l.entries {
			if _, err := regexp.Compile(re); err != nil {
				return Invalid(CodeInvalid, indexed(l.field, i), "%q is not a valid regular expression: %v", re, err)
			}
		}
	}
	return nil
}

// Build returns the module with [] for lists not given.
func (m *EndpointUserAgentFilterMutate) Build(*Op) (any, error) {
	return &EndpointUserAgentFilter{Enabled: enabled(m.Enabled), Allow: emptyIfNil(m.Allow), Deny: emptyIfNil(m.Deny)}, nil
}

// --- jwt_validation ----------------------------------------------------------------------------

// JWT validation values: token types and locations of the spec, and the JWS algorithms of RFC
// 7518 section 3.1 plus EdDSA (RFC 8037). "none" is refused: it would accept unsigned tokens.
var (
	JWTTokenTypes   = []string{"jwt", "at+jwt", "it+jwt"}
	JWTTokenMethods = []string{"header", "body"}
	JWSAlgorithms   = []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}
)

// Defaults of a token location: a JWT in a header, the most common place.
const (
	defaultJWTTokenType   = "jwt"
	defaultJWTTokenMethod = "header"
)

// EndpointJWTValidation checks the JSON Web Tokens of requests (spec "EndpointJWTValidation";
// not in the published schema). Responses show every part, with [] for empty lists. The same
// shape is the request; absent parts and lists mean empty.
type EndpointJWTValidation struct {
	Enabled  bool         `json:"enabled"`
	Issuer   JWTAllowList `json:"issuer"`
	Audience JWTAllowList `json:"audience"`
	HTTP     JWTHTTP      `json:"http"`
	JWS      JWTJWS       `json:"jws"`
}

// JWTAllowList lists the accepted values of a claim.
type JWTAllowList struct {
	AllowList []JWTValue `json:"allow_list"`
}

// JWTValue is one accepted value.
type JWTValue struct {
	Value string `json:"value"`
}

// JWTHTTP says where in a request the token is.
type JWTHTTP struct {
	Tokens []JWTTokenLocation `json:"tokens"`
}

// JWTTokenLocation is one place to look for a token: a header or body field called name, whose
// value starts with prefix (stripped before parsing, e.g. "Bearer ").
type JWTTokenLocation struct {
	Type   string `json:"type"`
	Method string `json:"method"`
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
}

// JWTJWS holds the accepted signature algorithms and where the signing keys come from.
type JWTJWS struct {
	AllowedAlgorithms []string `json:"allowed_algorithms"`
	Keys              JWTKeys  `json:"keys"`
}

// JWTKeys are the signing keys' sources.
type JWTKeys struct {
	Sources JWTKeySources `json:"sources"`
}

// JWTKeySources lists JWKS URLs to fetch keys from, besides the issuer's own.
type JWTKeySources struct {
	AdditionalJKUs []string `json:"additional_jkus"`
}

// EndpointJWTValidationMutate is the request shape of EndpointJWTValidation. Its parts are
// values, not pointers: a part given as null or left out is the same as an empty one.
type EndpointJWTValidationMutate struct {
	Enabled  *bool        `json:"enabled"`
	Issuer   JWTAllowList `json:"issuer"`
	Audience JWTAllowList `json:"audience"`
	HTTP     JWTHTTP      `json:"http"`
	JWS      JWTJWS       `json:"jws"`
}

// Validate checks each part: issuers are absolute URLs, audiences non-empty, token locations
// of a known type and method with a name (a valid header name for headers), algorithms from the
// JOSE list, and key sources absolute https URLs (keys fetched in the clear could be swapped).
func (m *EndpointJWTValidationMutate) Validate() error {
	for i, v := range m.Issuer.AllowList {
		if err := absoluteURL(indexed("issuer.allow_list", i)+".value", v.Value, "https", "http"); err != nil {
			return err
		}
	}
	for i, v := range m.Audience.AllowList {
		if strings.TrimSpace(v.Value) == "" {
			return Invalid(CodeInvalid, indexed("audience.allow_list", i)+".value", "must not be empty")
		}
	}
	for i, t := range m.HTTP.Tokens {
		f := indexed("http.tokens", i)
		if t.Type != "" && !slices.Contains(JWTTokenTypes, t.Type) {
			return Invalid(CodeInvalid, f+".type", "must be one of %s, got %q", strings.Join(JWTTokenTypes, ", "), t.Type)
		}
		if t.Method != "" && !slices.Contains(JWTTokenMethods, t.Method) {
			return Invalid(CodeInvalid, f+".method", "must be \"header\" or \"body\", got %q", t.Method)
		}
		if t.Name == "" {
			return Invalid(CodeInvalid, f+".name", "is required: the header or body field that holds the token")
		}
		if (t.Method == "" || t.Method == "header") && !validHeaderName(t.Name) {
			return Invalid(CodeInvalid, f+".name", "%q is not a valid HTTP header name", t.Name)
		}
	}
	for i, a := range m.JWS.AllowedAlgorithms {
		if strings.EqualFold(a, "none") {
			return Invalid(CodeInvalid, indexed("jws.allowed_algorithms", i), "\"none\" is not allowed: it would accept unsigned tokens")
		}
		if !slices.Contains(JWSAlgorithms, a) {
			return Invalid(CodeInvalid, indexed("jws.allowed_algorithms", i), "%q is not a JWS algorithm; use one of %s (case-sensitive)", a, strings.Join(JWSAlgorithms, ", "))
		}
	}
	for i, u := range m.JWS.Keys.Sources.AdditionalJKUs {
		if err := absoluteURL(indexed("jws.keys.sources.additional_jkus", i), u, "https"); err != nil {
			return err
		}
	}
	return nil
}

// Build echoes the configuration with [] for empty lists and the defaults of token locations.
func (m *EndpointJWTValidationMutate) Build(*Op) (any, error) {
	tokens := make([]JWTTokenLocation, len(m.HTTP.Tokens))
	for i, t := range m.HTTP.Tokens {
		if t.Type == "" {
			t.Type = defaultJWTTokenType
		}
		if t.Method == "" {
			t.Method = defaultJWTTokenMethod
		}
		tokens[i] = t
	}
	return &EndpointJWTValidation{
		Enabled:  enabled(m.Enabled),
		Issuer:   JWTAllowList{AllowList: emptyIfNil(m.Issuer.AllowList)},
		Audience: JWTAllowList{AllowList: emptyIfNil(m.Audience.AllowList)},
		HTTP:     JWTHTTP{Tokens: tokens},
		JWS: JWTJWS{AllowedAlgorithms: emptyIfNil(m.JWS.AllowedAlgorithms),
			Keys: JWTKeys{Sources: JWTKeySources{AdditionalJKUs: emptyIfNil(m.JWS.Keys.Sources.AdditionalJKUs)}}},
	}, nil
}
