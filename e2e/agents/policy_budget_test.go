package agents

import (
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// trueExpressions is a traffic policy of one on_tcp_connect rule with n expressions "true".
func trueExpressions(n int) string {
	return `on_tcp_connect: [{actions: [{type: deny}], expressions: [` + strings.TrimSuffix(strings.Repeat(`"true",`, n), ",") + `]}]`
}

// TestAccountPolicyBudgetOnTraffic: once an account's older edges have taken its whole traffic
// policy budget (ep.MaxAccountPolicyCost, as ep.TrafficPolicyCost estimates their documents),
// a route's policy is accepted by the API but fails the route closed on traffic, with a 503
// naming the limit; deleting an edge that took the budget makes room, and the route's policy
// then applies.
func TestAccountPolicyBudgetOnTraffic(t *testing.T) {
	w := start(t)
	// TLS edges older than the route, whose documents' estimates add up to the budget exactly
	// but for less than one expression's cost.
	per := ep.TrafficPolicyCost(trueExpressions(2)) - ep.TrafficPolicyCost(trueExpressions(1))
	var fillers []string
	for left := ep.MaxAccountPolicyCost; left >= ep.TrafficPolicyCost(trueExpressions(1)); {
		n := min(8000, 1+(left-ep.TrafficPolicyCost(trueExpressions(1)))/per)
		doc := trueExpressions(n)
		fillers = append(fillers, w.mustCreate("/edges/tls", map[string]any{"traffic_policy": map[string]any{"value": doc}}))
		left -= ep.TrafficPolicyCost(doc)
	}
	_, module := moduleEdge(t, w, "budget.example.com", nil)
	doc := `{"on_http_request":[{"expressions":["req.method == 'GET'"],"actions":[{"type":"add-headers","config":{"headers":{"x-policy":"applied"}}}]}]}`
	if st := w.call("PUT", module("traffic_policy"), map[string]any{"value": doc}, nil); st != 200 {
		t.Fatalf("put traffic_policy: %d", st)
	}
	c := w.httpsClient()
	eventually(t, 3*time.Second, "the route over the budget fails closed naming it", func() bool {
		resp, body, err := try(c, "GET", "https://budget.example.com/headers", nil)
		return err == nil && resp.StatusCode == 503 && resp.Header.Get("ngrok-error-code") == "ERR_NGROK_3210" &&
			strings.Contains(string(body), "traffic_policy") && strings.Contains(string(body), "MaxAccountPolicyCost")
	})
	if st := w.call("DELETE", "/edges/tls/"+fillers[len(fillers)-1], nil, nil); st != 204 {
		t.Fatalf("delete a TLS edge: %d", st)
	}
	var body []byte
	eventually(t, 3*time.Second, "the route's policy applies once there is room", func() bool {
		resp, b, err := try(c, "GET", "https://budget.example.com/headers", nil)
		body = b
		return err == nil && resp.StatusCode == 200
	})
	if got := upstreamSaw(t, body).Get("X-Policy"); got != "applied" {
		t.Errorf("the upstream got X-Policy %q, want the policy's %q", got, "applied")
	}
}
