package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// The conformance suite: every test runs on every engine of the run (SQLite always, PostgreSQL
// when EDGEPLANE_TEST_POSTGRES is set), through a test-only collection that uses every mechanism
// the store offers documents: claims, restricting and cascading references, parents, CAS updates.

// widget is the test collection's document.
type widget struct {
	ep.Meta
	Name   string   `json:"name"`
	Count  int      `json:"count"`
	Uses   []string `json:"uses"`   // restricting references
	Owner  string   `json:"owner"`  // cascading reference
	Parent string   `json:"parent"` // parent object
}

const (
	codeTaken      = 9901
	codeTakenOther = 9902
	codeInUse      = 9903
)

func (w *widget) Claims() []ep.Claim {
	if w.Name == "" {
		return nil
	}
	return []ep.Claim{{Namespace: "widget", Value: w.Name}}
}

func (w *widget) Conflict(c ep.Claim, sameAccount bool) *ep.Error {
	if sameAccount {
		return ep.Errorf(http.StatusConflict, codeTaken, "%s taken", c.Value)
	}
	return ep.Errorf(http.StatusConflict, codeTakenOther, "%s taken by another account", c.Value)
}

func (w *widget) References() []ep.Reference {
	var refs []ep.Reference
	for _, u := range w.Uses {
		refs = append(refs, ep.Reference{To: u, Mode: ep.RefRestrict})
	}
	if w.Owner != "" {
		refs = append(refs, ep.Reference{To: w.Owner, Mode: ep.RefCascade})
	}
	return refs
}

func (w *widget) ParentID() string { return w.Parent }

// widgetCreate checks, like real collections do, that what it references exists.
type widgetCreate struct{ w widget }

func (c *widgetCreate) Validate() error { return nil }

func (c *widgetCreate) Create(op *ep.Op) (ep.Document, error) {
	for _, id := range append(append([]string{}, c.w.Uses...), c.w.Parent, c.w.Owner) {
		if id == "" {
			continue
		}
		if _, err := op.Tx.Get(widgets, id); err != nil {
			if ep.IsNotFound(err) {
				return nil, ep.Invalid(ep.CodeInvalid, "uses", "no widget %s", id)
			}
			return nil, err
		}
	}
	w := c.w
	return &w, nil
}

var widgets = &ep.Resource{
	Kind: "test_widget", Path: "/widgets", ListKey: "widgets", Prefix: "wdg", Ops: ep.AllOps,
	New:   func() ep.Document { return new(widget) },
	InUse: func(id string) *ep.Error { return ep.Errorf(http.StatusConflict, codeInUse, "%s in use", id) },
}

// engines runs fn once per engine, each on a fresh database.
func engines(t *testing.T, fn func(t *testing.T, dsn string)) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) { fn(t, testdb.Fresh(t, engine)) })
	}
	if os.Getenv(testdb.PostgresEnv) == "" {
		t.Logf("PostgreSQL run skipped: set %s to also run the conformance suite on PostgreSQL", testdb.PostgresEnv)
	}
}

func open(t *testing.T, dsn string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func admin(t *testing.T, s *store.Store, name string) ep.Caller {
	t.Helper()
	c, _, err := s.EnsureAccount(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func create(t *testing.T, s *store.Store, c ep.Caller, w widget) (*widget, error) {
	t.Helper()
	d, err := s.Create(context.Background(), c, widgets, "", &widgetCreate{w: w})
	if err != nil {
		return nil, err
	}
	return d.(*widget), nil
}

func mustCreate(t *testing.T, s *store.Store, c ep.Caller, w widget) *widget {
	t.Helper()
	d, err := create(t, s, c, w)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func wantCode(t *testing.T, err error, status, code int) {
	t.Helper()
	var e *ep.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Fatalf("error %v, want status %d code %d", err, status, code)
	}
}

// wantErr fails the test unless err is (or wraps) want.
func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

func TestCRUDAndIsolation(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a, b := admin(t, s, "a"), admin(t, s, "b")
		w := mustCreate(t, s, a, widget{Name: "one"})
		if !ep.ValidID("wdg", w.ID) || w.CreatedAt == "" {
			t.Fatalf("created %+v", w)
		}
		got, err := s.Get(ctx, a.AccountID, widgets, "", w.ID)
		if err != nil || got.(*widget).Name != "one" {
			t.Fatalf("get: %v %+v", err, got)
		}
		_, err = s.Get(ctx, b.AccountID, widgets, "", w.ID)
		wantCode(t, err, 404, ep.CodeNotFound)
		if _, err := s.Update(ctx, b, widgets, "", w.ID, func(*ep.Op, ep.Document) error { return nil }); !ep.IsNotFound(err) {
			t.Fatalf("update from another account: %v", err)
		}
		wantCode(t, s.Delete(ctx, b, widgets, "", w.ID), 404, ep.CodeNotFound)
		docs, more, err := s.List(ctx, b.AccountID, widgets, "", "", 100)
		if err != nil || len(docs) != 0 || more {
			t.Fatalf("other account's list: %v %d %v", err, len(docs), more)
		}
		// An error from the change function leaves the document as it was.
		_, err = s.Update(ctx, a, widgets, "", w.ID, func(_ *ep.Op, d ep.Document) error {
			d.(*widget).Name = "changed"
			return ep.Invalid(ep.CodeInvalid, "name", "no")
		})
		wantCode(t, err, 400, ep.CodeInvalid)
		got, _ = s.Get(ctx, a.AccountID, widgets, "", w.ID)
		if got.(*widget).Name != "one" {
			t.Fatal("a failed update changed the document")
		}
		if err := s.Delete(ctx, a, widgets, "", w.ID); err != nil {
			t.Fatal(err)
		}
		_, err = s.Get(ctx, a.AccountID, widgets, "", w.ID)
		wantCode(t, err, 404, ep.CodeNotFound)
	})
}

func TestListPaging(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a := admin(t, s, "a")
		var ids []string
		for range 25 {
			ids = append(ids, mustCreate(t, s, a, widget{}).ID)
		}
		var seen []string
		before := ""
		for {
			docs, more, err := s.List(ctx, a.AccountID, widgets, "", before, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				seen = append(seen, d.Base().ID)
			}
			if !more {
				break
			}
			before = docs[len(docs)-1].Base().ID
		}
		if len(seen) != len(ids) {
			t.Fatalf("paged %d of %d", len(seen), len(ids))
		}
		for i := range seen {
			if seen[i] != ids[len(ids)-1-i] {
				t.Fatalf("order at %d: %s, want %s", i, seen[i], ids[len(ids)-1-i])
			}
		}
	})
}

// TestNoLostUpdates: two stores on one database (two replicas) and many goroutines increment one
// counter with read-modify-write updates; compare-and-swap must keep every increment.
func TestNoLostUpdates(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		replicas := []*store.Store{open(t, dsn), open(t, dsn)}
		a := admin(t, replicas[0], "a")
		w := mustCreate(t, replicas[0], a, widget{})
		const workers, each = 8, 10
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers*each)
		for _, s := range replicas {
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						_, err := s.Update(ctx, a, widgets, "", w.ID, func(_ *ep.Op, d ep.Document) error {
							d.(*widget).Count++
							return nil
						})
						if err != nil {
							errs <- err
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := replicas[1].Get(ctx, a.AccountID, widgets, "", w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n := got.(*widget).Count; n != 2*workers*each {
			t.Fatalf("count %d, want %d: updates were lost", n, 2*workers*each)
		}
	})
}

// TestClaimRace: many concurrent creates of one unique name, through two stores and two
// accounts: exactly one wins; the others get the conflict for their account.
func TestClaimRace(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		replicas := []*store.Store{open(t, dsn), open(t, dsn)}
		accounts := []ep.Caller{admin(t, replicas[0], "a"), admin(t, replicas[0], "b")}
		const n = 24
		var (
			wg       sync.WaitGroup
			wins     atomic.Int32
			winner   atomic.Value
			failures = make(chan error, n)
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acct := accounts[i%2]
				if _, err := create(t, replicas[(i/2)%2], acct, widget{Name: "same"}); err != nil {
					failures <- fmt.Errorf("%s: %w", acct.AccountID, err)
					return
				}
				wins.Add(1)
				winner.Store(acct.AccountID)
			}()
		}
		wg.Wait()
		close(failures)
		if wins.Load() != 1 {
			t.Fatalf("%d creates of one name succeeded, want 1", wins.Load())
		}
		for err := range failures {
			var e *ep.Error
			if !errors.As(err, &e) || e.Status != 409 {
				t.Fatalf("loser got %v, want a 409", err)
			}
		}
		// A loser in the winner's account sees "taken", in the other account "taken by another".
		for _, acct := range accounts {
			_, err := create(t, replicas[0], acct, widget{Name: "same"})
			if acct.AccountID == winner.Load() {
				wantCode(t, err, 409, codeTaken)
			} else {
				wantCode(t, err, 409, codeTakenOther)
			}
		}
	})
}

func TestClaimsFollowUpdatesAndDeletes(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a := admin(t, s, "a")
		w := mustCreate(t, s, a, widget{Name: "n1"})
		if _, err := s.Update(ctx, a, widgets, "", w.ID, func(_ *ep.Op, d ep.Document) error {
			d.(*widget).Name = "n2"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, a, widget{Name: "n1"}) // released by the rename
		_, err := create(t, s, a, widget{Name: "n2"})
		wantCode(t, err, 409, codeTaken)
		if err := s.Delete(ctx, a, widgets, "", w.ID); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, a, widget{Name: "n2"}) // released by the delete
	})
}

func TestReferencesAndCascades(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a := admin(t, s, "a")
		target := mustCreate(t, s, a, widget{})
		user := mustCreate(t, s, a, widget{Uses: []string{target.ID}})
		owned := mustCreate(t, s, a, widget{Owner: target.ID})
		child := mustCreate(t, s, a, widget{Parent: target.ID})

		wantCode(t, s.Delete(ctx, a, widgets, "", target.ID), 409, codeInUse)
		// Dropping the reference by update releases the target.
		if _, err := s.Update(ctx, a, widgets, "", user.ID, func(_ *ep.Op, d ep.Document) error {
			d.(*widget).Uses = nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, a, widgets, "", target.ID); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{owned.ID, child.ID} {
			if _, err := s.Get(ctx, a.AccountID, widgets, "", id); !ep.IsNotFound(err) {
				t.Fatalf("%s should have been deleted with its owner/parent: %v", id, err)
			}
		}
		if _, err := s.Get(ctx, a.AccountID, widgets, "", user.ID); err != nil {
			t.Fatalf("the former referrer survives: %v", err)
		}
	})
}

// TestDeleteRacesReference: a delete of an object and a create that references it, run
// concurrently many times, never both succeed.
func TestDeleteRacesReference(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s1, s2 := open(t, dsn), open(t, dsn)
		a := admin(t, s1, "a")
		for range 30 {
			target := mustCreate(t, s1, a, widget{})
			var (
				wg        sync.WaitGroup
				delErr    error
				createErr error
			)
			wg.Add(2)
			go func() { defer wg.Done(); delErr = s1.Delete(ctx, a, widgets, "", target.ID) }()
			go func() { defer wg.Done(); _, createErr = create(t, s2, a, widget{Uses: []string{target.ID}}) }()
			wg.Wait()
			if delErr == nil && createErr == nil {
				t.Fatal("both the delete and a new reference to the deleted object succeeded")
			}
			if delErr != nil {
				wantCode(t, delErr, 409, codeInUse)
			}
			if createErr != nil {
				wantCode(t, createErr, 400, ep.CodeInvalid)
			}
		}
	})
}

// TestEnsureAccountRace: replicas bootstrapping one empty database create one account.
func TestEnsureAccountRace(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		replicas := []*store.Store{open(t, dsn), open(t, dsn)}
		var (
			wg      sync.WaitGroup
			created atomic.Int32
			ids     sync.Map
		)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, isNew, err := replicas[i%2].EnsureAccount(context.Background(), "default")
				if err != nil {
					t.Error(err)
					return
				}
				if isNew {
					created.Add(1)
				}
				ids.Store(c.AccountID, true)
			}()
		}
		wg.Wait()
		n := 0
		ids.Range(func(any, any) bool { n++; return true })
		if created.Load() != 1 || n != 1 {
			t.Fatalf("%d creations, %d distinct accounts; want 1 and 1", created.Load(), n)
		}
	})
}

// TestConcurrentOpen: replicas starting together on a new database migrate it once.
func TestConcurrentOpen(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := store.Open(context.Background(), dsn)
				if err != nil {
					t.Error(err)
					return
				}
				s.Close()
			}()
		}
		wg.Wait()
		s := open(t, dsn) // and again on a migrated database
		mustCreate(t, s, admin(t, s, "a"), widget{})
	})
}

func TestAuthenticate(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a := admin(t, s, "a")
		d, err := s.Create(ctx, a, ep.APIKeys, "", &ep.APIKeyCreate{})
		if err != nil {
			t.Fatal(err)
		}
		token := *d.(*ep.APIKey).Token
		sel, secret, ok := ep.ParseToken(token)
		if !ok {
			t.Fatalf("token %q does not parse", token)
		}
		c, err := s.Authenticate(ctx, sel, secret)
		if err != nil || c.AccountID != a.AccountID || c.Principal.ID != a.Principal.ID || c.Principal.Role != ep.RoleAdmin || c.KeyID != d.Base().ID {
			t.Fatalf("authenticate: %v %+v", err, c)
		}
		wrong := "A" // a different last character: "A" itself when the secret ends in another one
		if secret[51] == 'A' {
			wrong = "B"
		}
		_, err = s.Authenticate(ctx, sel, secret[:51]+wrong)
		wantErr(t, err, store.ErrUnknownKey)
		// A selector that is not valid UTF-8 (ParseToken does not look at its characters) names
		// no key; PostgreSQL would refuse the query itself, which was a 500.
		bad := sel[:26] + "\xff"
		_, err = s.Authenticate(ctx, bad, secret)
		wantErr(t, err, store.ErrUnknownKey)
		_, _, _, err = s.AuthenticateGet(ctx, bad, secret, ep.APIKeys, "", d.Base().ID, "")
		wantErr(t, err, store.ErrUnknownKey)
		if err := s.Delete(ctx, a, ep.APIKeys, "", d.Base().ID); err != nil {
			t.Fatal(err)
		}
		_, err = s.Authenticate(ctx, sel, secret)
		wantErr(t, err, store.ErrUnknownKey)
	})
}

// TestOutage: while PostgreSQL is unreachable, calls fail fast with 503; when it is back, the
// same store recovers without being reopened.
func TestOutage(t *testing.T) {
	dsn := testdb.Postgres(t)
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	s := open(t, proxy.Redirect(dsn))
	a := admin(t, s, "a")
	w := mustCreate(t, s, a, widget{})

	proxy.Down()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		_, err := s.Get(ctx, a.AccountID, widgets, "", w.ID)
		cancel()
		wantCode(t, err, http.StatusServiceUnavailable, ep.CodeUnavailable)
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("a call during the outage took %v", d)
		}
		_, err = create(t, s, a, widget{})
		wantCode(t, err, http.StatusServiceUnavailable, ep.CodeUnavailable)
	}
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("ping succeeded during the outage")
	}

	proxy.Up()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(context.Background(), a.AccountID, widgets, "", w.ID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover after the outage: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustCreate(t, s, a, widget{})
}

// ConnLimit is the PostgreSQL pool's size, for the server's arrival-order queue in front of it,
// and 0 on SQLite, which needs none.
func TestConnLimit(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		s, err := store.OpenWith(context.Background(), dsn, store.Options{MaxConns: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		want := 0
		if store.IsPostgres(dsn) {
			want = 5
		}
		if got := s.ConnLimit(); got != want {
			t.Fatalf("ConnLimit %d, want %d", got, want)
		}
	})
}
