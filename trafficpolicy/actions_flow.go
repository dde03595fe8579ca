package trafficpolicy

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The configurations of basic-auth, circuit-breaker, close-connection, log and set-vars, as
// ngrok documents them, with the checks ngrok makes when a document is written.
type (
	// BasicAuthConfig is basic-auth's: up to ten user:password credentials (CEL interpolation
	// allowed, as long as the colon between user and password stays literal), the realm of the
	// challenge (ngrok when empty), and Enforce false to let a request without valid credentials
	// go on.
	BasicAuthConfig struct {
		Credentials []string `json:"credentials"`
		Realm       string   `json:"realm"`
		Enforce     *bool    `json:"enforce"`
	}
	// CircuitBreakerConfig is circuit-breaker's: once the rolling window of WindowDuration holds
	// VolumeThreshold requests of which the share ErrorThreshold failed, requests are refused for
	// TrippedDuration. Unset fields take ngrok's defaults (0.5, 10, 10s, 10s); NumBuckets is fixed
	// at 10.
	CircuitBreakerConfig struct {
		ErrorThreshold  *float64 `json:"error_threshold"`
		VolumeThreshold *int64   `json:"volume_threshold"`
		WindowDuration  string   `json:"window_duration"`
		TrippedDuration string   `json:"tripped_duration"`
		NumBuckets      *int     `json:"num_buckets"`
		Enforce         *bool    `json:"enforce"`
	}
	// CloseConnectionConfig is close-connection's: it has no fields.
	CloseConnectionConfig struct{}
	// LogConfig is log's: the metadata recorded, its strings with CEL interpolation.
	LogConfig struct {
		Metadata map[string]any `json:"metadata"`
	}
	// SetVarsConfig is set-vars': the variables to set, in order, each a mapping of one name to
	// its value (any value; strings with CEL interpolation).
	SetVarsConfig struct {
		Vars []map[string]any `json:"vars"`
	}
)

// Limits of these configurations, ngrok's where it documents them.
const (
	maxBasicAuthCredentials = 10
	minBasicAuthPassword    = 8
	maxBasicAuthPassword    = 128
	maxRealm                = 128
	breakerBuckets          = 10
	minBreakerDuration      = time.Second
	maxBreakerDuration      = 2 * time.Minute
	maxBreakerVolume        = 2_000_000_000
	maxVarName              = 256
)

func init() {
	implemented["basic-auth"] = decodeBasicAuth
	implemented["circuit-breaker"] = decodeCircuitBreaker
	implemented["close-connection"] = func(a *Action) (any, error) {
		c := &CloseConnectionConfig{}
		return c, a.decode(c)
	}
	implemented["log"] = func(a *Action) (any, error) {
		c := &LogConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if len(c.Metadata) == 0 {
			return nil, errorf(a.Path+".config.metadata", "is required: a mapping of the values to record")
		}
		return c, nil
	}
	implemented["set-vars"] = func(a *Action) (any, error) {
		c := &SetVarsConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if len(c.Vars) == 0 {
			return nil, errorf(a.Path+".config.vars", "is required: a list of mappings of one name to its value")
		}
		for i, v := range c.Vars {
			p := fmt.Sprintf("%s.config.vars[%d]", a.Path, i)
			if len(v) != 1 {
				return nil, errorf(p, "must be a mapping of exactly one name to its value, got %d entries", len(v))
			}
			for name := range v {
				if name == "" || len(name) > maxVarName {
					return nil, errorf(p, "a variable's name must be 1 to %d characters", maxVarName)
				}
			}
		}
		return c, nil
	}
}

func decodeBasicAuth(a *Action) (any, error) {
	c := &BasicAuthConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if len(c.Credentials) == 0 || len(c.Credentials) > maxBasicAuthCredentials {
		return nil, errorf(p+".credentials", "must hold 1 to %d username:password pairs, got %d", maxBasicAuthCredentials, len(c.Credentials))
	}
	for i, cred := range c.Credentials {
		if err := CheckCredential(cred); err != nil {
			return nil, errorf(fmt.Sprintf("%s.credentials[%d]", p, i), "%v", err)
		}
	}
	if len(c.Realm) > maxRealm {
		return nil, errorf(p+".realm", "must be at most %d characters", maxRealm)
	}
	for _, r := range c.Realm {
		if r < ' ' || r > '~' {
			return nil, errorf(p+".realm", "must be printable ASCII")
		}
	}
	return c, nil
}

// CheckCredential checks a basic-auth credential as written: literal user:password, a
// password of 8 to 128 characters; with CEL interpolation, the colon between user and password
// must be outside any ${…} unless one expression gives the whole credential. A rendered
// credential is checked again (without interpolation) before it is used.
func CheckCredential(cred string) error {
	if !Interpolates(cred) {
		user, pass, ok := strings.Cut(cred, ":")
		switch n := utf8.RuneCountInString(pass); {
		case !ok:
			return fmt.Errorf("must be username:password")
		case user == "":
			return fmt.Errorf("the username is empty")
		case n < minBasicAuthPassword || n > maxBasicAuthPassword:
			return fmt.Errorf("the password must be %d to %d characters, got %d", minBasicAuthPassword, maxBasicAuthPassword, n)
		}
		return nil
	}
	t := strings.TrimSpace(cred)
	if strings.HasPrefix(t, "${") && closingBrace(t[2:]) == len(t)-3 {
		return nil // one expression gives the whole credential
	}
	// The colon must be in the literal text between interpolations.
	for i := 0; i < len(cred); i++ {
		switch {
		case strings.HasPrefix(cred[i:], "${"):
			end := closingBrace(cred[i+2:])
			if end < 0 {
				return fmt.Errorf("a ${ without its closing }")
			}
			i += 2 + end // on the closing brace
		case cred[i] == ':':
			return nil
		}
	}
	return fmt.Errorf("the colon between the username and the password must be written outside ${…}, unless one ${…} gives the whole credential")
}

func decodeCircuitBreaker(a *Action) (any, error) {
	c := &CircuitBreakerConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if c.ErrorThreshold != nil && (*c.ErrorThreshold < 0 || *c.ErrorThreshold > 1) {
		return nil, errorf(p+".error_threshold", "must be from 0.0 to 1.0, got %g", *c.ErrorThreshold)
	}
	if c.VolumeThreshold != nil && (*c.VolumeThreshold < 1 || *c.VolumeThreshold > maxBreakerVolume) {
		return nil, errorf(p+".volume_threshold", "must be from 1 to %d, got %d", maxBreakerVolume, *c.VolumeThreshold)
	}
	if c.NumBuckets != nil && *c.NumBuckets != breakerBuckets {
		return nil, errorf(p+".num_buckets", "is fixed at %d, got %d", breakerBuckets, *c.NumBuckets)
	}
	for field, v := range map[string]string{"window_duration": c.WindowDuration, "tripped_duration": c.TrippedDuration} {
		if _, err := breakerDuration(v); err != nil {
			return nil, errorf(p+"."+field, "%v", err)
		}
	}
	return c, nil
}

// breakerDuration reads a duration of circuit-breaker: 10s when empty, else from 1s to 2m.
func breakerDuration(s string) (time.Duration, error) {
	if s == "" {
		return 10 * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 10s or 2m", s)
	}
	if d < minBreakerDuration || d > maxBreakerDuration {
		return 0, fmt.Errorf("%q must be from %s to %s", s, minBreakerDuration, maxBreakerDuration)
	}
	return d, nil
}

// Settings returns the configuration with ngrok's defaults filled in: the error threshold, the
// volume threshold, the window and the tripped duration.
func (c *CircuitBreakerConfig) Settings() (threshold float64, volume int64, window, tripped time.Duration) {
	threshold, volume = 0.5, 10
	if c.ErrorThreshold != nil {
		threshold = *c.ErrorThreshold
	}
	if c.VolumeThreshold != nil {
		volume = *c.VolumeThreshold
	}
	window, _ = breakerDuration(c.WindowDuration)
	tripped, _ = breakerDuration(c.TrippedDuration)
	return threshold, volume, window, tripped
}

// Enforced reports whether the breaker refuses requests (enforce defaults to true).
func (c *CircuitBreakerConfig) Enforced() bool { return c.Enforce == nil || *c.Enforce }

// Enforced reports whether a request without valid credentials is refused (the default).
func (c *BasicAuthConfig) Enforced() bool { return c.Enforce == nil || *c.Enforce }
