package trafficpolicy

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ForwardInternalConfig is forward-internal's: the internal endpoint (a URL whose host ends in
// ".internal") the request or connection is handed to, and whether a failure to reach it halts
// the policy (halt, the default) or lets its next actions run (continue).
type ForwardInternalConfig struct {
	URL     string `json:"url"`
	OnError string `json:"on_error"`
}

func init() {
	implemented["forward-internal"] = decodeForwardInternal
}

func decodeForwardInternal(a *Action) (any, error) {
	c := &ForwardInternalConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	p := a.Path + ".config"
	if c.URL == "" {
		return nil, errorf(p+".url", "is required")
	}
	if !Interpolates(c.URL) {
		if _, err := InternalURL(a.Phase, c.URL); err != nil {
			return nil, errorf(p+".url", "%v", err)
		}
	} else if _, err := CompileTemplate(a.Phase, c.URL); err != nil {
		return nil, errorf(p+".url", "%v", err)
	}
	if c.OnError != "" && c.OnError != "continue" && c.OnError != "halt" {
		return nil, errorf(p+".on_error", "must be continue or halt, got %q", c.OnError)
	}
	return c, nil
}

// Halts reports whether a failure stops the policy (on_error: halt, the default).
func (c *ForwardInternalConfig) Halts() bool { return c.OnError != "continue" }

// Target is an internal endpoint a forward-internal action names: its scheme (the endpoint's
// protocol), hostname and port (the scheme's default when the URL names none).
type Target struct {
	Scheme, Host string
	Port         int
}

// InternalURL checks and splits the URL of a forward-internal action in phase: http or https
// in on_http_request, tcp or tls in on_tcp_connect, a host ending in ".internal", no path,
// query or credentials.
func InternalURL(phase, s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("%q is not a URL: %v", s, err)
	}
	schemes := []string{"http", "https"}
	if phase == OnTCPConnect {
		schemes = []string{"tcp", "tls"}
	}
	if u.Scheme != schemes[0] && u.Scheme != schemes[1] {
		return Target{}, fmt.Errorf("%q must be a %s:// or %s:// URL in %s", s, schemes[0], schemes[1], phase)
	}
	host := strings.ToLower(u.Hostname())
	if !strings.HasSuffix(host, ".internal") || host == ".internal" {
		return Target{}, fmt.Errorf("%q does not name an internal endpoint: its host must end in .internal", s)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("%q must be scheme://host[:port] only", s)
	}
	t := Target{Scheme: u.Scheme, Host: host, Port: 443}
	if u.Scheme == "http" {
		t.Port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("%q names no valid port", s)
		}
		t.Port = n
	} else if u.Scheme == "tcp" {
		return Target{}, fmt.Errorf("%q must name a port", s)
	}
	return t, nil
}
