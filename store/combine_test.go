package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// Tests of combined key lookups (combine.go), on PostgreSQL.

// combineFixture is two accounts with one API key each; the keys double as the objects read.
type combineFixture struct {
	s          *Store
	a, b       ep.Caller
	ka, kb     string // selectors
	sa, sb     string // secrets
	idA, idB   string // the keys' object ids
	cases      []lookup
	wantDoc    []string // the account whose object each case reads, "" for none
	wantKey    []string // the account whose key each case finds, "" for none
	wantSecret []string
}

func newCombineFixture(t *testing.T) *combineFixture {
	t.Helper()
	s, err := Open(context.Background(), testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.combine == nil {
		t.Fatal("a PostgreSQL store has no combiner")
	}
	f := &combineFixture{s: s}
	f.a, f.ka, f.sa, f.idA = newAPIKey(t, s, "a")
	f.b, f.kb, f.sb, f.idB = newAPIKey(t, s, "b")
	kind := ep.APIKeys.Kind
	for _, c := range []struct {
		l               lookup
		key, doc, secrt string
	}{
		{lookup{selector: f.ka, id: f.idA, kind: kind}, f.a.AccountID, f.a.AccountID, f.sa},
		{lookup{selector: f.kb, id: f.idA, kind: kind}, f.b.AccountID, "", f.sb}, // another account's object
		{lookup{selector: f.ka}, f.a.AccountID, "", f.sa},                        // authentication only
		{lookup{selector: "nope", id: f.idA, kind: kind}, "", "", ""},            // no such key
		{lookup{selector: f.ka, id: "ak_missing", kind: kind}, f.a.AccountID, "", f.sa},
		{lookup{selector: f.ka, id: f.idA, kind: ep.IPPolicies.Kind}, f.a.AccountID, "", f.sa}, // another kind
		{lookup{selector: f.kb, id: f.idB, kind: kind}, f.b.AccountID, f.b.AccountID, f.sb},
		{lookup{selector: f.ka, id: f.idA, kind: kind}, f.a.AccountID, f.a.AccountID, f.sa}, // the first again
	} {
		f.cases = append(f.cases, c.l)
		f.wantKey, f.wantDoc, f.wantSecret = append(f.wantKey, c.key), append(f.wantDoc, c.doc), append(f.wantSecret, c.secrt)
	}
	return f
}

// newAPIKey makes an API key in the account with this name (made when missing) and returns the
// account's admin, the key's selector and secret, and the key's id.
func newAPIKey(t *testing.T, s *Store, account string) (admin ep.Caller, selector, secret, id string) {
	t.Helper()
	ctx := context.Background()
	admin, _, err := s.EnsureAccount(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	selector, secret, ok := ep.ParseToken(*d.(*ep.APIKey).Token)
	if !ok {
		t.Fatal("the new key's token does not parse")
	}
	return admin, selector, secret, d.Base().ID
}

// check asserts that l holds the answer case i wants.
func (f *combineFixture) check(t *testing.T, i int, l *lookup) {
	t.Helper()
	if err := f.verify(i, l); err != nil {
		t.Fatal(err)
	}
}

// verify says how l differs from the answer case i wants, if it does.
func (f *combineFixture) verify(i int, l *lookup) error {
	if f.wantKey[i] == "" {
		if !errors.Is(l.err, sql.ErrNoRows) {
			return fmt.Errorf("case %d: error %v, want no rows", i, l.err)
		}
		return nil
	}
	if l.err != nil || l.k.c.AccountID != f.wantKey[i] {
		return fmt.Errorf("case %d: key of account %q (error %v), want %q", i, l.k.c.AccountID, l.err, f.wantKey[i])
	}
	if (l.doc != nil) != (f.wantDoc[i] != "") {
		return fmt.Errorf("case %d: object %q, want one of account %q", i, l.doc, f.wantDoc[i])
	}
	if l.doc != nil && !bytes.Contains(l.doc, []byte(`"id":"`+l.id+`"`)) {
		return fmt.Errorf("case %d: read %s for id %s", i, l.doc, l.id)
	}
	return nil
}

// One combined query answers every member exactly as the member's own query does: each case run
// alone (the single-row queries) and all of them together, in both orders.
func TestCombinedLookupAnswersEachMember(t *testing.T) {
	f := newCombineFixture(t)
	alone := make([]lookup, len(f.cases))
	for i := range f.cases {
		alone[i] = f.cases[i]
		f.s.combine.run([]*lookup{&alone[i]})
		f.check(t, i, &alone[i])
	}
	for _, reverse := range []bool{false, true} {
		together := make([]lookup, len(f.cases))
		batch := make([]*lookup, len(f.cases))
		for i := range f.cases {
			together[i] = f.cases[i]
			j := i
			if reverse {
				j = len(batch) - 1 - i
			}
			batch[j] = &together[i]
		}
		f.s.combine.run(batch)
		for i := range together {
			f.check(t, i, &together[i])
			if !bytes.Equal(together[i].doc, alone[i].doc) || together[i].k != alone[i].k || together[i].parent != alone[i].parent {
				t.Fatalf("case %d combined (reverse %v): %+v, alone: %+v", i, reverse, together[i], alone[i])
			}
		}
	}
}

// Under concurrent requests, lookups are combined and every request still gets its own answer,
// through the store's API; requests that end while they wait get their context's error.
func TestCombinedLookupsUnderLoad(t *testing.T) {
	f := newCombineFixture(t)
	before := f.s.LookupStats()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 100 {
				i := rng.IntN(len(f.cases))
				c := f.cases[i]
				ctx, cancel := context.Background(), func() {}
				if rng.IntN(10) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(200))*time.Microsecond)
				}
				var (
					caller ep.Caller
					doc    ep.Document
					err    error
				)
				if c.id == "" {
					caller, err = f.s.Authenticate(ctx, c.selector, f.wantSecret[i])
				} else {
					res := ep.APIKeys
					if c.kind != res.Kind {
						res = ep.IPPolicies
					}
					caller, doc, _, err = f.s.AuthenticateGet(ctx, c.selector, f.wantSecret[i], res, "", c.id, "")
				}
				cancel()
				switch {
				case ctx.Err() != nil && err != nil:
					// Ended while it waited (or in its query): any error is its answer.
				case f.wantKey[i] == "":
					if isUnknownKey(err) {
						continue
					}
					errs <- errors.Join(errors.New("unknown key not refused"), err)
					return
				case err != nil && f.wantDoc[i] == "" && ep.IsNotFound(err):
					if caller.AccountID != f.wantKey[i] {
						errs <- errors.New("not found for the wrong caller")
						return
					}
				case err != nil:
					errs <- err
					return
				case caller.AccountID != f.wantKey[i] || (doc != nil) != (f.wantDoc[i] != "") || (doc != nil && doc.Base().ID != c.id):
					errs <- errors.New("a request got another's answer")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := f.s.LookupStats()
	queries, lookups := st.Queries-before.Queries, st.Lookups-before.Lookups
	if lookups == 0 || queries >= lookups {
		t.Fatalf("%d lookups in %d queries: not combined", lookups, queries)
	}
	t.Logf("%d lookups in %d queries", lookups, queries)
}

func isUnknownKey(err error) bool { return errors.Is(err, ErrUnknownKey) }

// A lookup after Close is refused at once with the store's own error, instead of waiting for a
// goroutine that has stopped (or, when a lookup goroutine took it in the moment Close began,
// asking the closed database again alone).
func TestCombinedLookupAfterClose(t *testing.T) {
	f := newCombineFixture(t)
	f.s.Close()
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Authenticate(context.Background(), f.ka, f.sa)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errStoreClosed) {
			t.Fatalf("after Close: %v, want %v", err, errStoreClosed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lookup after Close hangs")
	}
}

// A combined query that fails as a whole is nobody's answer: PostgreSQL refuses the whole query
// when one selector is not valid UTF-8 (the store's API never sends one, which is why this test
// calls the combiner directly), and every other request of that query must still get its own
// answer, by asking again alone.
func TestCombinedLookupFailureIsNotShared(t *testing.T) {
	f := newCombineFixture(t)
	poison := lookup{selector: "00000000000000000000000000\xff"}
	batch := []*lookup{&poison}
	members := make([]lookup, len(f.cases))
	for i := range f.cases {
		members[i] = f.cases[i]
		batch = append(batch, &members[i])
	}
	f.s.combine.run(batch)
	for i, l := range batch {
		if !l.failed || l.err == nil {
			t.Fatalf("member %d of a refused query: failed %v, error %v", i, l.failed, l.err)
		}
	}
	if n := f.s.LookupStats().Alone; n != 0 {
		t.Fatalf("%d lookups counted alone before any request asked alone", n)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 50 {
				i := (g + r) % (len(f.cases) + 1)
				if i == len(f.cases) {
					if _, err := f.s.combine.do(context.Background(), poison.selector, "", ""); err != nil {
						errs <- err
					}
					continue
				}
				c := f.cases[i]
				l, err := f.s.combine.do(context.Background(), c.selector, c.id, c.kind)
				if err != nil {
					errs <- err
					continue
				}
				if l.failed {
					errs <- errors.New("a failed lookup was handed out as an answer")
					continue
				}
				if err := f.verify(i, l); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every member of a query with the poisoned selector in it asked again alone.
	if n := f.s.LookupStats().Alone; n == 0 {
		t.Fatal("lookups asked again alone after refused queries, and none was counted")
	}
}

// Connections that stop answering (a frozen database host) hold up only the requests that use
// them, as without combining:
//   - all of them frozen, requests with 2 s deadlines (the case a review measured: no success
//     for 35 s when the lookup goroutines waited out a fixed 10 s per frozen connection): the
//     frozen connections are used up at the requests' deadlines, and new ones serve;
//   - two of them frozen, the lookup goroutines stuck on those, requests with the server's 10 s
//     deadline: after combinePatience requests ask alone, on connections that answer, instead of
//     waiting behind the stuck goroutines until their deadlines (this case fails without it).
func TestCombinedLookupsSurviveFrozenConnections(t *testing.T) {
	for _, c := range []struct {
		name     string
		warm     int           // connections open (and frozen) before the requests
		deadline time.Duration // of each request
	}{
		{"all frozen", 8, 2 * time.Second},
		{"two frozen", 2, 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := testdb.Postgres(t)
			proxy := testdb.NewProxy(t, testdb.Target(dsn))
			ctx := context.Background()
			s, err := OpenWith(ctx, proxy.Redirect(dsn), Options{MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			a, sel, secret, keyID := newAPIKey(t, s, "a")
			s.w.SetMaxIdleConns(c.warm)
			var wg sync.WaitGroup
			for range c.warm {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 50 {
						_, _ = s.Get(ctx, a.AccountID, ep.APIKeys, "", keyID)
					}
				}()
			}
			wg.Wait()
			if open := s.w.Stats().OpenConnections; open > c.warm {
				t.Fatalf("%d connections open before the freeze, want at most %d", open, c.warm)
			}
			s.w.SetMaxIdleConns(8)
			proxy.Freeze()

			const run = 6 * time.Second
			start := time.Now()
			var late atomic.Int64 // successes in the second half of the run
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < run {
						cx, cancel := context.WithTimeout(ctx, c.deadline)
						_, err := s.Authenticate(cx, sel, secret)
						cancel()
						if err == nil && time.Since(start) > run/2 {
							late.Add(1)
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			// 16 clients at most one request per 10 ms each could do 4,800 in 3 s; a request
			// that waits out its patience (0.5-1 s) each time would allow a few hundred.
			if late.Load() < 1500 {
				t.Fatalf("%d authentications succeeded in the last %v after connections froze", late.Load(), run/2)
			}
			t.Logf("%d authentications succeeded in the last %v", late.Load(), run/2)
			if s.LookupStats().Alone == 0 {
				t.Fatal("requests got past frozen connections, and no lookup was counted as asked alone")
			}
		})
	}
}

// stuck can be set just after the last busy lookup goroutine cleared it, leaving none busy to
// clear it again: a lookup that finds a lookup goroutine free is still combined, which clears it.
func TestCombinerRecoversFromStaleStuck(t *testing.T) {
	f := newCombineFixture(t)
	f.s.combine.stuck.Store(true)
	before := f.s.LookupStats()
	l, err := f.s.combine.do(context.Background(), f.ka, "", "")
	if err != nil || l.err != nil {
		t.Fatalf("lookup: %v %v", err, l.err)
	}
	if after := f.s.LookupStats(); after.Lookups == before.Lookups || after.Alone != before.Alone {
		t.Fatalf("with stuck set and the lookup goroutines free, a lookup bypassed the combiner: before %+v, after %+v", before, after)
	}
	if f.s.combine.stuck.Load() {
		t.Fatal("a combined lookup left stuck set")
	}
}
