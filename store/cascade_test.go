package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// Large deletes: a delete whose cascade passes store.CascadeChunk objects runs
// in chunks of their own transactions, so that one account's delete never holds the writer (on
// SQLite, every account's writes) for more than one chunk. The bound is a count of objects per
// transaction (store.DeleteStats), not a duration: durations are logged as figures.

// parallel runs fn(0..n-1) on workers goroutines.
func parallel(t *testing.T, n, workers int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// botWithKeys creates a bot user owning keys API keys and creds credentials, and returns its id
// and the keys' tokens.
func botWithKeys(t *testing.T, s *store.Store, a ep.Caller, keys, creds int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	name, active := "many keys", true
	bot, err := s.Create(ctx, a, ep.BotUsers, "", &ep.BotUserCreate{Name: &name, Active: &active})
	if err != nil {
		t.Fatal(err)
	}
	id := bot.Base().ID
	tokens := make([]string, keys)
	parallel(t, keys, 16, func(i int) error {
		k, err := s.Create(ctx, a, ep.APIKeys, "", &ep.APIKeyCreate{OwnerID: &id})
		if err == nil {
			tokens[i] = *k.(*ep.APIKey).Token
		}
		return err
	})
	parallel(t, creds, 4, func(int) error {
		_, err := s.Create(ctx, a, ep.Credentials, "", &ep.CredentialCreate{OwnerID: &id})
		return err
	})
	return id, tokens
}

// wantBotGone checks that nothing of the bot user is left: it is not found, its keys do not
// authenticate, and it cannot own a new key.
func wantBotGone(t *testing.T, s *store.Store, a ep.Caller, bot string, tokens []string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Get(ctx, a.AccountID, ep.BotUsers, "", bot); !ep.IsNotFound(err) {
		t.Fatalf("bot user after its delete: %v", err)
	}
	for _, tok := range tokens {
		sel, secret, _ := ep.ParseToken(tok)
		if _, err := s.Authenticate(ctx, sel, secret); !errors.Is(err, store.ErrUnknownKey) {
			t.Fatalf("a key of the deleted bot user authenticates: %v", err)
		}
	}
	if _, err := s.Create(ctx, a, ep.APIKeys, "", &ep.APIKeyCreate{OwnerID: &bot}); err == nil || ep.IsNotFound(err) {
		t.Fatalf("a key owned by the deleted bot user: %v, want 400", err)
	}
	keys, _, err := s.List(ctx, a.AccountID, ep.APIKeys, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.(*ep.APIKey).OwnerID == bot {
			t.Fatalf("key %s of the deleted bot user is still listed", k.Base().ID)
		}
	}
}

// TestLargeDeleteIsChunked deletes a bot user with thousands of keys while another account
// creates objects. The delete runs in chunks: no transaction of it removes more than
// CascadeChunk objects. The other account's latency during the delete is logged (a figure: the
// single transaction this replaces held SQLite's writer for ~0.2 s per 10,000 keys).
func TestLargeDeleteIsChunked(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a, b := admin(t, s, "big"), admin(t, s, "other")
		const keys, creds = 8*store.CascadeChunk + 7, 40
		bot, tokens := botWithKeys(t, s, a, keys, creds)
		before := s.DeleteStats()

		// The other account's creates, timed for as long as the delete takes and, as the
		// machine's own figure, for as long again without it.
		took := time.Duration(0)
		during := otherWrites(t, s, b, func() {
			t0 := time.Now()
			if err := s.Delete(ctx, a, ep.BotUsers, "", bot); err != nil {
				t.Error(err)
			}
			took = time.Since(t0)
		})
		if t.Failed() {
			t.FailNow()
		}
		alone := otherWrites(t, s, b, func() { time.Sleep(took) })

		st := s.DeleteStats()
		txs := st.Transactions - before.Transactions
		if st.Chunked-before.Chunked != 1 || st.Deletes-before.Deletes != 1 {
			t.Fatalf("delete stats %+v (before %+v), want one chunked delete", st, before)
		}
		if st.MaxObjects > store.CascadeChunk {
			t.Fatalf("one delete transaction removed %d objects, more than the chunk of %d", st.MaxObjects, store.CascadeChunk)
		}
		// The hide, ceil(n/chunk) chunks (one more when n is a multiple) and the last step.
		if min := uint64((keys+creds+store.CascadeChunk-1)/store.CascadeChunk) + 2; txs < min {
			t.Fatalf("%d delete transactions for %d objects, want at least %d", txs, keys+creds, min)
		}
		wantBotGone(t, s, a, bot, tokens)

		t.Logf("deleted a bot user with %d keys and %d credentials in %v: %d transactions of at most %d objects; "+
			"the other account's creates: %s during the delete, %s for as long without it",
			keys, creds, took.Round(time.Millisecond), txs, st.MaxObjects, during, alone)
	})
}

// latencies are the durations of an account's writes, shown as a figure.
type latencies []time.Duration

func (l latencies) String() string {
	if len(l) == 0 {
		return "none"
	}
	l = slices.Sorted(slices.Values(l))
	q := func(f float64) time.Duration {
		return l[min(len(l)-1, int(f*float64(len(l))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("%d, p50 %v, p99 %v, max %v", len(l), q(0.5), q(0.99), l[len(l)-1].Round(10*time.Microsecond))
}

// otherWrites has the account c create IP policies from two goroutines while fn runs, and
// returns how long each create took.
func otherWrites(t *testing.T, s *store.Store, c ep.Caller, fn func()) latencies {
	t.Helper()
	var (
		stop = make(chan struct{})
		wg   sync.WaitGroup
		mu   sync.Mutex
		out  latencies
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if _, err := s.Create(context.Background(), c, ep.IPPolicies, "", &ep.IPPolicyCreate{}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				out = append(out, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // the writes are under way before fn starts
	fn()
	close(stop)
	wg.Wait()
	return out
}

// TestBoundedCascadesStayWhole pins the largest delete transactions the object limits allow,
// which stay one transaction each: an IP policy with ep.MaxRulesPerIPPolicy rules (its rules go
// with it at once, so the data plane never sees half a policy), and a bot user with exactly
// CascadeChunk keys.
func TestBoundedCascadesStayWhole(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a := admin(t, s, "a")
		pol, err := s.Create(ctx, a, ep.IPPolicies, "", &ep.IPPolicyCreate{})
		if err != nil {
			t.Fatal(err)
		}
		pid := pol.Base().ID
		parallel(t, ep.MaxRulesPerIPPolicy, 16, func(i int) error {
			cidr, action := fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), "deny"
			body := &ep.IPPolicyRuleCreate{CIDR: &cidr, IPPolicyID: &pid, Action: &action}
			if err := body.Validate(); err != nil {
				return err
			}
			_, err := s.Create(ctx, a, ep.IPPolicyRules, "", body)
			return err
		})
		t0 := time.Now()
		if err := s.Delete(ctx, a, ep.IPPolicies, "", pid); err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		st := s.DeleteStats()
		if st.Deletes != 1 || st.Chunked != 0 || st.Transactions != 1 || st.MaxObjects != ep.MaxRulesPerIPPolicy+1 {
			t.Fatalf("delete stats %+v, want one transaction of %d objects", st, ep.MaxRulesPerIPPolicy+1)
		}
		rules, _, err := s.List(ctx, a.AccountID, ep.IPPolicyRules, "", "", 10)
		if err != nil || len(rules) != 0 {
			t.Fatalf("rules after their policy's delete: %d %v", len(rules), err)
		}
		t.Logf("an IP policy with %d rules: one transaction of %d objects, %v", ep.MaxRulesPerIPPolicy, st.MaxObjects, took.Round(10*time.Microsecond))

		bot, tokens := botWithKeys(t, s, a, store.CascadeChunk, 0)
		if err := s.Delete(ctx, a, ep.BotUsers, "", bot); err != nil {
			t.Fatal(err)
		}
		st = s.DeleteStats()
		if st.Deletes != 2 || st.Chunked != 0 || st.Transactions != 2 {
			t.Fatalf("delete stats %+v, want a second delete in one transaction", st)
		}
		wantBotGone(t, s, a, bot, tokens)
	})
}

// TestLargeDeleteRacesNewKeys creates keys owned by a bot user while a chunked delete of it runs.
// Each create either lands before the bot user is hidden (its key then goes with the rest) or is
// refused with 400; when Delete returns, nothing owned by the bot user is left, on both engines
// (on PostgreSQL a create may have looked the owner up before the hide committed).
func TestLargeDeleteRacesNewKeys(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		a := admin(t, s, "a")
		bot, tokens := botWithKeys(t, s, a, 2*store.CascadeChunk+10, 0)
		var (
			wg               sync.WaitGroup
			mu               sync.Mutex
			created, refused int
			stop             = make(chan struct{})
		)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					k, err := s.Create(ctx, a, ep.APIKeys, "", &ep.APIKeyCreate{OwnerID: &bot})
					var e *ep.Error
					mu.Lock()
					switch {
					case err == nil:
						created++
						tokens = append(tokens, *k.(*ep.APIKey).Token)
					case errors.As(err, &e) && e.Status == 400:
						refused++
					default:
						t.Errorf("create racing the delete: %v", err)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(10 * time.Millisecond)
		err := s.Delete(ctx, a, ep.BotUsers, "", bot)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		wantBotGone(t, s, a, bot, tokens)
		t.Logf("%d keys created during the delete's first moments, %d creates refused", created, refused)
	})
}
