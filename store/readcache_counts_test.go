package store

import (
	"context"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// White-box tests of the child counts the read cache keeps (readcache_counts.go): whatever was
// written, by this store's batches (members that fail included) or by another store, a count
// answered inside a write transaction is the database's.

// countRules counts the policy's rules as a create does, inside a write transaction of store s.
func (w *carryWorld) countRules(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.inTx(context.Background(), func(ctx context.Context, tx *wtx) error {
		var err error
		n, err = (&txView{s: s, ctx: ctx, tx: tx, account: w.admin.AccountID}).CountChildren(ep.IPPolicyRules, w.policy)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// rulesInDatabase counts the policy's rules with a query of its own.
func (w *carryWorld) rulesInDatabase(t *testing.T) int {
	t.Helper()
	var n int
	if err := w.a.r.QueryRowContext(context.Background(), `SELECT count(*) FROM objects WHERE parent_id = ? AND kind = ?`,
		w.policy, ep.IPPolicyRules.Kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insertRule writes a rule row of the policy as Create does (id may repeat one, to fail).
func (w *carryWorld) insertRule(id string, last bool) txFunc {
	return func(ctx context.Context, tx *wtx) error {
		exec := tx.ExecContext
		if last {
			exec = tx.ExecLast
		}
		_, err := exec(ctx, w.a.q.insert, id, w.admin.AccountID, ep.IPPolicyRules.Kind, nullable(w.policy),
			ep.FormatTime(time.Now()), `{"cidr":"192.0.2.0/24","action":"allow"}`)
		return err
	}
}

func newRuleID() string {
	id, _ := ep.NewID(ep.IPPolicyRules.Prefix)
	return id
}

// cachedRules is the cache's count of the policy's rules, if it holds one at its state.
func (w *carryWorld) cachedRules() (int, bool) {
	c := w.a.cache
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.counts[childKey{w.policy, w.admin.AccountID, ep.IPPolicyRules.Kind}]
	return n, ok
}

func TestChildCountsFollowWrites(t *testing.T) {
	w := newCarryWorld(t)
	ctx := context.Background()
	cidr, action := "192.0.2.0/24", "allow"
	create := func(s *Store) string {
		t.Helper()
		d, err := s.Create(ctx, w.admin, ep.IPPolicyRules, "", &ep.IPPolicyRuleCreate{CIDR: &cidr, IPPolicyID: &w.policy, Action: &action})
		if err != nil {
			t.Fatal(err)
		}
		return d.Base().ID
	}
	check := func(step string) {
		t.Helper()
		want := w.rulesInDatabase(t)
		if got := w.countRules(t, w.a); got != want {
			t.Fatalf("%s: counted %d rules, the database has %d", step, got, want)
		}
	}

	// Creates fill the count and carry it across their own commits.
	var ids []string
	for range 3 {
		ids = append(ids, create(w.a))
	}
	if n, ok := w.cachedRules(); !ok || n != 3 {
		t.Fatalf("after 3 creates the cache holds %d (%v), want 3", n, ok)
	}
	check("after 3 creates")

	// A batch: a member that inserts and then fails, one whose insert itself fails (a repeated
	// id, without a savepoint), one that inserts and commits, and members counting after each.
	// A count inside the batch after an insert is the transaction's; after the batch the cache
	// holds exactly the committed rows.
	dup := ids[0]
	counts := make([]int, 3)
	counter := func(i int) txFunc {
		return func(ctx context.Context, tx *wtx) error {
			var err error
			counts[i], err = (&txView{s: w.a, ctx: ctx, tx: tx, account: w.admin.AccountID}).CountChildren(ep.IPPolicyRules, w.policy)
			return err
		}
	}
	errs := runBatch(w.a,
		func(ctx context.Context, tx *wtx) error {
			if err := w.insertRule(newRuleID(), false)(ctx, tx); err != nil {
				return err
			}
			return errRule
		},
		counter(0),
		w.insertRule(dup, true),
		counter(1),
		w.insertRule(newRuleID(), true),
		counter(2),
	)
	if errs[0] != errRule || errs[2] == nil || errs[1] != nil || errs[3] != nil || errs[4] != nil || errs[5] != nil {
		t.Fatalf("batch answers %v", errs)
	}
	if counts[0] != 3 || counts[1] != 3 || counts[2] != 4 {
		t.Fatalf("counts inside the batch %v, want [3 3 4]", counts)
	}
	if n, ok := w.cachedRules(); ok && n != 4 {
		t.Fatalf("after the batch the cache holds %d rules, want 4", n)
	}
	check("after the batch")

	// Another store's create, then this store's delete.
	create(w.b)
	check("after another store's create")
	if err := w.a.Delete(ctx, w.admin, ep.IPPolicyRules, "", ids[1]); err != nil {
		t.Fatal(err)
	}
	check("after a delete")
	create(w.a)
	check("after a create following the delete")
	if got := w.countRules(t, w.a); got != 5 {
		t.Fatalf("%d rules, want 5", got)
	}
}
