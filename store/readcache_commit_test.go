package store

import (
	"context"
	"path/filepath"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// White-box tests of how the read cache follows this process's commits (readcache.go): the steps
// of a commit are taken by hand, so that another store can commit at the one moment a test needs.

type carryWorld struct {
	a, b             *Store
	admin            ep.Caller
	selector, secret string
	policy, other    string // other is never read before a test reads it
}

func newCarryWorld(t *testing.T) *carryWorld {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "carry.db")
	w := &carryWorld{}
	var err error
	for _, s := range []**Store{&w.a, &w.b} {
		if *s, err = Open(ctx, path); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*s).Close() })
	}
	if w.a.cache == nil {
		t.Fatal("no read cache")
	}
	if w.admin, _, err = w.a.EnsureAccount(ctx, "carry"); err != nil {
		t.Fatal(err)
	}
	key, err := w.a.Create(ctx, w.admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	w.selector, w.secret, _ = ep.ParseToken(*key.(*ep.APIKey).Token)
	pol, err := w.a.Create(ctx, w.admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	w.policy = pol.Base().ID
	if pol, err = w.a.Create(ctx, w.admin, ep.IPPolicies, "", &ep.IPPolicyCreate{}); err != nil {
		t.Fatal(err)
	}
	w.other = pol.Base().ID
	if err := w.a.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE scratch (k INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// describe reads the policy's description through store a (twice: the second read is a cache hit
// when the first could fill it).
func (w *carryWorld) describe(t *testing.T) string {
	t.Helper()
	var doc ep.Document
	for range 2 {
		_, d, _, err := w.a.AuthenticateGet(context.Background(), w.selector, w.secret, ep.IPPolicies, "", w.policy, "")
		if err != nil {
			t.Fatal(err)
		}
		doc = d
	}
	if doc == nil {
		return "(rendered)"
	}
	return doc.(*ep.IPPolicy).Description
}

func (w *carryWorld) updateElsewhere(t *testing.T, desc string) {
	t.Helper()
	if _, err := w.b.Update(context.Background(), w.admin, ep.IPPolicies, "", w.policy, (&ep.IPPolicyUpdate{AnnotationFields: ep.AnnotationFields{Description: &desc}}).Apply); err != nil {
		t.Fatal(err)
	}
}

// ownCommit runs a commit of store a that writes nothing the cache holds, and calls between after
// its COMMIT and before the cache settles.
func (w *carryWorld) ownCommit(t *testing.T, between func()) {
	t.Helper()
	ctx := context.Background()
	c := w.a.commit // idle: this test is its only user
	tx, err := c.begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.db.ExecContext(ctx, `INSERT INTO scratch (k) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	tx.ws.committing()
	if _, err := c.stmts[txCommit].Exec(); err != nil {
		t.Fatal(err)
	}
	between()
	tx.ws.settle(true)
}

// Another store commits right after this store's commit, before the cache settles: the change
// counter then moved by two, and the cache must not be carried to the state that includes the
// other store's write, neither while the commit settles nor after.
func TestReadCacheNotCarriedPastAnotherCommit(t *testing.T) {
	w := newCarryWorld(t)
	if got := w.describe(t); got != "" {
		t.Fatalf("description %q", got)
	}
	w.ownCommit(t, func() {
		w.updateElsewhere(t, "elsewhere")
		if got := w.describe(t); got != "elsewhere" {
			t.Fatalf("while the own commit settles: description %q, want the other store's", got)
		}
	})
	if got := w.describe(t); got != "elsewhere" {
		t.Fatalf("after the own commit settled: description %q, want the other store's", got)
	}
}

// Readers that see this store's commit before it settles are answered from the cache, for what
// the commit did not write, and a reader that misses then does not empty it; after it settles,
// the cache is at the new state.
func TestReadCacheServesThroughOwnCommit(t *testing.T) {
	w := newCarryWorld(t)
	w.describe(t)
	hits := func() uint64 { return w.a.ReadCacheStats().Hits }
	w.ownCommit(t, func() {
		before := hits()
		w.describe(t)
		if hits() != before+2 {
			t.Fatal("a read during the own commit was not answered from the cache")
		}
		if _, _, _, err := w.a.AuthenticateGet(context.Background(), w.selector, w.secret, ep.IPPolicies, "", w.other, ""); err != nil {
			t.Fatal(err)
		}
	})
	before := hits()
	w.describe(t)
	if hits() != before+2 {
		t.Fatal("a read after the own commit was not answered from the cache")
	}
}

// Inside a batch, a member reads what earlier members wrote, never the cache's older copy: an
// update names its object, and a delete (which cascades to objects nobody named) stops the batch
// from reading the cache at all.
func TestBatchReadsSeeEarlierMembers(t *testing.T) {
	w := newCarryWorld(t)
	s := w.a
	view := func(ctx context.Context, tx *wtx) *txView {
		return &txView{s: s, ctx: ctx, tx: tx, account: w.admin.AccountID}
	}
	// The check of a first batch fills the cache with the policy, and the reads make sure.
	if errs := runBatch(s, func(ctx context.Context, tx *wtx) error {
		_, err := view(ctx, tx).Exists(ep.IPPolicies, w.policy)
		return err
	}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	w.describe(t)
	update := func(ctx context.Context, tx *wtx) error {
		var doc []byte
		var version int64
		if err := tx.QueryRowContext(ctx, s.q.get, w.policy, w.admin.AccountID, ep.IPPolicies.Kind).Scan(&doc, new(any), &version); err != nil {
			return err
		}
		p, err := decode(ep.IPPolicies, doc)
		if err != nil {
			return err
		}
		p.(*ep.IPPolicy).Description = "batch"
		body, _ := storedJSON(p)
		_, err = tx.ExecContext(ctx, s.q.update, body, w.policy, version)
		return err
	}
	errs := runBatch(s, update, func(ctx context.Context, tx *wtx) error {
		d, err := view(ctx, tx).Get(ep.IPPolicies, w.policy)
		if err == nil && d.(*ep.IPPolicy).Description != "batch" {
			t.Errorf("a later member read description %q, want the earlier member's", d.(*ep.IPPolicy).Description)
		}
		return err
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if got := w.describe(t); got != "batch" {
		t.Fatalf("after the batch: description %q", got)
	}
	errs = runBatch(s, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.q.del, w.policy)
		return err
	}, func(ctx context.Context, tx *wtx) error {
		ok, err := view(ctx, tx).Exists(ep.IPPolicies, w.policy)
		if ok {
			t.Error("a later member found the policy an earlier one deleted")
		}
		return err
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
}
