package trafficpolicy

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The configurations of rate-limit, compress-response, verify-webhook and jwt-validation, as
// ngrok documents them. Parse checks what ngrok checks (required fields, enumerations, ranges,
// expressions that compile); what edgeplane cannot apply of a valid configuration (a
// compression algorithm it has no encoder for, CEL interpolation in a secret) is left to the
// data plane's stage, which fails the route closed naming it.
type (
	// RateLimitConfig is rate-limit's: at most Capacity requests of one bucket reach the
	// upstream in any window of Rate (a sliding window); the bucket is the values of the
	// BucketKey expressions. Enforce false counts without refusing.
	RateLimitConfig struct {
		Name      string   `json:"name"`
		Enforce   *bool    `json:"enforce"`
		Algorithm string   `json:"algorithm"`
		Capacity  int64    `json:"capacity"`
		Rate      string   `json:"rate"`
		BucketKey []string `json:"bucket_key"`
	}
	// CompressResponseConfig is compress-response's: the codings the response may be
	// compressed with (every coding edgeplane has when empty).
	CompressResponseConfig struct {
		Algorithms []string `json:"algorithms"`
	}
	// VerifyWebhookConfig is verify-webhook's: the provider whose signature the request must
	// carry, made with Secret. Enforce false lets a request that fails verification go on.
	VerifyWebhookConfig struct {
		Provider string `json:"provider"`
		Secret   string `json:"secret"`
		Enforce  *bool  `json:"enforce"`
	}
	// JWTValidationConfig is jwt-validation's: where tokens are, who may issue them and for
	// whom, and the algorithms and key sets their signatures are checked with.
	JWTValidationConfig struct {
		Issuer   JWTAllowList `json:"issuer"`
		Audience JWTAllowList `json:"audience"`
		HTTP     struct {
			Tokens []JWTTokenConfig `json:"tokens"`
		} `json:"http"`
		JWS struct {
			AllowedAlgorithms []string `json:"allowed_algorithms"`
			Keys              struct {
				Sources struct {
					AdditionalJKUs []string `json:"additional_jkus"`
				} `json:"sources"`
				// Identification names the claims that pick a key (only kid, which edgeplane
				// uses whenever a token carries it).
				Identification any `json:"identification"`
			} `json:"keys"`
		} `json:"jws"`
	}
	// JWTAllowList is the allowed values of a claim.
	JWTAllowList struct {
		AllowList []struct {
			Value string `json:"value"`
		} `json:"allow_list"`
	}
	// JWTTokenConfig is one place a token is: a header or body field Name, Prefix stripped.
	JWTTokenConfig struct {
		Type   string `json:"type"`
		Method string `json:"method"`
		Name   string `json:"name"`
		Prefix string `json:"prefix"`
	}
)

// Limits of rate-limit's configuration. ngrok takes rates from 60s to 24h in multiples of ten
// seconds; edgeplane also takes shorter whole-second rates (down to one second), so a document
// ngrok accepts is accepted here and tests need not wait a minute.
const (
	MaxRateLimitCapacity = 2_000_000_000
	MinRateLimitRate     = time.Second
	MaxRateLimitRate     = 24 * time.Hour
	maxBucketKeys        = 10
	maxRateLimitName     = 1024
)

// CompressionAlgorithms are the codings ngrok's compress-response knows.
var CompressionAlgorithms = []string{"br", "compress", "deflate", "gzip"}

// jwtTokenTypes are the token types ngrok's jwt-validation knows.
var jwtTokenTypes = []string{"id_token", "access_token", "at+jwt", "it+jwt", "plain", "jwt"}

func init() {
	implemented["rate-limit"] = decodeRateLimit
	implemented["compress-response"] = decodeCompressResponse
	implemented["verify-webhook"] = decodeVerifyWebhook
	implemented["jwt-validation"] = decodeJWTValidation
}

func decodeRateLimit(a *Action) (any, error) {
	c := &RateLimitConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	switch {
	case c.Name == "":
		return nil, errorf(p+".name", "is required")
	case len(c.Name) >= maxRateLimitName:
		return nil, errorf(p+".name", "must be less than %d characters", maxRateLimitName)
	case c.Algorithm != "sliding_window":
		return nil, errorf(p+".algorithm", "must be sliding_window, got %q", c.Algorithm)
	case c.Capacity < 1 || c.Capacity > MaxRateLimitCapacity:
		return nil, errorf(p+".capacity", "must be from 1 to %d, got %d", MaxRateLimitCapacity, c.Capacity)
	case len(c.BucketKey) == 0:
		return nil, errorf(p+".bucket_key", "at least one bucket key is required")
	case len(c.BucketKey) > maxBucketKeys:
		return nil, errorf(p+".bucket_key", "at most %d bucket keys, got %d", maxBucketKeys, len(c.BucketKey))
	}
	if _, err := c.Window(); err != nil {
		return nil, errorf(p+".rate", "%v", err)
	}
	for i, k := range c.BucketKey {
		if _, err := CompileValue(a.Phase, k); err != nil {
			return nil, errorf(fmt.Sprintf("%s.bucket_key[%d]", p, i), "%v", err)
		}
	}
	return c, nil
}

// Window is the rate as a duration: whole seconds from MinRateLimitRate to MaxRateLimitRate.
func (c *RateLimitConfig) Window() (time.Duration, error) {
	d, err := time.ParseDuration(c.Rate)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 60s or 10m", c.Rate)
	}
	if d < MinRateLimitRate || d > MaxRateLimitRate || d%time.Second != 0 {
		return 0, fmt.Errorf("%q must be whole seconds from %s to %s", c.Rate, MinRateLimitRate, MaxRateLimitRate)
	}
	return d, nil
}

// Enforced reports whether requests over the limit are refused (enforce defaults to true).
func (c *RateLimitConfig) Enforced() bool { return c.Enforce == nil || *c.Enforce }

// CompileValue compiles a value that is a CEL expression (a rate-limit bucket key): a bare
// expression such as conn.client_ip, or text with ${…} interpolations.
func CompileValue(phase, s string) (*Template, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("an empty expression")
	}
	if Interpolates(s) {
		return CompileTemplate(phase, s)
	}
	return CompileTemplate(phase, "${"+s+"}")
}

func decodeCompressResponse(a *Action) (any, error) {
	c := &CompressResponseConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, alg := range c.Algorithms {
		if !slices.Contains(CompressionAlgorithms, alg) {
			return nil, errorf(a.Path+".config.algorithms", "%q is not a compression algorithm (%s)", alg, strings.Join(CompressionAlgorithms, ", "))
		}
		if seen[alg] {
			return nil, errorf(a.Path+".config.algorithms", "%q is listed twice", alg)
		}
		seen[alg] = true
	}
	return c, nil
}

func decodeVerifyWebhook(a *Action) (any, error) {
	c := &VerifyWebhookConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	if c.Provider == "" {
		return nil, errorf(a.Path+".config.provider", "is required")
	}
	if c.Secret == "" && !strings.EqualFold(c.Provider, "sns") {
		return nil, errorf(a.Path+".config.secret", "is required")
	}
	return c, nil
}

func decodeJWTValidation(a *Action) (any, error) {
	c := &JWTValidationConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if len(c.Issuer.AllowList) == 0 {
		return nil, errorf(p+".issuer.allow_list", "at least one issuer is required")
	}
	for i, v := range c.Issuer.AllowList {
		if v.Value == "" {
			return nil, errorf(fmt.Sprintf("%s.issuer.allow_list[%d].value", p, i), "is required")
		}
	}
	for i, v := range c.Audience.AllowList {
		if v.Value == "" {
			return nil, errorf(fmt.Sprintf("%s.audience.allow_list[%d].value", p, i), "is required")
		}
	}
	if len(c.HTTP.Tokens) == 0 {
		return nil, errorf(p+".http.tokens", "at least one token is required")
	}
	for i, t := range c.HTTP.Tokens {
		tp := fmt.Sprintf("%s.http.tokens[%d]", p, i)
		switch {
		case !slices.Contains(jwtTokenTypes, t.Type):
			return nil, errorf(tp+".type", "must be one of %s, got %q", strings.Join(jwtTokenTypes, ", "), t.Type)
		case t.Method != "header" && t.Method != "body":
			return nil, errorf(tp+".method", "must be header or body, got %q", t.Method)
		case t.Name == "":
			return nil, errorf(tp+".name", "is required")
		}
	}
	if len(c.JWS.AllowedAlgorithms) == 0 {
		return nil, errorf(p+".jws.allowed_algorithms", "at least one algorithm is required")
	}
	for _, alg := range c.JWS.AllowedAlgorithms {
		if strings.EqualFold(alg, "none") {
			return nil, errorf(p+".jws.allowed_algorithms", "none is not allowed: it is insecure")
		}
	}
	if len(c.JWS.Keys.Sources.AdditionalJKUs) == 0 {
		return nil, errorf(p+".jws.keys.sources.additional_jkus", "at least one key set URL is required")
	}
	return c, nil
}
