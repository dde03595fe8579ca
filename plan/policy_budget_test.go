package plan

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/internal/memtest"
)

// policyShapes are 64 KiB traffic policy documents of the shapes that compile to the most memory
// per byte found so far, each distinct per seed.
var policyShapes = map[string]func(seed int) string{
	"rules of one expression": func(seed int) string { return memtest.DenseConnPolicy(seed, ep.MaxTrafficPolicyBytes) },
	"one rule of many expressions": func(seed int) string {
		return fill("on_tcp_connect:\n- actions: [{type: deny}]\n  expressions:\n", func(j int) string {
			return fmt.Sprintf("  - \"conn.client_port!=%d\"\n", seed*100000+j)
		})
	},
	"macros": func(seed int) string {
		return fill("on_http_request:\n- actions: [{type: deny}]\n  expressions:\n", func(j int) string {
			return fmt.Sprintf("  - \"[%d].all(x,x>1)\"\n", seed*100000+j)
		})
	},
	"one rule of constant expressions": func(seed int) string {
		return fill(fmt.Sprintf("on_tcp_connect:\n- name: r%d\n  actions: [{type: deny}]\n  expressions:\n", seed), func(j int) string {
			return "  - \"true\"\n"
		})
	},
	"one rule of short expressions": func(seed int) string {
		return fill(fmt.Sprintf("on_tcp_connect:\n- name: r%d\n  actions: [{type: deny}]\n  expressions:\n", seed), func(j int) string {
			return fmt.Sprintf("  - \"%d>0\"\n", j%10)
		})
	},
	"a flow list of short expressions": func(seed int) string {
		head, tail := fmt.Sprintf("on_tcp_connect: [{name: r%d, actions: [{type: deny}], expressions: [1>0", seed), "]}]"
		return head + strings.Repeat(",1>0", (ep.MaxTrafficPolicyBytes-len(head)-len(tail))/4) + tail
	},
	"one action of a long CIDR list": func(seed int) string {
		return fill(fmt.Sprintf("on_tcp_connect:\n- actions:\n  - type: restrict-ips\n    config:\n      enforce: true\n      deny:\n        - 10.%d.0.0/24\n", seed), func(j int) string {
			return fmt.Sprintf("        - 10.%d.%d.%d/32\n", j>>16&255, j>>8&255, j&255)
		})
	},
	"ordinary rules": func(seed int) string {
		return fill("on_http_request:\n", func(j int) string {
			return fmt.Sprintf("  - name: admin-%d\n    expressions:\n      - \"req.url.path.startsWith('/admin/%d') && !inCidrRange(conn.client_ip, '10.0.0.0/8')\"\n"+
				"    actions:\n      - type: custom-response\n        config: {status_code: 403, content: \"not here\"}\n", seed, j)
		})
	},
	"tiny rules": func(seed int) string {
		return fill("on_tcp_connect:\n", func(j int) string {
			return fmt.Sprintf("- {expressions: [\"%d>1\"], actions: [{type: deny}]}\n", seed*100000+j)
		})
	},
	"request attributes": func(seed int) string {
		return fill("on_http_request:\n", func(j int) string {
			return fmt.Sprintf("- {expressions: [\"req.headers['x%d'][0] == req.url.query_params['q'][0] && req.url.path != req.host\"], actions: [{type: deny}]}\n", seed*100000+j)
		})
	},
	"header templates": func(seed int) string {
		return fill("on_http_request:\n- actions:\n  - type: add-headers\n    config:\n      headers:\n", func(j int) string {
			return fmt.Sprintf("        x-%d: \"${req.url.path}${conn.client_ip}\"\n", seed*100000+j)
		})
	},
	"restrict-ips lists": func(seed int) string {
		return fill("on_tcp_connect:\n", func(j int) string {
			return fmt.Sprintf("  - actions: [{type: restrict-ips, config: {deny: [\"10.%d.%d.0/24\"]}}]\n", j%256, (j+seed)%256)
		})
	},
}

// fill is head followed by part(0), part(1), … as long as the document stays within
// ep.MaxTrafficPolicyBytes.
func fill(head string, part func(j int) string) string {
	return memtest.Fill(head, ep.MaxTrafficPolicyBytes, part)
}

// TestPolicyCostBoundsCompiledMemory: for each of the costliest shapes of document, the memory
// its stage keeps is within ep.TrafficPolicyCost's estimate, so the account's budget bounds what
// its plan holds.
func TestPolicyCostBoundsCompiledMemory(t *testing.T) {
	const docs = 2
	for name, shape := range policyShapes {
		before := memtest.LiveHeap()
		stages := make([]any, docs)
		cost := 0
		for i := range stages {
			doc := shape(i)
			cost = ep.TrafficPolicyCost(doc)
			p, err := ep.ParseTrafficPolicy(doc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(p.OnTCPConnect) > 0 {
				stages[i], err = enforce.NewConnPolicy(p)
			} else {
				stages[i], err = enforce.NewTrafficPolicy(p)
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		kept := (int64(memtest.LiveHeap()) - int64(before)) / docs
		t.Logf("%s: a %d KiB document's stage keeps %d KiB, estimated %d KiB", name, len(shape(0))>>10, kept>>10, cost>>10)
		if kept > int64(cost) {
			t.Errorf("%s: the stage keeps %d KiB, more than the %d KiB estimated", name, kept>>10, cost>>10)
		}
		runtime.KeepAlive(stages)
	}
}

// costlyDoc is a document of phase estimated at target bytes or a little less: one rule of
// "true" expressions.
func costlyDoc(phase string, target int) string {
	doc := func(n int) string {
		return phase + `: [{actions: [{type: deny}], expressions: [` + strings.TrimSuffix(strings.Repeat(`"true",`, n), ",") + `]}]`
	}
	base := ep.TrafficPolicyCost(doc(0))
	return doc((target - base) / (ep.TrafficPolicyCost(doc(1)) - base))
}

// budgetEdges is an account of n TLS edges, created in order, each with doc(i) as its policy.
func budgetEdges(n int, doc func(i int) string) *Snapshot {
	s := &Snapshot{Account: "acct_budget"}
	for i := range n {
		id := fmt.Sprintf("edgtls_%027d", i) // ids in creation order
		s.TLSEdges = append(s.TLSEdges, &ep.TLSEdge{Edge: ep.Edge{Meta: ep.Meta{ID: id}},
			TrafficPolicy: &ep.EndpointTrafficPolicy{Enabled: true, Value: doc(i)}})
	}
	return s
}

// TestAccountPolicyBudget: an account's plan compiles its documents, oldest object first, as
// long as they fit in ep.MaxAccountPolicyCost; the edges whose documents do not fit fail closed
// naming the limit, and what the plan keeps stays within the budget. A document shared by many
// edges counts once, and a smaller one after a refused one still fits.
func TestAccountPolicyBudget(t *testing.T) {
	const edges = 40
	doc := func(i int) string { return memtest.DenseConnPolicy(i, ep.MaxTrafficPolicyBytes) }
	// The edges that fit: their documents' costs differ a little (their numbers' digits).
	fits := map[int]bool{}
	for i, total := 0, 0; i < edges; i++ {
		if c := ep.TrafficPolicyCost(doc(i)); total+c <= ep.MaxAccountPolicyCost {
			fits[i], total = true, total+c
		}
	}
	fit := len(fits)
	before := memtest.LiveHeap()
	a := testLive.Build(budgetEdges(edges, doc), nil)
	kept := int64(memtest.LiveHeap()) - int64(before)
	t.Logf("%d edges of distinct %d KiB documents estimated %d KiB each: %d fit; the plan keeps %d KiB",
		edges, ep.MaxTrafficPolicyBytes>>10, ep.TrafficPolicyCost(doc(0))>>10, fit, kept>>10)
	applied := 0
	for i, e := range a.TLS {
		switch {
		case e.Policy != nil && e.Unenforced == "":
			applied++
			if !fits[i] {
				t.Errorf("edge %d of %d has its policy applied; only %v fit", i, edges, fits)
			}
		case fits[i]:
			t.Errorf("edge %d fits but was refused: %q", i, e.Unenforced)
		case strings.HasPrefix(e.Unenforced, "traffic_policy (") && strings.Contains(e.Unenforced, "MaxAccountPolicyCost"):
		default:
			t.Errorf("edge %d: policy %v, unenforced %q", i, e.Policy != nil, e.Unenforced)
		}
	}
	if applied != fit || fit == 0 {
		t.Errorf("%d edges have their policies applied; want %d", applied, fit)
	}
	if kept > ep.MaxAccountPolicyCost+4<<20 {
		t.Errorf("the plan keeps %d KiB, over the %d KiB budget", kept>>10, ep.MaxAccountPolicyCost>>10)
	}
	runtime.KeepAlive(a)

	// One document on every edge is compiled once and counts once; after it, a document that
	// does not fit is refused, and a small one still fits.
	small := "on_tcp_connect: [{actions: [{type: deny}]}]"
	b := testLive.Build(budgetEdges(edges+2, func(i int) string {
		switch i {
		case edges:
			return costlyDoc("on_tcp_connect", ep.MaxAccountPolicyCost)
		case edges + 1:
			return small
		}
		return doc(0)
	}), nil)
	for i, e := range b.TLS[:edges] {
		if e.Policy == nil || e.Policy != b.TLS[0].Policy {
			t.Fatalf("edge %d of a shared document: %q", i, e.Unenforced)
		}
	}
	if !strings.Contains(b.TLS[edges].Unenforced, "MaxAccountPolicyCost") {
		t.Errorf("the document over the rest of the budget: %q", b.TLS[edges].Unenforced)
	}
	if e := b.TLS[edges+1]; e.Policy == nil {
		t.Errorf("a small document after a refused one: %q", e.Unenforced)
	}
}

// TestAccountPolicyBudgetOldestFirst: the budget admits documents in the order their objects
// were created, whatever the order of the snapshot, so a new object never takes the policy of an
// older one away; routes and edges share it, and route documents are refused like edges'.
func TestAccountPolicyBudgetOldestFirst(t *testing.T) {
	// Seeds 1 to 9 make documents of one cost (numbers of five digits).
	big := func(i int) string { return memtest.DenseConnPolicy(i+1, ep.MaxTrafficPolicyBytes) }
	fit := ep.MaxAccountPolicyCost / ep.TrafficPolicyCost(big(0))
	if fit < 2 || fit > 8 || ep.TrafficPolicyCost(big(fit-1)) != ep.TrafficPolicyCost(big(0)) {
		t.Fatalf("%d documents fit; the test needs 2 to 8 of one cost", fit)
	}
	s := budgetEdges(fit, big)
	// A route older than every edge, with an HTTP document as large: it comes first, and so the
	// newest edge no longer fits.
	routeDoc := costlyDoc("on_http_request", ep.TrafficPolicyCost(big(0)))
	s.HTTPSEdges = []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_" + strings.Repeat("0", 27)}},
		Routes: []*ep.HTTPSEdgeRoute{{Meta: ep.Meta{ID: "edghtsrt_" + strings.Repeat("0", 26) + "0"}, MatchType: ep.MatchPathPrefix, Match: "/",
			TrafficPolicy: &ep.EndpointTrafficPolicy{Enabled: true, Value: routeDoc}}}}}
	// The snapshot's order is newest first; the budget's is by id.
	for i, j := 0, len(s.TLSEdges)-1; i < j; i, j = i+1, j-1 {
		s.TLSEdges[i], s.TLSEdges[j] = s.TLSEdges[j], s.TLSEdges[i]
	}
	a := testLive.Build(s, nil)
	if r := a.HTTPS[0].Routes[0]; r.Unenforced != "" {
		t.Fatalf("the oldest object's document: %q", r.Unenforced)
	}
	for _, e := range a.TLS {
		newest := e.ID == fmt.Sprintf("edgtls_%027d", fit-1)
		if refused := strings.Contains(e.Unenforced, "MaxAccountPolicyCost"); refused != newest {
			t.Errorf("%s: refused %v (only the newest edge should be): %q", e.ID, refused, e.Unenforced)
		}
	}
	// A route's document over the budget fails the route closed too.
	s.HTTPSEdges[0].Routes[0].Meta.ID = "edghtsrt_" + strings.Repeat("z", 27)
	s.HTTPSEdges[0].Routes[0].TrafficPolicy.Value = strings.Replace(routeDoc, `"true"`, `"false"`, 1)
	for i := range s.TLSEdges {
		s.TLSEdges[i].TrafficPolicy.Value = big(i)
	}
	if r := testLive.Build(s, nil).HTTPS[0].Routes[0]; !strings.HasPrefix(r.Unenforced, "traffic_policy (") || !strings.Contains(r.Unenforced, "MaxAccountPolicyCost") {
		t.Errorf("the newest route's document over the budget: %q", r.Unenforced)
	}
}
