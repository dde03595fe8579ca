package trafficpolicy

import (
	"strings"
	"testing"
)

// TestNewActionsRefuseBadConfig: each configuration ngrok refuses is refused when the document is
// parsed (the API's 400), naming the field.
func TestNewActionsRefuseBadConfig(t *testing.T) {
	req := func(typ, cfg string) string {
		return `{"on_http_request":[{"actions":[{"type":"` + typ + `","config":` + cfg + `}]}]}`
	}
	const at = "on_http_request[0].actions[0].config."
	cases := []struct{ doc, want string }{
		{req("basic-auth", `{}`), at + "credentials: must hold 1 to 10"},
		{req("basic-auth", `{"credentials":["a:12345678","b:12345678","c:12345678","d:12345678","e:12345678","f:12345678","g:12345678","h:12345678","i:12345678","j:12345678","k:12345678"]}`), at + "credentials: must hold 1 to 10"},
		{req("basic-auth", `{"credentials":["nocolon12345"]}`), at + "credentials[0]: must be username:password"},
		{req("basic-auth", `{"credentials":["user:short"]}`), at + "credentials[0]: the password must be 8 to 128 characters, got 5"},
		{req("basic-auth", `{"credentials":[":12345678"]}`), at + "credentials[0]: the username is empty"},
		{req("basic-auth", `{"credentials":["${req.method}password"]}`), at + "credentials[0]: the colon between"},
		{req("basic-auth", `{"credentials":["user:12345678"],"realm":"caf\u00e9"}`), at + "realm: must be printable ASCII"},
		{req("basic-auth", `{"credentials":["user:12345678"],"realm":"`+strings.Repeat("r", 129)+`"}`), at + "realm: must be at most 128"},
		{req("basic-auth", `{"credentials":["user:12345678"],"enforce":"yes"}`), "cannot unmarshal string"},
		{req("circuit-breaker", `{"error_threshold":1.5}`), at + "error_threshold: must be from 0.0 to 1.0"},
		{req("circuit-breaker", `{"volume_threshold":0}`), at + "volume_threshold: must be from 1 to"},
		{req("circuit-breaker", `{"window_duration":"3m"}`), at + "window_duration: \"3m\" must be from 1s to 2m0s"},
		{req("circuit-breaker", `{"tripped_duration":"soon"}`), at + "tripped_duration: \"soon\" is not a duration"},
		{req("circuit-breaker", `{"num_buckets":5}`), at + "num_buckets: is fixed at 10"},
		{req("close-connection", `{"now":true}`), `unknown field "now"`},
		{req("log", `{}`), at + "metadata: is required"},
		{req("set-vars", `{"vars":[]}`), at + "vars: is required"},
		{req("set-vars", `{"vars":[{"a":1,"b":2}]}`), at + "vars[0]: must be a mapping of exactly one name"},
		{req("http-request", `{}`), at + "url: is required"},
		{req("http-request", `{"url":"ftp://example.com/"}`), at + "url: \"ftp://example.com/\" must be an absolute http or https URL"},
		{req("http-request", `{"url":"https://u:p@example.com/"}`), at + "url: \"https://u:p@example.com/\" has credentials"},
		{req("http-request", `{"url":"https://example.com/","method":"TRACE"}`), at + "method: must be one of GET, PUT"},
		{req("http-request", `{"url":"https://example.com/","max_redirects":101}`), at + "max_redirects: must be from 0 to 100"},
		{req("http-request", `{"url":"https://example.com/","timeout":"31s"}`), at + "timeout: \"31s\" must be from 1s to 30s"},
		{req("http-request", `{"url":"https://example.com/","on_error":"ignore"}`), at + "on_error: must be continue or halt"},
		{req("http-request", `{"url":"https://example.com/","retry_condition":"attempts"}`), at + "retry_condition: the expression must evaluate to a bool"},
		{req("http-request", `{"url":"https://example.com/","query_params":[{"key":"","value":"v"}]}`), at + "query_params[0].key: must be 1 to 128"},
		{req("http-request", `{"url":"https://example.com/","headers":{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1","j":"1","k":"1"}}`), at + "headers: at most 10 headers"},
		{req("request-body-find-replace", `{"replacements":[]}`), at + "replacements: must hold 1 to 50"},
		{req("request-body-find-replace", `{"replacements":[{"to":"x"}]}`), at + "replacements[0].from: is required"},
		{req("request-body-find-replace", `{"replacements":[{"from":"(","to":"x"}]}`), at + "replacements[0].from: \"(\" is not a valid regular expression"},
		{req("request-body-find-replace", `{"replacements":[{"field":"data","from":"a"}]}`), at + "replacements[0].field: is sse-find-replace's only"},
		{`{"on_event_stream_message":[{"actions":[{"type":"sse-find-replace","config":{"replacements":[{"field":"event","from":"a"}]}}]}]}`, "on_event_stream_message[0].actions[0].config.replacements[0].field: must be data or retry"},
		{`{"on_http_response":[{"actions":[{"type":"sse-find-replace","config":{"replacements":[{"from":"a"}]}}]}]}`, "cannot be used in on_http_response (only in on_event_stream_message)"},
		{`{"on_http_request":[{"actions":[{"type":"response-body-find-replace","config":{"replacements":[{"from":"a"}]}}]}]}`, "cannot be used in on_http_request"},
		{`{"on_http_request":[{"actions":[{"type":"log","config":{"metadata":{"a":"${req.nope}"}}}]}]}`, at + "metadata.a: ${req.nope}"},
	}
	for _, c := range cases {
		_, err := Parse(c.doc)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n  %v\n  want %q", c.doc, err, c.want)
		}
	}
	for _, ok := range []string{
		req("basic-auth", `{"credentials":["user:password1","${vars.user}:${vars.pass}","${vars.cred}","user-${req.method}:password2"],"realm":"Admin Login","enforce":false}`),
		req("circuit-breaker", `{"error_threshold":0,"volume_threshold":1,"window_duration":"60s","tripped_duration":"2m","enforce":true}`),
		req("circuit-breaker", `{}`),
		req("close-connection", `{}`),
		`{"on_tcp_connect":[{"actions":[{"type":"close-connection"},{"type":"log","config":{"metadata":{"ip":"${conn.client_ip}","n":[1,{"x":true}]}}},{"type":"set-vars","config":{"vars":[{"a":"${conn.client_port}"}]}}]}]}`,
		req("http-request", `{"url":"https://${req.host}/x","method":"POST","query_params":[{"key":"k","value":"${req.method}"}],"headers":{"x-a":"${conn.client_ip}"},"body":"{}","max_redirects":2,"timeout":"5s","retry_condition":"last_attempt.res.statusCode == 500 && attempts < 3","on_error":"halt"}`),
		`{"on_http_response":[{"actions":[{"type":"response-body-find-replace","config":{"replacements":[{"from":"${vars.p}","to":"[${res.status_code}]"}]}},{"type":"http-request","config":{"url":"https://example.com/"}}]}]}`,
		`{"on_event_stream_message":[{"expressions":["res.status_code == 200"],"actions":[{"type":"sse-find-replace","config":{"replacements":[{"field":"retry","from":"\\d+","to":"5000"},{"from":"secret"}]}}]}]}`,
	} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestUnavailableVariables: a document reading what edgeplane cannot fill (a geolocation,
// ngrok's vaults) is accepted, as ngrok accepts it, and Unavailable names it, so a stage refuses
// it; a document without one has none.
func TestUnavailableVariables(t *testing.T) {
	for doc, want := range map[string]string{
		`{"on_http_request":[{"expressions":["conn.geo.country_code == 'US'"],"actions":[{"type":"deny"}]}]}`:              "on_http_request[0].expressions[0]: conn.geo.country_code: edgeplane has no geolocation database",
		`{"on_tcp_connect":[{"expressions":["'tor' in conn.client_ip.categories"],"actions":[{"type":"deny"}]}]}`:          "conn.client_ip.categories: edgeplane has no IP intelligence database",
		`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x":"${secrets.get('v', 'k')}"}}}]}]}`: "config.headers.x: secrets.get: edgeplane has no ngrok vaults",
		`{"on_http_response":[{"expressions":["conn.server_region == 'eu'"],"actions":[{"type":"deny"}]}]}`:                "conn.server_region: edgeplane has no points of presence",
	} {
		p, err := Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if err := p.Unavailable(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	p, err := Parse(`{"on_http_request":[{"expressions":["conn.client_ip == '1.2.3.4' && vars.x == 'y'"],"actions":[{"type":"deny"}]}]}`)
	if err != nil || p.Unavailable() != nil || !p.Reads("vars") || p.Reads("actions") {
		t.Errorf("a document with only variables edgeplane fills: %v %v, reads vars %v, actions %v", err, p.Unavailable(), p.Reads("vars"), p.Reads("actions"))
	}
}
