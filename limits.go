package edgeplane

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits on what one object may hold. Without them one account could make a
// single object, and so a single response or cache entry, as large as it liked: an HTTPS edge
// embeds all its routes, and 150 routes of a megabyte each made one GET answer 149 MB. Each limit
// is checked by the Validate method or create rule of what it bounds, and refused with 400
// naming the field: with ngrok's own code where it has one (7128 routes, 7129 hostports, 7015
// headers), else ERR_NGROK_215. The wire conventions of docs/api.md list them; TestObjectLimits
// walks each at its maximum and one past it.
const (
	// MaxTrafficPolicyBytes is the largest traffic policy document (the value of a traffic_policy
	// module), in bytes.
	MaxTrafficPolicyBytes = 64 << 10
	// MaxRoutesPerEdge is the number of routes one HTTPS edge may have (ERR_NGROK_7128).
	MaxRoutesPerEdge = 64
	// MaxHostportsPerEdge is the number of hostports one edge may serve (ERR_NGROK_7129).
	MaxHostportsPerEdge = 64
	// MaxRulesPerIPPolicy is the number of rules one IP policy may have.
	MaxRulesPerIPPolicy = 1000
	// MaxHeaderEntries is the number of entries in the add or in the remove list of one headers
	// module, and the number of headers of an HTTP response backend (ERR_NGROK_7015).
	MaxHeaderEntries = 64
	// MaxUserAgentRegexes is the number of regular expressions in the allow or in the deny list of
	// one user agent filter.
	MaxUserAgentRegexes = 64
	// MaxBackendLabels is the number of labels one tunnel group backend may match.
	MaxBackendLabels = 32
	// MaxChildBackends is the number of backends one failover or weighted backend may hold.
	MaxChildBackends = 32
	// MaxModuleListEntries is the number of ids in a module's list of objects (ip_policy_ids,
	// certificate_authority_ids).
	MaxModuleListEntries = 32
	// MaxRouteBytes is the size of one HTTPS edge route as stored (its JSON document, all modules
	// included). With MaxRoutesPerEdge it bounds the response of a GET of an edge: see
	// MaxHTTPSEdgeResponseBytes.
	MaxRouteBytes = 128 << 10
	// MaxHTTPSEdgeResponseBytes bounds the body of one response showing an HTTPS edge with all its
	// routes: MaxRoutesPerEdge routes of at most MaxRouteBytes each, with the uris the server
	// adds to each, and the edge's own fields (at most MaxHostportsPerEdge hostports and bounded
	// modules). A server test creates the largest edge it can and measures its GET.
	MaxHTTPSEdgeResponseBytes = MaxRoutesPerEdge*(MaxRouteBytes+RenderSlack) + 512<<10
	// RenderSlack is what the server may add to a stored document when it shows it: its uri and
	// those of the objects it refers to.
	RenderSlack = 8 << 10
	// MaxPageBytes bounds one page of a list, counted as the stored documents of its objects and
	// of their embedded children (an HTTPS edge's routes), with RenderSlack for each: a page ends
	// early, with fewer objects than its limit and a next_page_uri, rather than pass it. A page's
	// first object is always shown; it is bounded by the request body limit (1 MiB), or, for an
	// HTTPS edge, by MaxHTTPSEdgeResponseBytes.
	MaxPageBytes = MaxHTTPSEdgeResponseBytes
)

// The traffic policies of one account's routing plan are bounded by what they compile to, not by
// their size: a document's CEL expressions and templates are compiled into the plan, and 64 KiB
// of them became 0.7 to 15 MiB of stages (measured: 280 ordinary rules, 0.7 MiB; rules of one
// expression each, 1.1 MiB; 2,700 `[n].all(x, x > 1)` macros, 6 MiB; 16,000 expressions `1>0` in
// a flow list, 15 MiB). Without a bound, 300 TLS edges with distinct documents of the second kind
// (and 24 HTTP response backends of 1 MiB) took the serve process to 658 MiB; with it, 138 to 149
// MiB, where policies that compile to nothing give 133 to 136 (cmd/edgeplane's
// TestHostilePlanRSS, which now uses backends of 512 KiB: 125 MiB). Each document is estimated by
// TrafficPolicyCost, and an account's routing plan compiles its documents, oldest object first,
// up to MaxAccountPolicyCost; an edge or route whose document does not fit fails closed (503
// naming traffic_policy and this limit), as for any module the data plane cannot apply. The API
// refuses a document that alone is over the budget (ValidatePolicyDocument), and the store one
// that fits alone but not beside the account's others (PolicyUse, PolicyOverBudget), so the
// plan's check only meets documents stored before the store kept the total.
const (
	// MaxAccountPolicyCost is the estimated memory, in bytes, of the traffic policy stages one
	// account's routing plan may hold. A document used by several edges or routes counts once
	// (they share its stage), except one with rate limits, which is compiled per route. 12 MiB
	// holds some 75 documents of 30 ordinary rules (160 KiB each), or five of 64 KiB of rules of
	// one expression (2.2 MiB); the costliest documents of 64 KiB (up to 25 MiB) do not fit even
	// alone.
	MaxAccountPolicyCost = 12 << 20
	// PolicyExpressionCost is what one CEL program of a document is estimated to compile to, in
	// bytes, before its tokens: an expression, or a template's ${…} (measured: 815 bytes for
	// "true"). PolicyTokenCost is what each token of it adds (measured: up to 127 bytes, for
	// macros), and PolicyEntryCost what each other entry of the document (a rule, an action, a
	// configuration field or list item) is estimated at.
	PolicyExpressionCost = 1024
	PolicyTokenCost      = 160
	PolicyEntryCost      = 128
)

// TrafficPolicyCost estimates the memory a traffic policy document compiles to, from its
// structure, without compiling it: PolicyExpressionCost and PolicyTokenCost per token for each
// expression (a string of a list under "expressions") and for each ${…} template in any other
// string, and PolicyEntryCost and the string's length for each other entry. A document that does
// not decode costs nothing: the plan refuses it before compiling anything. plan's
// TestPolicyCostBoundsCompiledMemory measures the costliest shapes of document found against it.
func TrafficPolicyCost(doc string) int {
	var v any
	trimmed := strings.TrimSpace(doc)
	if strings.HasPrefix(trimmed, "{") {
		if json.Unmarshal([]byte(trimmed), &v) != nil {
			return 0
		}
	} else if yaml.Unmarshal([]byte(trimmed), &v) != nil {
		return 0
	}
	return policyCost(v, false)
}

// policyCost is TrafficPolicyCost's walk of a decoded document; expressions is set for the items
// of an "expressions" list.
func policyCost(v any, expressions bool) int {
	switch v := v.(type) {
	case map[string]any:
		n := 0
		for k, x := range v {
			n += PolicyEntryCost + len(k) + policyCost(x, k == "expressions")
		}
		return n
	case []any:
		n := 0
		for _, x := range v {
			n += PolicyEntryCost + policyCost(x, expressions)
		}
		return n
	case string:
		if expressions {
			return PolicyExpressionCost + PolicyTokenCost*celTokens(v)
		}
		if t := strings.Count(v, "${"); t > 0 {
			return len(v) + t*PolicyExpressionCost + PolicyTokenCost*celTokens(v)
		}
		return len(v)
	}
	return 0
}

// celTokens counts the tokens of a CEL expression: runs of letters, digits and underscores,
// quoted literals, runs of operator characters, and each other character but white space.
func celTokens(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '\'' || c == '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				end = len(s) - i - 1
			}
			i += end + 2
		case isWordByte(c):
			for i < len(s) && isWordByte(s[i]) {
				i++
			}
		case strings.IndexByte("&|=!<>+-*/%", c) >= 0:
			for i < len(s) && strings.IndexByte("&|=!<>+-*/%", s[i]) >= 0 {
				i++
			}
		default:
			i++
		}
		n++
	}
	return n
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// Error codes of limits ngrok has its own code for.
const (
	CodeTooManyHeaders   = 7015 // more header entries than MaxHeaderEntries
	CodeTooManyRoutes    = 7128 // more routes on one edge than MaxRoutesPerEdge
	CodeTooManyHostports = 7129 // more hostports on one edge than MaxHostportsPerEdge
)

// maxEntries refuses a list of n entries when more than max are allowed, naming field.
func maxEntries(code int, field string, n, max int) error {
	if n > max {
		return Invalid(code, field, "has %d entries; at most %d are allowed", n, max)
	}
	return nil
}

// maxDocument refuses a document whose JSON is larger than max bytes, naming its largest field,
// the one to make smaller.
func maxDocument(what string, doc any, max int) error {
	b, err := json.Marshal(doc)
	if err != nil || len(b) <= max {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	largest := ""
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if largest == "" || len(fields[k]) > len(fields[largest]) {
			largest = k
		}
	}
	return Invalid(CodeInvalid, largest, "would make the %s %d bytes, more than the %d one may hold (%s is its largest field)", what, len(b), max, largest)
}

// ChildCounter is implemented by the store's transaction view: CountChildren locks the parent
// object against other writers (on PostgreSQL), so that two creates cannot both find room for
// the last child, and counts its children of collection res.
type ChildCounter interface {
	CountChildren(res *Resource, parentID string) (int, error)
}

// roomForChild refuses a new child of parentID in collection res when the parent already has max.
func roomForChild(op *Op, res *Resource, parentID string, max, code int, field, what string) error {
	cc, ok := op.Tx.(ChildCounter)
	if !ok {
		return nil
	}
	n, err := cc.CountChildren(res, parentID)
	if err != nil {
		return err
	}
	if n >= max {
		return Invalid(code, field, "%q already has %d %s; at most %d are allowed", parentID, n, what, max)
	}
	return nil
}
