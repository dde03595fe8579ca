package trafficpolicy

import (
	"slices"
	"strings"
	"testing"
)

// TestOWASPCRSConfig: owasp-crs-request and owasp-crs-response take ngrok's fields (on_error,
// process_body, exclude_rule_ids), refuse anything else naming the field, and keep each excluded
// rule once, in order.
func TestOWASPCRSConfig(t *testing.T) {
	doc := func(phase, typ, cfg string) string {
		return `{"` + phase + `":[{"actions":[{"type":"` + typ + `","config":` + cfg + `}]}]}`
	}
	const at = "on_http_request[0].actions[0].config"
	for _, c := range []struct{ doc, want string }{
		{doc("on_http_request", "owasp-crs-request", `{"on_error":"ignore"}`), at + ".on_error: must be continue or halt"},
		{doc("on_http_request", "owasp-crs-request", `{"exclude_rule_ids":[942100,1234]}`), at + ".exclude_rule_ids: 1234 is not a Core Rule Set rule id"},
		{doc("on_http_request", "owasp-crs-request", `{"exclude_rule_ids":[1000000]}`), at + ".exclude_rule_ids: 1000000 is not"},
		{doc("on_http_request", "owasp-crs-request", `{"inbound_anomaly_threshold":10}`), at + `: unknown field "inbound_anomaly_threshold"`},
		{doc("on_http_request", "owasp-crs-request", `{"process_body":"yes"}`), "cannot unmarshal string"},
		{doc("on_http_response", "owasp-crs-response", `{"process_response_body":true}`), `on_http_response[0].actions[0].config: unknown field "process_response_body"`},
		{doc("on_http_request", "owasp-crs-response", `{}`), "cannot be used in on_http_request"},
	} {
		if _, err := Parse(c.doc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.doc, err, c.want)
		}
	}
	p, err := Parse(doc("on_http_response", "owasp-crs-response", `{"on_error":"continue","process_body":true,"exclude_rule_ids":[951220,951110,951220]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.OnHTTPResponse[0].Actions[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.(*OWASPCRSConfig)
	if c.Halts() || !c.ProcessBody || !slices.Equal(c.ExcludeRuleIDs, []int{951110, 951220}) {
		t.Errorf("decoded: %+v", c)
	}
	p, err = Parse(doc("on_http_request", "owasp-crs-request", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := p.OnHTTPRequest[0].Actions[0].Decode(); !cfg.(*OWASPCRSConfig).Halts() {
		t.Error("on_error defaults to halt")
	}
}
