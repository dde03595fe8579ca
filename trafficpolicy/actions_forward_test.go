package trafficpolicy

import (
	"strings"
	"testing"
)

// TestForwardInternalConfig: forward-internal's URL must name an internal endpoint of the
// phase's schemes (interpolated ones are checked when rendered), on_error must be halt or
// continue; each refusal names the field.
func TestForwardInternalConfig(t *testing.T) {
	req := func(cfg string) string {
		return `{"on_http_request":[{"actions":[{"type":"forward-internal","config":` + cfg + `}]}]}`
	}
	const at = "on_http_request[0].actions[0].config."
	for _, c := range []struct{ doc, want string }{
		{req(`{}`), at + "url: is required"},
		{req(`{"url":"https://api.example.com"}`), at + "url: \"https://api.example.com\" does not name an internal endpoint"},
		{req(`{"url":"tcp://api.internal:22"}`), at + "url: \"tcp://api.internal:22\" must be a http:// or https:// URL"},
		{req(`{"url":"https://api.internal/path"}`), at + "url: \"https://api.internal/path\" must be scheme://host[:port] only"},
		{req(`{"url":"https://api.internal:0"}`), at + "url: \"https://api.internal:0\" names no valid port"},
		{req(`{"url":"https://${req.host"}`), at + "url:"},
		{req(`{"url":"https://api.internal","on_error":"retry"}`), at + "on_error: must be continue or halt"},
		{req(`{"url":"https://api.internal","timeout":"1s"}`), `unknown field "timeout"`},
		{`{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"tcp://db.internal"}}]}]}`, "on_tcp_connect[0].actions[0].config.url: \"tcp://db.internal\" must name a port"},
		{`{"on_http_response":[{"actions":[{"type":"forward-internal","config":{"url":"https://api.internal"}}]}]}`, "cannot be used in on_http_response"},
		{`{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"udp://db.internal:53"}}]}]}`, "must be a tcp://, tls://, http:// or https:// URL in on_tcp_connect"},
	} {
		if _, err := Parse(c.doc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n  %v\n  want %q", c.doc, err, c.want)
		}
	}
	for _, ok := range []string{
		req(`{"url":"https://api.internal"}`),
		req(`{"url":"http://api.internal:8080/","on_error":"continue"}`),
		req(`{"url":"https://${req.url.path.split('/')[1]}.internal","on_error":"halt"}`),
		`{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"tls://db.internal:5432"}}]}]}`,
		// http and https in on_tcp_connect, for http and https endpoints (the endpoint decides
		// which protocol its target must speak: SameProtocol).
		`{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"https://web.internal"}}]}]}`,
		`{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"http://web.internal:8080"}}]}]}`,
	} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, c := range []struct {
		from, scheme string
		ok           bool
	}{{"http", "https", true}, {"http", "http", true}, {"http", "tls", false}, {"http", "tcp", false}, {"tcp", "tls", true}, {"tcp", "tcp", true}, {"tcp", "https", false}} {
		err := SameProtocol(c.from, Target{Scheme: c.scheme, Host: "x.internal"})
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), "different protocols") {
			t.Errorf("SameProtocol(%s, %s): %v", c.from, c.scheme, err)
		}
	}
	tg, err := InternalURL(OnHTTPRequest, "HTTP://API.Internal")
	if err != nil || tg != (Target{Scheme: "http", Host: "api.internal", Port: 80}) {
		t.Errorf("InternalURL: %+v %v", tg, err)
	}
}
