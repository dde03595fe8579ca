package edgeplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// limitTx is a Tx for the limits that count children: every object exists, and each parent has
// children objects of every collection.
type limitTx struct {
	Tx
	children int
}

func (t *limitTx) Exists(*Resource, string) (bool, error)         { return true, nil }
func (t *limitTx) CountChildren(*Resource, string) (int, error)   { return t.children, nil }
func (t *limitTx) Claimed(string, string) (string, bool, error)   { return "", false, NotFound() }
func (t *limitTx) Get(res *Resource, id string) (Document, error) { return nil, NotFound() }
func (t *limitTx) ClaimedExclusive(string, string) (string, bool, error) {
	return "", false, NotFound()
}

// strs is n distinct strings made by f.
func strs(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func kv(n int, f func(i int) (string, string)) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		k, v := f(i)
		out[k] = v
	}
	return out
}

// policyOfSize is a traffic policy document of n bytes: padded with a YAML comment.
func policyOfSize(n int) string {
	const head = "on_http_request: []\n#"
	return head + strings.Repeat("a", n-len(head))
}

func ptr[T any](v T) *T { return &v }

// routeWithPad is a route body whose stored document grows by one byte per byte of pad: a request
// header's value.
func routeWithPad(pad int) *HTTPSEdgeRouteBody {
	return &HTTPSEdgeRouteBody{MatchType: ptr(MatchPathPrefix), Match: ptr("/"),
		RequestHeaders: &EndpointHeadersMutate{Add: map[string]string{"X-Pad": strings.Repeat("a", pad)}}}
}

// createRoute runs a route create on an edge that has children routes already.
func createRoute(b *HTTPSEdgeRouteBody, children int) error {
	if err := b.Validate(); err != nil {
		return err
	}
	_, err := b.Create(&Op{Tx: &limitTx{children: children}, ID: "edghtsrt_x", ParentID: "edghts_x"})
	return err
}

// TestObjectLimits walks each limit on what one object may hold at its maximum, which passes, and
// one past it, which is 400 with ngrok's code where it has one (else ERR_NGROK_215) naming the
// field.
func TestObjectLimits(t *testing.T) {
	// The route document's size without padding, so that the pad reaches MaxRouteBytes exactly.
	r := &HTTPSEdgeRoute{EdgeID: "edghts_x", MatchType: MatchPathPrefix, Match: "/"}
	if err := routeWithPad(0).Apply(&Op{Tx: &limitTx{}}, r); err != nil {
		t.Fatal(err)
	}
	base, _ := json.Marshal(r)

	for _, c := range []struct {
		name  string
		max   int
		code  int
		field string
		try   func(n int) error
	}{
		{"traffic policy bytes", MaxTrafficPolicyBytes, CodeInvalid, "traffic_policy.value", func(n int) error {
			v := policyOfSize(n)
			b := &TCPEdgeBody{TrafficPolicy: &EndpointTrafficPolicyMutate{Value: &v}}
			return b.Validate()
		}},
		{"routes per edge", MaxRoutesPerEdge, CodeTooManyRoutes, "routes", func(n int) error {
			return createRoute(routeWithPad(0), n-1) // the n-th route
		}},
		{"route bytes", MaxRouteBytes, CodeInvalid, "request_headers", func(n int) error {
			return createRoute(routeWithPad(n-len(base)), 0)
		}},
		{"hostports per edge", MaxHostportsPerEdge, CodeTooManyHostports, "hostports", func(n int) error {
			return (&HTTPSEdgeBody{edgeBody: edgeBody{Hostports: strs(n, func(i int) string { return fmt.Sprintf("h%d.example.com:443", i) })}}).Validate()
		}},
		{"rules per IP policy", MaxRulesPerIPPolicy, CodeInvalid, "ip_policy_id", func(n int) error {
			c := &IPPolicyRuleCreate{CIDR: ptr("10.0.0.0/8"), Action: ptr("allow"), IPPolicyID: ptr("ipp_x")}
			if err := c.Validate(); err != nil {
				return err
			}
			_, err := c.Create(&Op{Tx: &limitTx{children: n - 1}})
			return err
		}},
		{"headers to add", MaxHeaderEntries, CodeTooManyHeaders, "request_headers.add", func(n int) error {
			return (&HTTPSEdgeRouteBody{RequestHeaders: &EndpointHeadersMutate{Add: kv(n, func(i int) (string, string) { return fmt.Sprintf("X-H%d", i), "v" })}}).Validate()
		}},
		{"headers to remove", MaxHeaderEntries, CodeTooManyHeaders, "response_headers.remove", func(n int) error {
			return (&HTTPSEdgeRouteBody{ResponseHeaders: &EndpointHeadersMutate{Remove: strs(n, func(i int) string { return fmt.Sprintf("X-H%d", i) })}}).Validate()
		}},
		{"response backend headers", MaxHeaderEntries, CodeTooManyHeaders, "headers", func(n int) error {
			return (&HTTPResponseBackendBody{Headers: kv(n, func(i int) (string, string) { return fmt.Sprintf("X-H%d", i), "v" })}).Validate()
		}},
		{"user agent regexes allowed", MaxUserAgentRegexes, CodeInvalid, "user_agent_filter.allow", func(n int) error {
			return (&HTTPSEdgeRouteBody{routeAuthBody: routeAuthBody{UserAgentFilter: &EndpointUserAgentFilterMutate{Allow: strs(n, func(i int) string { return fmt.Sprintf("bot%d", i) })}}}).Validate()
		}},
		{"user agent regexes denied", MaxUserAgentRegexes, CodeInvalid, "user_agent_filter.deny", func(n int) error {
			return (&HTTPSEdgeRouteBody{routeAuthBody: routeAuthBody{UserAgentFilter: &EndpointUserAgentFilterMutate{Deny: strs(n, func(i int) string { return fmt.Sprintf("bot%d", i) })}}}).Validate()
		}},
		{"tunnel group labels", MaxBackendLabels, CodeInvalid, "labels", func(n int) error {
			return (&TunnelGroupBackendBody{Labels: kv(n, func(i int) (string, string) { return fmt.Sprintf("k%d", i), "v" })}).Validate()
		}},
		{"failover backends", MaxChildBackends, CodeInvalid, "backends", func(n int) error {
			return (&FailoverBackendBody{Backends: strs(n, func(i int) string { return fmt.Sprintf("bkdsb_%d", i) })}).Validate()
		}},
		{"weighted backends", MaxChildBackends, CodeInvalid, "backends", func(n int) error {
			w := map[string]int64{}
			for i := range n {
				w[fmt.Sprintf("bkdsb_%d", i)] = 1
			}
			return (&WeightedBackendBody{Backends: w}).Validate()
		}},
		{"ip_policy_ids", MaxModuleListEntries, CodeInvalid, "ip_restriction.ip_policy_ids", func(n int) error {
			return (&TCPEdgeBody{IPRestriction: &EndpointIPPolicyMutate{IPPolicyIDs: strs(n, func(i int) string { return fmt.Sprintf("ipp_%d", i) })}}).Validate()
		}},
		{"certificate_authority_ids", MaxModuleListEntries, CodeInvalid, "mutual_tls.certificate_authority_ids", func(n int) error {
			return (&TLSEdgeBody{MutualTLS: &EndpointMutualTLSMutate{CertificateAuthorityIDs: strs(n, func(i int) string { return fmt.Sprintf("ca_%d", i) })}}).Validate()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.try(c.max); err != nil {
				t.Fatalf("at the limit (%d): %v", c.max, err)
			}
			err := c.try(c.max + 1)
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != c.code || e.Field != c.field {
				t.Fatalf("one past the limit (%d): want 400 ERR_NGROK_%d naming %s, got %#v", c.max+1, c.code, c.field, err)
			}
			if !strings.Contains(e.Msg, fmt.Sprint(c.max)) {
				t.Errorf("the message does not say the limit: %s", e.Msg)
			}
		})
	}
}

// TestTrafficPolicyCost: the estimate walks the decoded document, JSON or YAML:
// PolicyExpressionCost plus PolicyTokenCost per token for each expression and each template,
// PolicyEntryCost plus the key's length for each field, PolicyEntryCost for each list item, and
// the length of each other string.
func TestTrafficPolicyCost(t *testing.T) {
	const e, x, tok = PolicyEntryCost, PolicyExpressionCost, PolicyTokenCost
	rule := e + len("expressions") + e + x + 5*tok + // req . method == 'GET'
		e + len("actions") + e + e + len("type") + len("deny")
	for _, c := range []struct {
		doc  string
		want int
	}{
		{"", 0},
		{"on_tcp_connect: []", e + len("on_tcp_connect")},
		{"on_http_request:\n- expressions: [\"req.method == 'GET'\"]\n  actions: [{type: deny}]\n", e + len("on_http_request") + e + rule},
		{`{"on_http_request":[{"expressions":["req.method == 'GET'"],"actions":[{"type":"deny"}]}]}`, e + len("on_http_request") + e + rule},
		{`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x-a":"${req.host}"}}}]}]}`,
			e + len("on_http_request") + e + e + len("actions") + e + e + len("type") + len("add-headers") + e + len("config") +
				e + len("headers") + e + len("x-a") + len("${req.host}") + x + 6*tok}, // $ { req . host }
		{"on_tcp_connect: [unclosed", 0},
	} {
		if got := TrafficPolicyCost(c.doc); got != c.want {
			t.Errorf("%.60q: cost %d, want %d", c.doc, got, c.want)
		}
	}
	if n := celTokens(`req.url.path.startsWith('/a b') && !inCidrRange(conn.client_ip, "10.0.0.0/8")`); n != 20 {
		t.Errorf("celTokens: %d tokens, want 20", n)
	}
	// An ordinary document of 30 rules (about 4 KiB) is estimated so that 64 different ones fit
	// in one account's budget.
	var doc strings.Builder
	doc.WriteString("on_http_request:\n")
	for i := range 30 {
		fmt.Fprintf(&doc, "  - name: admin-%d\n    expressions:\n      - \"req.url.path.startsWith('/admin/%d') && !inCidrRange(conn.client_ip, '10.0.0.0/8')\"\n"+
			"    actions:\n      - type: custom-response\n        config: {status_code: 403, content: \"not here\"}\n", i, i)
	}
	if err := ValidatePolicyDocument(doc.String()); err != nil {
		t.Fatal(err)
	}
	cost := TrafficPolicyCost(doc.String())
	t.Logf("a document of 30 rules, %d bytes, is estimated at %d KiB", doc.Len(), cost>>10)
	if 64*cost > MaxAccountPolicyCost {
		t.Errorf("64 documents of %d KiB estimated do not fit in the account's budget of %d KiB", cost>>10, MaxAccountPolicyCost>>10)
	}
}
