package store_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// The SQLite read cache (readcache.go) answers repeated reads from memory only while the
// database is unchanged: these tests change it behind the reading store's back — through a
// second store on the same file, as another edgeplane process would, and through the sqlite3
// program (the C library, not this driver) — and require the very next read to see the change.

type cacheWorld struct {
	a, b             *store.Store // two stores on one file: a reads, b writes behind its back
	path             string
	admin            ep.Caller
	selector, secret string
	policy           string
}

func newCacheWorld(t *testing.T) *cacheWorld {
	t.Helper()
	ctx := context.Background()
	path := strings.TrimPrefix(testdb.Fresh(t, "sqlite"), "sqlite:")
	w := &cacheWorld{path: path}
	var err error
	if w.a, err = store.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.a.Close() })
	if w.b, err = store.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.b.Close() })
	if w.admin, _, err = w.b.EnsureAccount(ctx, "cache"); err != nil {
		t.Fatal(err)
	}
	key, err := w.b.Create(ctx, w.admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	w.selector, w.secret, _ = ep.ParseToken(*key.(*ep.APIKey).Token)
	desc := "first"
	pol, err := w.b.Create(ctx, w.admin, ep.IPPolicies, "", &ep.IPPolicyCreate{AnnotationFields: ep.AnnotationFields{Description: &desc}})
	if err != nil {
		t.Fatal(err)
	}
	w.policy = pol.Base().ID
	return w
}

// read is a GET of the policy through store a, twice: the second must come from the cache when
// the first found it (what is not found is not cached).
func (w *cacheWorld) read(t *testing.T) (*ep.IPPolicy, error) {
	t.Helper()
	var doc ep.Document
	var err error
	for i := range 2 {
		before := w.a.ReadCacheStats()
		_, doc, _, err = w.a.AuthenticateGet(context.Background(), w.selector, w.secret, ep.IPPolicies, "", w.policy, "")
		if after := w.a.ReadCacheStats(); i == 1 && err == nil && after.Hits != before.Hits+1 {
			t.Fatalf("the repeated read was not answered from the cache: %+v then %+v", before, after)
		}
	}
	if err != nil {
		return nil, err
	}
	return doc.(*ep.IPPolicy), nil
}

func TestReadCacheSeesWritesOfAnotherStore(t *testing.T) {
	w := newCacheWorld(t)
	ctx := context.Background()
	if p, err := w.read(t); err != nil || p.Description != "first" {
		t.Fatalf("read: %+v %v", p, err)
	}

	// An update through the other store is seen by the next read.
	desc := "second"
	if _, err := w.b.Update(ctx, w.admin, ep.IPPolicies, "", w.policy, (&ep.IPPolicyUpdate{AnnotationFields: ep.AnnotationFields{Description: &desc}}).Apply); err != nil {
		t.Fatal(err)
	}
	if p, err := w.read(t); err != nil || p.Description != "second" {
		t.Fatalf("after an update elsewhere: %+v %v", p, err)
	}

	// Another account's key finds nothing under the same id, cached or not.
	other, _, err := w.b.EnsureAccount(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	okey, err := w.b.Create(ctx, other, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	osel, osec, _ := ep.ParseToken(*okey.(*ep.APIKey).Token)
	if _, err := w.read(t); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, _, _, err := w.a.AuthenticateGet(ctx, osel, osec, ep.IPPolicies, "", w.policy, "")
		wantCode(t, err, 404, ep.CodeNotFound)
	}
	// A wrong secret for a cached key is refused.
	_, _, _, err = w.a.AuthenticateGet(ctx, w.selector, strings.Repeat("A", 52), ep.IPPolicies, "", w.policy, "")
	wantErr(t, err, store.ErrUnknownKey)
	if _, err := w.a.Authenticate(ctx, w.selector, strings.Repeat("A", 52)); err == nil {
		t.Fatal("a wrong secret authenticated")
	}

	// A delete of the object, then of the key, through the other store.
	if err := w.b.Delete(ctx, w.admin, ep.IPPolicies, "", w.policy); err != nil {
		t.Fatal(err)
	}
	_, err = w.read(t)
	wantCode(t, err, 404, ep.CodeNotFound)
	keyID := w.keyID(t)
	if err := w.b.Delete(ctx, w.admin, ep.APIKeys, "", keyID); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = w.a.AuthenticateGet(ctx, w.selector, w.secret, ep.IPPolicies, "", w.policy, "")
	wantErr(t, err, store.ErrUnknownKey)
	_, err = w.a.Authenticate(ctx, w.selector, w.secret)
	wantErr(t, err, store.ErrUnknownKey)
}

func (w *cacheWorld) keyID(t *testing.T) string {
	t.Helper()
	c, err := w.a.Authenticate(context.Background(), w.selector, w.secret)
	if err != nil {
		t.Fatal(err)
	}
	return c.KeyID
}

// TestReadCacheSeesWritesOfAnotherSQLite changes the database with the sqlite3 program: another
// SQLite implementation in another process, which knows nothing of edgeplane.
func TestReadCacheSeesWritesOfAnotherSQLite(t *testing.T) {
	bin, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 program not installed")
	}
	w := newCacheWorld(t)
	ctx := context.Background()
	if _, err := w.read(t); err != nil {
		t.Fatal(err)
	}
	if _, err := w.a.Authenticate(ctx, w.selector, w.secret); err != nil {
		t.Fatal(err)
	}
	sqlite := func(stmt string) {
		t.Helper()
		cmd := exec.Command(bin, w.path, ".timeout 10000", stmt)
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("sqlite3 %s: %v %s", stmt, err, out)
		}
	}
	sqlite(`UPDATE objects SET doc = json_set(doc, '$.description', 'edited by hand') WHERE id = '` + w.policy + `'`)
	if p, err := w.read(t); err != nil || p.Description != "edited by hand" {
		t.Fatalf("after a change by sqlite3: %+v %v", p, err)
	}
	// The key's owner made inactive by hand: refused on the next request, both ways.
	sqlite(`UPDATE principals SET active = 0`)
	_, err = w.a.Authenticate(ctx, w.selector, w.secret)
	wantErr(t, err, store.ErrInactiveKey)
	_, _, _, err = w.a.AuthenticateGet(ctx, w.selector, w.secret, ep.IPPolicies, "", w.policy, "")
	wantErr(t, err, store.ErrInactiveKey)
	// A checkpoint that empties the WAL changes no data; reads go on (and cache again).
	sqlite(`UPDATE principals SET active = 1`)
	sqlite(`PRAGMA wal_checkpoint(TRUNCATE)`)
	if p, err := w.read(t); err != nil || p.Description != "edited by hand" {
		t.Fatalf("after a checkpoint: %+v %v", p, err)
	}
	sqlite(`DELETE FROM tokens`)
	_, err = w.a.Authenticate(ctx, w.selector, w.secret)
	wantErr(t, err, store.ErrUnknownKey)
}

// TestReadCacheOwnWrites: this store's own writes are seen by its next read, and with the cache
// off every read goes to the database.
func TestReadCacheOwnWrites(t *testing.T) {
	w := newCacheWorld(t)
	ctx := context.Background()
	if _, err := w.read(t); err != nil {
		t.Fatal(err)
	}
	desc := "own"
	if _, err := w.a.Update(ctx, w.admin, ep.IPPolicies, "", w.policy, (&ep.IPPolicyUpdate{AnnotationFields: ep.AnnotationFields{Description: &desc}}).Apply); err != nil {
		t.Fatal(err)
	}
	if p, err := w.read(t); err != nil || p.Description != "own" {
		t.Fatalf("after an own update: %+v %v", p, err)
	}

	off, err := store.OpenWith(ctx, w.path, store.Options{NoReadCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	for range 3 {
		if _, _, _, err := off.AuthenticateGet(ctx, w.selector, w.secret, ep.IPPolicies, "", w.policy, ""); err != nil {
			t.Fatal(err)
		}
	}
	if st := off.ReadCacheStats(); st != (store.ReadCacheStats{}) {
		t.Fatalf("a store without read cache counted %+v", st)
	}
}

// rule creates a rule of the policy through s.
func (w *cacheWorld) rule(t *testing.T, s *store.Store, policy string) error {
	t.Helper()
	cidr, action := "10.0.0.0/8", "allow"
	_, err := s.Create(context.Background(), w.admin, ep.IPPolicyRules, "", &ep.IPPolicyRuleCreate{CIDR: &cidr, Action: &action, IPPolicyID: &policy})
	return err
}

// TestReadCacheCarriedAcrossOwnCommits: a commit of this store's own keeps what it did not write
// in the cache (a server that is written to all the time still authenticates from memory), drops
// what it wrote, and a commit of another store in between still empties the cache.
func TestReadCacheCarriedAcrossOwnCommits(t *testing.T) {
	w := newCacheWorld(t)
	ctx := context.Background()
	if _, err := w.read(t); err != nil {
		t.Fatal(err)
	}
	hitNext := func(what string, want bool) {
		t.Helper()
		before := w.a.ReadCacheStats()
		if _, _, _, err := w.a.AuthenticateGet(ctx, w.selector, w.secret, ep.IPPolicies, "", w.policy, ""); err != nil {
			t.Fatal(err)
		}
		if hit := w.a.ReadCacheStats().Hits == before.Hits+1; hit != want {
			t.Fatalf("%s: answered from the cache %v, want %v", what, hit, want)
		}
	}
	// Creates of rules: the policy and the key stay cached.
	for range 3 {
		if err := w.rule(t, w.a, w.policy); err != nil {
			t.Fatal(err)
		}
	}
	hitNext("after own creates", true)
	before := w.a.ReadCacheStats()
	if _, err := w.a.Authenticate(ctx, w.selector, w.secret); err != nil {
		t.Fatal(err)
	}
	if w.a.ReadCacheStats().Hits != before.Hits+1 {
		t.Fatal("the key was not answered from the cache after own creates")
	}

	// An own update of the policy: its entry goes, and the next read sees the update.
	desc := "own"
	if _, err := w.a.Update(ctx, w.admin, ep.IPPolicies, "", w.policy, (&ep.IPPolicyUpdate{AnnotationFields: ep.AnnotationFields{Description: &desc}}).Apply); err != nil {
		t.Fatal(err)
	}
	hitNext("right after an own update of the object", false)
	if p, err := w.read(t); err != nil || p.Description != "own" {
		t.Fatalf("after an own update: %+v %v", p, err)
	}

	// Another store commits, then this one: the cache cannot know what the other wrote.
	desc = "elsewhere"
	if _, err := w.b.Update(ctx, w.admin, ep.IPPolicies, "", w.policy, (&ep.IPPolicyUpdate{AnnotationFields: ep.AnnotationFields{Description: &desc}}).Apply); err != nil {
		t.Fatal(err)
	}
	if err := w.rule(t, w.a, w.policy); err != nil {
		t.Fatal(err)
	}
	if p, err := w.read(t); err != nil || p.Description != "elsewhere" {
		t.Fatalf("after another store's update and an own create: %+v %v", p, err)
	}

	// An own delete of the API key: refused at once.
	if err := w.a.Delete(ctx, w.admin, ep.APIKeys, "", w.keyID(t)); err != nil {
		t.Fatal(err)
	}
	_, err := w.a.Authenticate(ctx, w.selector, w.secret)
	wantErr(t, err, store.ErrUnknownKey)
	_, _, _, err = w.a.AuthenticateGet(ctx, w.selector, w.secret, ep.IPPolicies, "", w.policy, "")
	wantErr(t, err, store.ErrUnknownKey)
}

// TestCreateChecksAgainstTheDatabaseAfterAnotherStore: a create's check of the object it names
// may be answered from the cache only at the state the create's transaction starts from; after
// another store deleted the policy the cache still holds, the create is refused.
func TestCreateChecksAgainstTheDatabaseAfterAnotherStore(t *testing.T) {
	w := newCacheWorld(t)
	ctx := context.Background()
	if err := w.rule(t, w.a, w.policy); err != nil { // the policy is cached by the check
		t.Fatal(err)
	}
	if _, err := w.read(t); err != nil {
		t.Fatal(err)
	}
	if err := w.b.Delete(ctx, w.admin, ep.IPPolicies, "", w.policy); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w.rule(t, w.a, w.policy), 400, ep.CodeIPPolicyMissing)
	// And through the same store: its own delete, then a create.
	desc := "second"
	pol, err := w.a.Create(ctx, w.admin, ep.IPPolicies, "", &ep.IPPolicyCreate{AnnotationFields: ep.AnnotationFields{Description: &desc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rule(t, w.a, pol.Base().ID); err != nil {
		t.Fatal(err)
	}
	if err := w.a.Delete(ctx, w.admin, ep.IPPolicies, "", pol.Base().ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w.rule(t, w.a, pol.Base().ID), 400, ep.CodeIPPolicyMissing)
}
