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

// TestAccountPolicyBudgetOnTraffic: once account A's older edges have taken its whole traffic
// policy budget (ep.MaxAccountPolicyCost, as ep.TrafficPolicyCost estimates their documents),
// a route's policy is refused on write (400 ERR_NGROK_215 naming the limit) and the route serves
// on without it; account B's route takes the same document meanwhile, and it applies to B's
// traffic. Deleting an edge that took A's budget makes room: A's policy is then accepted and
// applies.
func TestAccountPolicyBudgetOnTraffic(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	// TLS edges, whose documents' estimates add up to the budget exactly but for less than one
	// expression's cost.
	per := ep.TrafficPolicyCost(trueExpressions(2)) - ep.TrafficPolicyCost(trueExpressions(1))
	var fillers []string
	for left := ep.MaxAccountPolicyCost; left >= ep.TrafficPolicyCost(trueExpressions(1)); {
		n := min(8000, 1+(left-ep.TrafficPolicyCost(trueExpressions(1)))/per)
		doc := trueExpressions(n)
		fillers = append(fillers, w.mustCreate("/edges/tls", map[string]any{"traffic_policy": map[string]any{"value": doc}}))
		left -= ep.TrafficPolicyCost(doc)
	}
	_, module := moduleEdge(t, w, "budget.example.com", nil)
	_, moduleB := moduleEdge(t, b, "budget-b.example.com", nil)
	doc := `{"on_http_request":[{"expressions":["req.method == 'GET'"],"actions":[{"type":"add-headers","config":{"headers":{"x-policy":"applied"}}}]}]}`
	var e apiError
	if st := w.call("PUT", module("traffic_policy"), map[string]any{"value": doc}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" ||
		!strings.Contains(e.Msg, "traffic_policy") || !strings.Contains(e.Msg, "MaxAccountPolicyCost") {
		t.Fatalf("A's policy past its budget: %d %s %q, want 400 ERR_NGROK_215 naming the limit", st, e.ErrorCode, e.Msg)
	}
	if st := b.call("PUT", moduleB("traffic_policy"), map[string]any{"value": doc}, nil); st != 200 {
		t.Fatalf("B's policy (B's budget is its own): %d", st)
	}
	c := w.httpsClient()
	saw := func(host string) string {
		var body []byte
		eventually(t, 3*time.Second, host+" serves", func() bool {
			resp, b, err := try(c, "GET", "https://"+host+"/headers", nil)
			body = b
			return err == nil && resp.StatusCode == 200
		})
		return upstreamSaw(t, body).Get("X-Policy")
	}
	eventually(t, 3*time.Second, "B's policy applies", func() bool { return saw("budget-b.example.com") == "applied" })
	if got := saw("budget.example.com"); got != "" {
		t.Errorf("A's upstream got X-Policy %q from a refused policy", got)
	}
	if st := w.call("DELETE", "/edges/tls/"+fillers[len(fillers)-1], nil, nil); st != 204 {
		t.Fatalf("delete a TLS edge: %d", st)
	}
	if st := w.call("PUT", module("traffic_policy"), map[string]any{"value": doc}, nil); st != 200 {
		t.Fatalf("A's policy once there is room: %d", st)
	}
	eventually(t, 3*time.Second, "A's policy applies once there is room", func() bool { return saw("budget.example.com") == "applied" })
}
