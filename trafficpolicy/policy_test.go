package trafficpolicy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestParse reads the same document as JSON and as YAML, and keeps the phases, rules and
// actions in order.
func TestParse(t *testing.T) {
	js := `{"on_http_request":[{"name":"no posts","expressions":["req.method == 'POST'"],
	  "actions":[{"type":"deny","config":{"status_code":405}}]},
	  {"actions":[{"type":"add-headers","config":{"headers":{"x-a":"1"}}}]}],
	 "on_http_response":[{"expressions":["res.status_code >= 500"],"actions":[{"type":"remove-headers","config":{"headers":["server"]}}]}]}`
	yml := `
on_http_request:
  - name: no posts
    expressions:
      - req.method == 'POST'
    actions:
      - type: deny
        config:
          status_code: 405
  - actions:
      - type: add-headers
        config:
          headers:
            x-a: "1"
on_http_response:
  - expressions: ["res.status_code >= 500"]
    actions:
      - type: remove-headers
        config: {headers: [server]}
`
	for name, doc := range map[string]string{"json": js, "yaml": yml} {
		p, err := Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(p.OnHTTPRequest) != 2 || len(p.OnHTTPResponse) != 1 || p.OnHTTPRequest[0].Name != "no posts" {
			t.Fatalf("%s: %+v", name, p)
		}
		c, err := p.OnHTTPRequest[0].Actions[0].Decode()
		if err != nil || c.(*DenyConfig).StatusCode != 405 {
			t.Errorf("%s: deny's config %+v %v", name, c, err)
		}
		if a := p.OnHTTPRequest[1].Actions[0]; a.Path != "on_http_request[1].actions[0]" {
			t.Errorf("%s: path %q", name, a.Path)
		}
	}
}

// TestParseRefuses: what ngrok refuses is refused, naming where.
func TestParseRefuses(t *testing.T) {
	cases := []struct{ doc, want string }{
		{`{"on_http_requests":[]}`, `"on_http_requests" is not a traffic policy phase`},
		{`{"inbound":[]}`, `"inbound" is not a traffic policy phase`},
		{`{"on_http_request":[{"actions":[{"type":"teleport"}]}]}`, `on_http_request[0].actions[0].type: "teleport" is not a traffic policy action`},
		{`{"on_http_request":[{"expressions":["req.method =="],"actions":[{"type":"deny"}]}]}`, `on_http_request[0].expressions[0]: `},
		{`{"on_http_request":[{"expressions":["req.nope == 'x'"],"actions":[{"type":"deny"}]}]}`, `undeclared reference`},
		{`{"on_http_request":[{"expressions":["req.method"],"actions":[{"type":"deny"}]}]}`, `must evaluate to a bool`},
		{`{"on_tcp_connect":[{"expressions":["req.method == 'GET'"],"actions":[{"type":"deny"}]}]}`, `undeclared reference`},
		{`{"on_http_request":[{"expressions":["res.status_code == 200"],"actions":[{"type":"deny"}]}]}`, `undeclared reference`},
		{`{"on_http_request":[{"actions":[{"type":"owasp-crs-response"}]}]}`, `cannot be used in on_http_request`},
		{`{"on_http_request":[{"expressions":["true"]}]}`, `at least one action`},
		{`{"on_http_request":[{"when":"x","actions":[{"type":"deny"}]}]}`, `unknown field "when"`},
		{`{"on_http_request":[{"actions":[{"type":"deny","config":{"status":403}}]}]}`, `unknown field "status"`},
		{`{"on_http_request":[{"actions":[{"type":"redirect","config":{"from":"x"}}]}]}`, `config.to: is required`},
		{`{"on_http_request":[{"actions":[{"type":"redirect","config":{"from":"(","to":"/"}}]}]}`, `not a valid regular expression`},
		{`{"on_http_request":[{"actions":[{"type":"restrict-ips","config":{"allow":["10.0.0.0/33"]}}]}]}`, `is not a CIDR`},
		{`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"bad name":"x"}}}]}]}`, `not a valid HTTP header name`},
		{`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x":"${req.nope}"}}}]}]}`, `on_http_request[0].actions[0].config.headers.x: ${req.nope}: ERROR`},
		{`{"on_http_request":[{"actions":[{"type":"custom-response","config":{"body":"${req.method"}}]}]}`, `a ${ without its closing }`},
		{`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x":"${res.status_code}"}}}]}]}`, `undeclared reference`},
		{`[1]`, `the top level must be a mapping`},
		{"on_http_request: [", `neither a JSON object nor a YAML mapping`},
	}
	for _, c := range cases {
		_, err := Parse(c.doc)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.doc, err, c.want)
		}
	}
	// An action ngrok defines that edgeplane does not apply is accepted, config unchecked.
	if _, err := Parse(`{"on_http_request":[{"actions":[{"type":"saml","config":{"anything":10}}]}]}`); err != nil {
		t.Errorf("saml: %v", err)
	}
}

// TestMatch evaluates expressions over a request's variables: all must hold, none is always.
func TestMatch(t *testing.T) {
	p, err := Parse(`{"on_http_request":[
	  {"expressions":["req.method == 'GET'","req.url.path.startsWith('/api')","'x-key' in req.headers && req.headers['x-key'][0] == 'k'"],"actions":[{"type":"deny"}]},
	  {"expressions":["req.url.query_params['a'][0] == '1' && req.url.query == 'a=1'","conn.client_ip == '192.0.2.1'","req.url == 'https://example.com/api/x?a=1'"],"actions":[{"type":"deny"}]},
	  {"actions":[{"type":"deny"}]},
	  {"expressions":["req.headers['absent'][0] == 'x'"],"actions":[{"type":"deny"}]},
	  {"expressions":["inCidrRange(conn.client_ip, '192.0.2.0/24')","inCidrRanges(conn.client_ip, ['bad', '10.0.0.0/8', '::ffff:192.0.2.0/120'])","!inCidrRange(conn.client_ip, 'not a cidr')","!inCidrRanges('nope', ['0.0.0.0/0'])"],"actions":[{"type":"deny"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "https://example.com/api/x?a=1", nil)
	r.RemoteAddr = "192.0.2.1:5555"
	r.Header.Set("X-Key", "k")
	vars := RequestVars(ConnVars(r.RemoteAddr, ""), r, "https")
	for i, want := range []bool{true, true, true} {
		if got, err := p.OnHTTPRequest[i].Match(vars); got != want || err != nil {
			t.Errorf("rule %d: %v %v", i, got, err)
		}
	}
	if got, err := p.OnHTTPRequest[4].Match(vars); !got || err != nil {
		t.Errorf("the CIDR macros: %v %v", got, err)
	}
	if _, err := p.OnHTTPRequest[3].Match(vars); err == nil || !strings.Contains(err.Error(), "on_http_request[3].expressions[0]") {
		t.Errorf("a missing key: %v", err)
	}
	r.Method = "POST"
	if got, _ := p.OnHTTPRequest[0].Match(RequestVars(ConnVars(r.RemoteAddr, ""), r, "https")); got {
		t.Error("a POST matched req.method == 'GET'")
	}
	rv := ResponseVars(vars, 503, http.Header{"Server": {"x"}})
	status, _ := Lookup(rv, "res.status_code")
	headers, _ := Lookup(rv, "res.headers")
	if status != int64(503) || headers.(map[string][]string)["server"][0] != "x" {
		t.Errorf("response vars: %v %v", status, headers)
	}
}

// TestCostLimit: an expression whose work grows with the request fails past CostLimit instead of
// running unbounded.
func TestCostLimit(t *testing.T) {
	p, err := Parse(`{"on_http_request":[{"expressions":["req.headers.all(a, req.headers.all(b, a != b || a == b))"],"actions":[{"type":"deny"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	for i := range 1000 {
		r.Header.Set("X-H"+strconv.Itoa(i), "v")
	}
	_, err = p.OnHTTPRequest[0].Match(RequestVars(ConnVars(r.RemoteAddr, ""), r, "https"))
	if err == nil || !strings.Contains(err.Error(), "cost") {
		t.Errorf("a million steps: %v", err)
	}
}

// TestTemplate: literal text and ${…} parts, with braces and quotes inside an expression.
func TestTemplate(t *testing.T) {
	tpl, err := CompileTemplate(OnHTTPRequest, "a ${'}' + req.method} b ${ {'k': req.url.path}['k'] } ${req.content_length}")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("PUT", "https://example.com/p", strings.NewReader("abc"))
	got, err := tpl.Render(RequestVars(ConnVars(r.RemoteAddr, ""), r, "https"))
	if got != "a }PUT b /p 3" || err != nil {
		t.Errorf("rendered %q %v", got, err)
	}
	if tpl, _ := CompileTemplate(OnHTTPRequest, "plain"); !tpl.Static() || tpl.String() != "plain" {
		t.Error("a template without expressions is not static")
	}
}
