package trafficpolicy

import (
	"errors"
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
// in on_http_request; in on_tcp_connect any of ngrok's four (tcp, tls, http, https), since the
// document does not know its endpoint's protocol, which the target's must share (SameProtocol,
// checked where the policy is applied); a host ending in ".internal", no path, query or
// credentials.
func InternalURL(phase, s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("%q is not a URL: %v", s, err)
	}
	if phase == OnTCPConnect {
		if u.Scheme != "tcp" && u.Scheme != "tls" && u.Scheme != "http" && u.Scheme != "https" {
			return Target{}, fmt.Errorf("%q must be a tcp://, tls://, http:// or https:// URL in %s", s, phase)
		}
	} else if u.Scheme != "http" && u.Scheme != "https" {
		return Target{}, fmt.Errorf("%q must be a http:// or https:// URL in %s", s, phase)
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

// ErrOtherProtocol is SameProtocol's error: a refusal of what ngrok refuses too, not something
// edgeplane does not apply yet.
var ErrOtherProtocol = errors.New("the forward-internal action can't forward between endpoints that use different protocols")

// OtherProtocolError is SameProtocol's refusal, naming both protocols, so that a route failing
// closed on it can say why with ngrok's code for it (ERR_NGROK_3502) instead of the generic one
// of what edgeplane does not apply yet. It is ErrOtherProtocol (errors.Is).
type OtherProtocolError struct {
	// From is the protocol family of the policy's endpoint or edge: "http" or "tcp".
	From string
	// Target is the internal endpoint the action names.
	Target Target
}

func (e *OtherProtocolError) Error() string {
	proto := "tcp or tls"
	if e.From == "http" {
		proto = "http or https"
	}
	return fmt.Sprintf("%v: this endpoint is %s, and %s://%s is a %s endpoint", ErrOtherProtocol, proto, e.Target.Scheme, e.Target.Host, e.Target.Scheme)
}

// Unwrap makes the error ErrOtherProtocol.
func (e *OtherProtocolError) Unwrap() error { return ErrOtherProtocol }

// SameProtocol checks that forward-internal's target speaks the protocol of the endpoint (or
// edge) whose policy names it, as ngrok requires (its error 3502): from an http or https one,
// an internal http or https endpoint; from a tcp or tls one, an internal tcp or tls endpoint.
// from is the endpoint's protocol family, "http" or "tcp"; the error is an *OtherProtocolError.
func SameProtocol(from string, t Target) error {
	http := t.Scheme == "http" || t.Scheme == "https"
	if (from == "http") != http {
		return &OtherProtocolError{From: from, Target: t}
	}
	return nil
}
