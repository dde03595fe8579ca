package plan

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync"

	ep "github.com/edgeplane/edgeplane"
)

// An account's routing plan compiles its traffic policies up to ep.MaxAccountPolicyCost, each
// document estimated by ep.TrafficPolicyCost before it is parsed (parsing compiles its
// expressions; estimating only decodes it, so a document over the budget never costs its
// compiled size, not even for a moment). The documents are taken in the order their objects
// were created, oldest first, and each that fits is admitted: a new edge or route cannot take
// the policy of an older one away, and a document that does not fit leaves room for smaller ones
// after it. One that does not fit fails its edge or route closed, naming the limit
// (costCache.overBudget).

// policyUse is one compiled stage of an account's plan: a document on TLS or TCP edges (conn)
// or on routes, shared by every object using it, except a document with state or records of its
// object's own (perRoute), which is compiled for its route or edge (as policyCache keys it).
type policyUse struct {
	conn  bool
	route string
	sum   [sha256.Size]byte // the document's
}

// routePolicyUse is the use a route's document makes.
func routePolicyUse(routeID, doc string) policyUse {
	u := policyUse{sum: sha256.Sum256([]byte(doc))}
	if perRoute(doc) {
		u.route = routeID
	}
	return u
}

// refusedPolicies returns the uses of the account's traffic policies that do not fit in
// ep.MaxAccountPolicyCost (nil when all fit).
func refusedPolicies(s *Snapshot, costs *costCache) map[policyUse]bool {
	type use struct {
		id, doc string
		policyUse
	}
	var uses []use
	enabled := func(m *ep.EndpointTrafficPolicy) bool { return m != nil && m.Enabled }
	for _, e := range s.HTTPSEdges {
		for _, r := range e.Routes {
			if enabled(r.TrafficPolicy) {
				uses = append(uses, use{r.ID, r.TrafficPolicy.Value, routePolicyUse(r.ID, r.TrafficPolicy.Value)})
			}
		}
	}
	for _, e := range s.TLSEdges {
		if enabled(e.TrafficPolicy) {
			uses = append(uses, use{e.ID, e.TrafficPolicy.Value, connPolicyUse(e.ID, e.TrafficPolicy.Value)})
		}
	}
	for _, e := range s.TCPEdges {
		if enabled(e.TrafficPolicy) {
			uses = append(uses, use{e.ID, e.TrafficPolicy.Value, connPolicyUse(e.ID, e.TrafficPolicy.Value)})
		}
	}
	// Ids are a prefix and a KSUID, which sorts by the time it was made.
	sort.SliceStable(uses, func(i, j int) bool { return ksuidOf(uses[i].id) < ksuidOf(uses[j].id) })
	admitted := map[policyUse]bool{}
	var refused map[policyUse]bool
	total := 0
	for _, u := range uses {
		if admitted[u.policyUse] || refused[u.policyUse] {
			continue
		}
		if cost := costs.of(u.sum, u.doc); total+cost <= ep.MaxAccountPolicyCost {
			admitted[u.policyUse] = true
			total += cost
			continue
		}
		if refused == nil {
			refused = map[policyUse]bool{}
		}
		refused[u.policyUse] = true
	}
	return refused
}

// costCache keeps ep.TrafficPolicyCost of the documents seen, by SHA-256: estimating decodes
// the document (a few milliseconds for 64 KiB of YAML), and every rebuild of an account's plan
// estimates all its documents. It forgets everything once it holds maxCachedCosts.
const maxCachedCosts = 16384

type costCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]int
}

// of returns the estimate of doc, whose SHA-256 is k.
func (c *costCache) of(k [sha256.Size]byte, doc string) int {
	c.mu.Lock()
	cost, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return cost
	}
	cost = ep.TrafficPolicyCost(doc)
	c.mu.Lock()
	if len(c.m) >= maxCachedCosts {
		clear(c.m)
	}
	c.m[k] = cost
	c.mu.Unlock()
	return cost
}

// ksuidOf is the part of an id after its prefix.
func ksuidOf(id string) string {
	return id[strings.LastIndexByte(id, '_')+1:]
}

// overBudget is why a document (whose SHA-256 is sum) that does not fit is not applied.
func (c *costCache) overBudget(sum [sha256.Size]byte, doc string) error {
	return fmt.Errorf("the account's traffic policies are estimated to compile to more than the %d MiB one account's routing plan holds (MaxAccountPolicyCost; this document %d KiB); the policies of the oldest edges and routes are applied first",
		ep.MaxAccountPolicyCost>>20, c.of(sum, doc)>>10)
}
