package trafficpolicy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The configurations of the find & replace actions and of http-request, as ngrok documents
// them.
type (
	// FindReplaceConfig is request-body-find-replace's, response-body-find-replace's and
	// sse-find-replace's: replacements applied in order, each to the result of the one before.
	FindReplaceConfig struct {
		Replacements []Replacement `json:"replacements"`
	}
	// Replacement is one replacement: every match of From (an RE2 regular expression) becomes To
	// ($1 for a group; nothing when empty). Field is sse-find-replace's: the message field it
	// applies to, data (the default) or retry. Each may interpolate CEL.
	Replacement struct {
		Field string `json:"field"`
		From  string `json:"from"`
		To    string `json:"to"`
	}
	// HTTPRequestConfig is http-request's: the request made (URL, method, query parameters,
	// headers, body), how long it may take and how many redirects it follows, when it is
	// retried, and whether a failure halts the policy or lets it continue.
	HTTPRequestConfig struct {
		URL            string            `json:"url"`
		Method         string            `json:"method"`
		QueryParams    []QueryParam      `json:"query_params"`
		Headers        map[string]string `json:"headers"`
		Body           string            `json:"body"`
		MaxRedirects   *int              `json:"max_redirects"`
		Timeout        string            `json:"timeout"`
		RetryCondition string            `json:"retry_condition"`
		OnError        string            `json:"on_error"`
	}
	// QueryParam is one query parameter http-request appends to its URL.
	QueryParam struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
)

// Limits of http-request's configuration, ngrok's.
const (
	maxQueryParams       = 32
	maxQueryKey          = 128
	maxQueryValue        = 8192
	maxRequestHeaders    = 10
	maxRedirects         = 100
	minHTTPRequestTime   = time.Second
	maxHTTPRequestTime   = 30 * time.Second
	defaultHTTPTimeout   = 3 * time.Second
	maxFindReplacements  = 50
	maxFindReplaceRegexp = 4096
)

// HTTPRequestMethods are the methods http-request may use.
var HTTPRequestMethods = []string{"GET", "PUT", "POST", "PATCH", "DELETE", "OPTIONS"}

func init() {
	for _, typ := range []string{"request-body-find-replace", "response-body-find-replace", "sse-find-replace"} {
		implemented[typ] = decodeFindReplace
	}
	implemented["http-request"] = decodeHTTPRequest
}

func decodeFindReplace(a *Action) (any, error) {
	c := &FindReplaceConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config.replacements"
	if len(c.Replacements) == 0 || len(c.Replacements) > maxFindReplacements {
		return nil, errorf(p, "must hold 1 to %d replacements, got %d", maxFindReplacements, len(c.Replacements))
	}
	for i, r := range c.Replacements {
		rp := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case r.From == "":
			return nil, errorf(rp+".from", "is required: the regular expression to find")
		case len(r.From) > maxFindReplaceRegexp:
			return nil, errorf(rp+".from", "must be at most %d characters", maxFindReplaceRegexp)
		case r.Field != "" && a.Type != "sse-find-replace":
			return nil, errorf(rp+".field", "is sse-find-replace's only")
		case r.Field != "" && !Interpolates(r.Field) && r.Field != "data" && r.Field != "retry":
			return nil, errorf(rp+".field", "must be data or retry, got %q", r.Field)
		}
		if !Interpolates(r.From) {
			if err := a.checkRegexp(fmt.Sprintf("replacements[%d].from", i), r.From); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func decodeHTTPRequest(a *Action) (any, error) {
	c := &HTTPRequestConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if c.URL == "" {
		return nil, errorf(p+".url", "is required")
	}
	if !Interpolates(c.URL) {
		if err := CheckRequestURL(c.URL); err != nil {
			return nil, errorf(p+".url", "%v", err)
		}
	}
	if c.Method != "" && !slices.Contains(HTTPRequestMethods, c.Method) {
		return nil, errorf(p+".method", "must be one of %s, got %q", strings.Join(HTTPRequestMethods, ", "), c.Method)
	}
	if len(c.QueryParams) > maxQueryParams {
		return nil, errorf(p+".query_params", "at most %d parameters, got %d", maxQueryParams, len(c.QueryParams))
	}
	for i, q := range c.QueryParams {
		qp := fmt.Sprintf("%s.query_params[%d]", p, i)
		switch {
		case q.Key == "" || len(q.Key) > maxQueryKey:
			return nil, errorf(qp+".key", "must be 1 to %d characters", maxQueryKey)
		case len(q.Value) > maxQueryValue:
			return nil, errorf(qp+".value", "must be at most %d characters", maxQueryValue)
		}
	}
	if len(c.Headers) > maxRequestHeaders {
		return nil, errorf(p+".headers", "at most %d headers, got %d", maxRequestHeaders, len(c.Headers))
	}
	if err := a.checkHeaders("headers", c.Headers); err != nil {
		return nil, err
	}
	if c.MaxRedirects != nil && (*c.MaxRedirects < 0 || *c.MaxRedirects > maxRedirects) {
		return nil, errorf(p+".max_redirects", "must be from 0 to %d, got %d", maxRedirects, *c.MaxRedirects)
	}
	if _, err := c.Deadline(); err != nil {
		return nil, errorf(p+".timeout", "%v", err)
	}
	if c.OnError != "" && c.OnError != "continue" && c.OnError != "halt" {
		return nil, errorf(p+".on_error", "must be continue or halt, got %q", c.OnError)
	}
	if c.RetryCondition != "" {
		if _, err := CompileRetryCondition(c.RetryCondition); err != nil {
			return nil, errorf(p+".retry_condition", "%v", err)
		}
	}
	return c, nil
}

// CheckRequestURL checks the URL an http-request action asks for: absolute, http or https.
func CheckRequestURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q must be an absolute http or https URL", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q has credentials in it: give them in headers", s)
	}
	return nil
}

// Deadline is the action's timeout: 3s when unset, from 1s to 30s.
func (c *HTTPRequestConfig) Deadline() (time.Duration, error) {
	if c.Timeout == "" {
		return defaultHTTPTimeout, nil
	}
	d, err := time.ParseDuration(c.Timeout)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 3s", c.Timeout)
	}
	if d < minHTTPRequestTime || d > maxHTTPRequestTime {
		return 0, fmt.Errorf("%q must be from %s to %s", c.Timeout, minHTTPRequestTime, maxHTTPRequestTime)
	}
	return d, nil
}

// Redirects is how many redirects the action follows: none unless max_redirects says.
func (c *HTTPRequestConfig) Redirects() int {
	if c.MaxRedirects == nil {
		return 0
	}
	return *c.MaxRedirects
}

// Halts reports whether a failed request stops the policy (on_error: halt).
func (c *HTTPRequestConfig) Halts() bool { return c.OnError == "halt" }
