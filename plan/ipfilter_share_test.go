package plan

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/memtest"
)

// ipRoutes is an account of one HTTPS edge whose routes have ip_restriction on policies.
func ipRoutes(rules []*ep.IPPolicyRule, routes ...[]string) *Snapshot {
	e := &ep.HTTPSEdge{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_ip"}}}
	for i, ids := range routes {
		m := &ep.EndpointIPPolicy{Enabled: true}
		for _, id := range ids {
			m.IPPolicies = append(m.IPPolicies, &ep.Ref{ID: id})
		}
		e.Routes = append(e.Routes, &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: fmt.Sprintf("edghtsrt_%03d", i)},
			MatchType: ep.MatchPathPrefix, Match: fmt.Sprintf("/%03d", i), IPRestriction: m})
	}
	return &Snapshot{Account: "acct_ip", HTTPSEdges: []*ep.HTTPSEdge{e}, Rules: rules}
}

func rule(policy, action, cidr string) *ep.IPPolicyRule {
	return &ep.IPPolicyRule{IPPolicy: &ep.Ref{ID: policy}, Action: action, CIDR: cidr}
}

// TestIPRestrictionUnionOfPolicies: a route's ip_restriction applies the union of its policies'
// rules (deny first, then allow, refused when any allow rule exists), a deleted policy adds
// nothing, and a rule that does not parse refuses everyone.
func TestIPRestrictionUnionOfPolicies(t *testing.T) {
	rules := []*ep.IPPolicyRule{rule("ipp_allow", "allow", "10.0.0.0/8"), rule("ipp_deny", "deny", "10.1.0.0/16"),
		rule("ipp_bad", "allow", "not a cidr")}
	a := testLive.Build(ipRoutes(rules, []string{"ipp_allow", "ipp_deny", "ipp_gone"}, []string{"ipp_deny"}, []string{"ipp_deny", "ipp_bad"}), nil)
	for _, c := range []struct {
		route int
		addr  string
		want  bool
	}{
		{0, "10.2.3.4", true}, {0, "10.1.2.3", false}, {0, "192.0.2.1", false},
		{1, "10.1.2.3", false}, {1, "192.0.2.1", true},
		{2, "192.0.2.1", false}, {2, "10.2.3.4", false},
	} {
		rt := a.HTTPS[0].Routes[c.route]
		if got := rt.Chain.AllowConn(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("route %s, %s: admitted %v, want %v", rt.ID, c.addr, got, c.want)
		}
	}
}

// TestIPRestrictionRulesShared: routes referring to the same IP policies share their parsed
// rules. 64 routes, each on 32 policies of 1,000 rules (the most one module may refer to), held
// a copy of all 32,000 rules each before: 72 MiB; now the plan keeps one (1 MiB).
func TestIPRestrictionRulesShared(t *testing.T) {
	const policies, perPolicy, routes = ep.MaxModuleListEntries, ep.MaxRulesPerIPPolicy, ep.MaxRoutesPerEdge
	var rules []*ep.IPPolicyRule
	var ids []string
	for p := range policies {
		id := fmt.Sprintf("ipp_%02d", p)
		ids = append(ids, id)
		for r := range perPolicy {
			rules = append(rules, rule(id, "allow", fmt.Sprintf("10.%d.%d.0/24", p, r%256)))
		}
	}
	all := make([][]string, routes)
	for i := range all {
		all[i] = ids
	}
	s := ipRoutes(rules, all...)
	before := memtest.LiveHeap()
	a := testLive.Build(s, nil)
	kept := int64(memtest.LiveHeap()) - int64(before)
	t.Logf("%d routes on %d policies of %d rules: the plan keeps %d KiB", routes, policies, perPolicy, kept>>10)
	if kept > 4<<20 {
		t.Errorf("the plan keeps %d KiB; at most 4 MiB expected with the rules shared", kept>>10)
	}
	if rt := a.HTTPS[0].Routes[routes-1]; !rt.Chain.AllowConn(netip.MustParseAddr("10.31.7.1")) || rt.Chain.AllowConn(netip.MustParseAddr("192.0.2.1")) {
		t.Error("the shared rules do not apply")
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(s)
}
