package store_test

import (
	"github.com/edgeplane/edgeplane/internal/benchcpu"

	"context"
	"sync/atomic"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// Benchmarks of the store's hot paths, on SQLite (and on PostgreSQL with EDGEPLANE_TEST_ENGINE
// set to postgres): go test -run XXX -bench . -benchmem ./store/

// benchStore opens a fresh store with an account, an API key and an IP policy with one rule.
func benchStore(b *testing.B) (s *store.Store, admin ep.Caller, selector, secret, policy, rule string) {
	b.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, testdb.Fresh(b, testdb.Engine()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	admin, _, err = s.EnsureAccount(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	key, err := s.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		b.Fatal(err)
	}
	selector, secret, ok := ep.ParseToken(*key.(*ep.APIKey).Token)
	if !ok {
		b.Fatal("token does not parse")
	}
	pol, err := s.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := s.Create(ctx, admin, ep.IPPolicyRules, "", ruleBody(pol.Base().ID))
	if err != nil {
		b.Fatal(err)
	}
	return s, admin, selector, secret, pol.Base().ID, r.Base().ID
}

func ruleBody(policy string) *ep.IPPolicyRuleCreate {
	cidr, action, desc := "192.0.2.0/24", "allow", "benchmark rule"
	body := &ep.IPPolicyRuleCreate{AnnotationFields: ep.AnnotationFields{Description: &desc}, CIDR: &cidr, IPPolicyID: &policy, Action: &action}
	if err := body.Validate(); err != nil {
		panic(err)
	}
	return body
}

// BenchmarkAuthenticate is the authentication of every API request: one indexed query and a
// constant-time hash comparison.
func BenchmarkAuthenticate(b *testing.B) {
	s, _, selector, secret, _, _ := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	benchcpu.PerOp(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Authenticate(ctx, selector, secret); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGet reads and decodes one object.
func BenchmarkGet(b *testing.B) {
	s, admin, _, _, _, rule := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	benchcpu.PerOp(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Get(ctx, admin.AccountID, ep.IPPolicyRules, "", rule); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAuthenticateGet is what a GET by id costs the store: authentication and the read in
// one query (compare with BenchmarkAuthenticate plus BenchmarkGet).
func BenchmarkAuthenticateGet(b *testing.B) {
	s, _, selector, secret, _, rule := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	benchcpu.PerOp(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, _, err := s.AuthenticateGet(ctx, selector, secret, ep.IPPolicyRules, "", rule, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCreate creates IP policy rules from 16 goroutines per CPU: the write path with group
// commit on SQLite. The rules go to 256 policies in turn (more if needed to keep each under half
// of ep.MaxRulesPerIPPolicy): one policy would reach its limit, and the count each create makes
// of its policy's rules would be most of what is measured.
func BenchmarkCreate(b *testing.B) {
	s, admin, _, _, policy, _ := benchStore(b)
	ctx := context.Background()
	policies := []string{policy}
	for len(policies) < max(256, b.N/(ep.MaxRulesPerIPPolicy/2)+1) {
		pol, err := s.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
		if err != nil {
			b.Fatal(err)
		}
		policies = append(policies, pol.Base().ID)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	benchcpu.PerOp(b)
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			policy := policies[int(next.Add(1)-1)%len(policies)]
			if _, err := s.Create(ctx, admin, ep.IPPolicyRules, "", ruleBody(policy)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkList reads a page of 100 objects.
func BenchmarkList(b *testing.B) {
	s, admin, _, _, policy, _ := benchStore(b)
	ctx := context.Background()
	for range 150 {
		if _, err := s.Create(ctx, admin, ep.IPPolicyRules, "", ruleBody(policy)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	benchcpu.PerOp(b)
	b.ResetTimer()
	for b.Loop() {
		docs, more, err := s.List(ctx, admin.AccountID, ep.IPPolicyRules, "", "", 100)
		if err != nil || len(docs) != 100 || !more {
			b.Fatal(err, len(docs), more)
		}
	}
}
