package trafficpolicy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// actionPhases is every action type ngrok defines, with the phases it may be used in. A type
// outside this table is refused by Parse; one in it that edgeplane does not apply is accepted
// and fails its route closed on traffic. rate-limit is on_http_request's only, as ngrok documents
// it (its TCP connections are not limited by a policy).
var actionPhases = map[string][]string{
	"add-headers":                {OnHTTPRequest, OnHTTPResponse},
	"ai-gateway":                 {OnHTTPRequest},
	"basic-auth":                 {OnHTTPRequest},
	"circuit-breaker":            {OnHTTPRequest},
	"close-connection":           {OnTCPConnect, OnHTTPRequest, OnHTTPResponse},
	"compress-response":          {OnHTTPRequest, OnHTTPResponse},
	"custom-response":            {OnHTTPRequest, OnHTTPResponse},
	"deny":                       {OnTCPConnect, OnHTTPRequest, OnHTTPResponse},
	"forward-internal":           {OnTCPConnect, OnHTTPRequest},
	"http-request":               {OnHTTPRequest, OnHTTPResponse},
	"jwt-validation":             {OnHTTPRequest},
	"log":                        {OnTCPConnect, OnHTTPRequest, OnHTTPResponse},
	"oauth":                      {OnHTTPRequest},
	"openid-connect":             {OnHTTPRequest},
	"owasp-crs-request":          {OnHTTPRequest},
	"owasp-crs-response":         {OnHTTPResponse},
	"rate-limit":                 {OnHTTPRequest},
	"redirect":                   {OnHTTPRequest, OnHTTPResponse},
	"remove-headers":             {OnHTTPRequest, OnHTTPResponse},
	"request-body-find-replace":  {OnHTTPRequest},
	"response-body-find-replace": {OnHTTPResponse},
	"restrict-ips":               {OnTCPConnect, OnHTTPRequest, OnHTTPResponse},
	"saml":                       {OnHTTPRequest},
	"set-vars":                   {OnTCPConnect, OnHTTPRequest, OnHTTPResponse},
	"sse-find-replace":           {OnEventStreamMessage},
	"terminate-tls":              {OnTCPConnect},
	"url-rewrite":                {OnHTTPRequest},
	"verify-webhook":             {OnHTTPRequest},
}

// The configurations of the actions edgeplane applies, as ngrok documents them.
type (
	// DenyConfig is deny's: the status to answer (403 when 0).
	DenyConfig struct {
		StatusCode int `json:"status_code"`
	}
	// CustomResponseConfig is custom-response's: the status (200 when 0), the body (content is
	// its older name) and headers.
	CustomResponseConfig struct {
		StatusCode int               `json:"status_code"`
		Body       string            `json:"body"`
		Content    string            `json:"content"`
		Headers    map[string]string `json:"headers"`
	}
	// AddHeadersConfig is add-headers': the headers to add, each appended to any value the
	// message has (Host replaces it).
	AddHeadersConfig struct {
		Headers map[string]string `json:"headers"`
	}
	// RemoveHeadersConfig is remove-headers': the names to remove.
	RemoveHeadersConfig struct {
		Headers []string `json:"headers"`
	}
	// RedirectConfig is redirect's: when From (a regular expression over the request's full URL)
	// matches, or is empty, the client is sent to To (with From's matches replaced, $1 for a
	// group), with StatusCode (302 when 0) and Headers.
	RedirectConfig struct {
		From       string            `json:"from"`
		To         string            `json:"to"`
		StatusCode int               `json:"status_code"`
		Headers    map[string]string `json:"headers"`
	}
	// URLRewriteConfig is url-rewrite's: every match of From in the request's full URL is
	// replaced with To before the request goes upstream.
	URLRewriteConfig struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	// RestrictIPsConfig is restrict-ips': CIDRs to allow and deny; Enforce false only reports.
	RestrictIPsConfig struct {
		Enforce    *bool    `json:"enforce"`
		Allow      []string `json:"allow"`
		Deny       []string `json:"deny"`
		IPPolicies []string `json:"ip_policies"`
	}
)

// implemented decodes and checks the configuration of each action edgeplane applies.
var implemented = map[string]func(*Action) (any, error){
	"deny": func(a *Action) (any, error) {
		c := &DenyConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		return c, a.checkStatus(c.StatusCode)
	},
	"custom-response": func(a *Action) (any, error) {
		c := &CustomResponseConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if c.Body != "" && c.Content != "" {
			return nil, errorf(a.Path+".config", "give body or content, not both")
		}
		if err := a.checkStatus(c.StatusCode); err != nil {
			return nil, err
		}
		return c, a.checkHeaders("headers", c.Headers)
	},
	"add-headers": func(a *Action) (any, error) {
		c := &AddHeadersConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if len(c.Headers) == 0 {
			return nil, errorf(a.Path+".config.headers", "at least one header is required")
		}
		return c, a.checkHeaders("headers", c.Headers)
	},
	"remove-headers": func(a *Action) (any, error) {
		c := &RemoveHeadersConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if len(c.Headers) == 0 {
			return nil, errorf(a.Path+".config.headers", "at least one header name is required")
		}
		for _, name := range c.Headers {
			if !validName(name) {
				return nil, errorf(a.Path+".config.headers", "%q is not a valid HTTP header name", name)
			}
		}
		return c, nil
	},
	"redirect": func(a *Action) (any, error) {
		c := &RedirectConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if c.To == "" {
			return nil, errorf(a.Path+".config.to", "is required")
		}
		if err := a.checkRegexp("from", c.From); err != nil {
			return nil, err
		}
		if c.StatusCode != 0 && (c.StatusCode < 300 || c.StatusCode > 399) {
			return nil, errorf(a.Path+".config.status_code", "must be a redirect status (3xx), got %d", c.StatusCode)
		}
		return c, a.checkHeaders("headers", c.Headers)
	},
	"url-rewrite": func(a *Action) (any, error) {
		c := &URLRewriteConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if c.To == "" {
			return nil, errorf(a.Path+".config.to", "is required")
		}
		return c, a.checkRegexp("from", c.From)
	},
	"restrict-ips": func(a *Action) (any, error) {
		c := &RestrictIPsConfig{}
		if err := a.decode(c); err != nil {
			return nil, err
		}
		if len(c.Allow)+len(c.Deny)+len(c.IPPolicies) == 0 {
			return nil, errorf(a.Path+".config", "at least one of allow, deny or ip_policies is required")
		}
		for field, list := range map[string][]string{"allow": c.Allow, "deny": c.Deny} {
			for _, cidr := range list {
				if _, err := netip.ParsePrefix(cidr); err != nil {
					return nil, errorf(a.Path+".config."+field, "%q is not a CIDR", cidr)
				}
			}
		}
		return c, nil
	},
}

// Decode decodes and checks an action's configuration, returning one of the *Config types above.
// It fails for an action edgeplane does not apply (Implemented is false).
func (a *Action) Decode() (any, error) {
	impl := implemented[a.Type]
	if impl == nil {
		return nil, errorf(a.Path, "the %s action is not applied by edgeplane yet", a.Type)
	}
	return impl(a)
}

// Implemented reports whether edgeplane applies actions of this type (in some phase).
func Implemented(typ string) bool { return implemented[typ] != nil }

// decode reads the configuration into c, refusing fields the action does not have.
func (a *Action) decode(c any) error {
	b, err := json.Marshal(a.Config)
	if err != nil {
		return errorf(a.Path+".config", "%v", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		return errorf(a.Path+".config", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func (a *Action) checkStatus(code int) error {
	if code != 0 && (code < 100 || code > 999) {
		return errorf(a.Path+".config.status_code", "%d is not an HTTP status", code)
	}
	return nil
}

func (a *Action) checkRegexp(field, expr string) error {
	if _, err := regexp.Compile(expr); err != nil {
		return errorf(a.Path+".config."+field, "%q is not a valid regular expression: %v", expr, err)
	}
	return nil
}

func (a *Action) checkHeaders(field string, h map[string]string) error {
	for name, v := range h {
		if !validName(name) {
			return errorf(a.Path+".config."+field, "%q is not a valid HTTP header name", name)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }) {
			return errorf(a.Path+".config."+field, "the value of %q has control characters", name)
		}
	}
	return nil
}

// HeaderNames returns the header names an action adds or removes (add-headers, remove-headers,
// and the headers of custom-response and redirect), for the caller's rules on which headers a
// policy may touch.
func (a *Action) HeaderNames() []string {
	var names []string
	switch c := a.Config["headers"].(type) {
	case map[string]any:
		for k := range c {
			names = append(names, k)
		}
	case []any:
		for _, v := range c {
			if s, ok := v.(string); ok {
				names = append(names, s)
			}
		}
	}
	return names
}

// Interpolates reports whether s uses CEL interpolation (${…}).
func Interpolates(s string) bool { return strings.Contains(s, "${") }

// validName reports whether s is an HTTP header name (a token).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return http.CanonicalHeaderKey(s) != ""
}
