package store

import (
	"context"
	"fmt"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/benchcpu"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// BenchmarkCountChildren is the check every rule create makes of its policy's room for one more
// rule (ep.MaxRulesPerIPPolicy), of a policy with 10, 100 and 999 rules, run inside one write
// transaction as a create runs it: go test -run XXX -bench CountChildren -benchmem ./store/
// The rules=N runs count in the database (the read cache is left out); cached=N is the same
// count answered from SQLite's read cache, as creates after the first under a parent get it.
func BenchmarkCountChildren(b *testing.B) {
	for _, rules := range []int{10, 100, ep.MaxRulesPerIPPolicy - 1} {
		b.Run(fmt.Sprintf("rules=%d", rules), func(b *testing.B) { benchCountChildren(b, rules, false) })
	}
	b.Run(fmt.Sprintf("cached=%d", ep.MaxRulesPerIPPolicy-1), func(b *testing.B) {
		benchCountChildren(b, ep.MaxRulesPerIPPolicy-1, true)
	})
}

func benchCountChildren(b *testing.B, rules int, cached bool) {
	ctx := context.Background()
	s, err := Open(ctx, testdb.Fresh(b, testdb.Engine()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	admin, _, err := s.EnsureAccount(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	pol, err := s.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
	if err != nil {
		b.Fatal(err)
	}
	policy := pol.Base().ID
	cidr, action := "192.0.2.0/24", "allow"
	for range rules {
		if _, err := s.Create(ctx, admin, ep.IPPolicyRules, "", &ep.IPPolicyRuleCreate{CIDR: &cidr, IPPolicyID: &policy, Action: &action}); err != nil {
			b.Fatal(err)
		}
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		if !cached {
			tx.ws = nil
		}
		view := &txView{s: s, ctx: ctx, tx: tx, account: admin.AccountID}
		b.ReportAllocs()
		benchcpu.PerOp(b)
		b.ResetTimer()
		for b.Loop() {
			n, err := view.CountChildren(ep.IPPolicyRules, policy)
			if err != nil || n != rules {
				b.Fatalf("%d rules, %v", n, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
