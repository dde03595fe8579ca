package edgeplane

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The account's traffic policy budget is kept on write as well as applied by the routing plan:
// the API refuses a document that would take an account's estimated total past
// MaxAccountPolicyCost beside the account's other documents, so its author learns at once,
// instead of finding the edge or route failing closed on traffic. The store keeps each object's
// share (its PolicyUse) in a table of its own, written in the same transaction as the object and
// deleted with it, and sums the account's shares to check a write. The shares count the way the
// plan compiles: a document used by several objects counts once, except one compiled per object
// (PolicyPerObject), so the API never refuses what the plan would apply.

// PolicyUse is what one object's traffic policy takes of its account's budget: Key names the
// compiled stage it uses (objects whose Key is equal share one), Cost is its estimate
// (TrafficPolicyCost).
type PolicyUse struct {
	Key  string
	Cost int
}

// PolicyHolder is implemented by the documents that carry a traffic policy the routing plan
// compiles (HTTPS edge routes, TLS and TCP edges). PolicyUse returns the use of the object
// whose id is id, false when it has no enabled traffic policy.
type PolicyHolder interface {
	PolicyUse(id string) (PolicyUse, bool)
}

// PolicyPerObject reports whether a document may hold what makes its compiled stage its route's
// (or edge's) own: state (rate-limit, circuit-breaker), log records naming it (log), the
// endpoint.* variables, the account whose internal endpoints it reaches (forward-internal,
// http-request). The test is of the text, so it may say yes for a document without them
// (say a path with "log" in it): such a document is only compiled once per object instead of
// once.
func PolicyPerObject(doc string) bool {
	return strings.Contains(doc, "rate-limit") || strings.Contains(doc, "circuit-breaker") ||
		strings.Contains(doc, "log") || strings.Contains(doc, "endpoint.") ||
		strings.Contains(doc, "forward-internal") || strings.Contains(doc, "http-request")
}

// policyUseOf is the use of an enabled traffic policy m on the object id: on_tcp_connect stages
// (conn, TLS and TCP edges) and HTTP stages (routes) are compiled apart, so their keys differ.
func policyUseOf(m *EndpointTrafficPolicy, id string, conn bool) (PolicyUse, bool) {
	if m == nil || !m.Enabled {
		return PolicyUse{}, false
	}
	sum := sha256.Sum256([]byte(m.Value))
	key := "route:"
	if conn {
		key = "conn:"
	}
	key += hex.EncodeToString(sum[:])
	if PolicyPerObject(m.Value) {
		key += ":" + id
	}
	return PolicyUse{Key: key, Cost: TrafficPolicyCost(m.Value)}, true
}

// PolicyUse is the route's traffic policy's share of the account's budget.
func (r *HTTPSEdgeRoute) PolicyUse(id string) (PolicyUse, bool) {
	return policyUseOf(r.TrafficPolicy, id, false)
}

// PolicyUse is the edge's traffic policy's share of the account's budget.
func (e *TLSEdge) PolicyUse(id string) (PolicyUse, bool) {
	return policyUseOf(e.TrafficPolicy, id, true)
}

// PolicyUse is the edge's traffic policy's share of the account's budget.
func (e *TCPEdge) PolicyUse(id string) (PolicyUse, bool) {
	return policyUseOf(e.TrafficPolicy, id, true)
}

// PolicyOverBudget is the refusal of a traffic policy that fits the budget alone but not beside
// the account's other ones: 400 ERR_NGROK_215 on traffic_policy, naming the limit and the
// account's total, never another account's anything (the budget is the account's own).
func PolicyOverBudget(cost, others int) *Error {
	return Invalid(CodeInvalid, "traffic_policy",
		"would compile to an estimated %d KiB of traffic policy, and the account's other traffic policies already take %d KiB of the %d KiB an account's routing plan may hold (MaxAccountPolicyCost, docs/api.md): delete, disable or shorten one of them, or this one",
		cost>>10, others>>10, MaxAccountPolicyCost>>10)
}
