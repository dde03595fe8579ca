package store

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestPendingDeleteFinishesOnOpen stops a chunked delete halfway, as a crash would (each step is
// its own committed transaction, so a crash between two steps leaves exactly this), checks what
// the API sees of it meanwhile, and checks that the next Open finishes it.
func TestPendingDeleteFinishesOnOpen(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		a := ensureAccount(t, s, "a")
		name, active := "bot", true
		bot, err := s.Create(ctx, a, ep.BotUsers, "", &ep.BotUserCreate{Name: &name, Active: &active})
		if err != nil {
			t.Fatal(err)
		}
		id := bot.Base().ID
		const keys = CascadeChunk + 40
		var tokens []string
		for range keys {
			k, err := s.Create(ctx, a, ep.APIKeys, "", &ep.APIKeyCreate{OwnerID: &id})
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, *k.(*ep.APIKey).Token)
		}

		// Step 1 and one chunk, then the process "stops".
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			return s.hide(ctx, tx, a.AccountID, ep.BotUsers, id)
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			_, err := s.deleteReferrers(ctx, tx, id, CascadeChunk)
			return err
		}); err != nil {
			t.Fatal(err)
		}

		// Meanwhile the bot user is gone from the API's view, its remaining keys do not
		// authenticate, and nothing new can name it as owner.
		if _, err := s.Get(ctx, a.AccountID, ep.BotUsers, "", id); !ep.IsNotFound(err) {
			t.Fatalf("get of a hidden bot user: %v", err)
		}
		if bots, _, err := s.List(ctx, a.AccountID, ep.BotUsers, "", "", 10); err != nil || len(bots) != 0 {
			t.Fatalf("list shows %d bot users (%v)", len(bots), err)
		}
		if err := s.Delete(ctx, a, ep.BotUsers, "", id); !ep.IsNotFound(err) {
			t.Fatalf("second delete: %v", err)
		}
		if _, err := s.Update(ctx, a, ep.BotUsers, "", id, func(*ep.Op, ep.Document) error { return nil }); !ep.IsNotFound(err) {
			t.Fatalf("update of a hidden bot user: %v", err)
		}
		for _, tok := range tokens {
			sel, secret, _ := ep.ParseToken(tok)
			if _, err := s.Authenticate(ctx, sel, secret); !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrInactiveKey) {
				t.Fatalf("a key of a hidden bot user: %v", err)
			}
		}
		var e *ep.Error
		if _, err := s.Create(ctx, a, ep.APIKeys, "", &ep.APIKeyCreate{OwnerID: &id}); !errors.As(err, &e) || e.Status != 400 {
			t.Fatalf("a new key owned by a hidden bot user: %v", err)
		}
		if _, err := s.Create(ctx, a, ep.Credentials, "", &ep.CredentialCreate{OwnerID: &id}); !errors.As(err, &e) || e.Status != 400 {
			t.Fatalf("a new credential owned by a hidden bot user: %v", err)
		}
		if left := count(t, s, `SELECT count(*) FROM refs WHERE to_id = ?`, id); left != keys-CascadeChunk {
			t.Fatalf("%d keys left after one chunk, want %d", left, keys-CascadeChunk)
		}

		s.Close()
		s = openStore(t, dsn)
		for q, want := range map[string]int{
			`SELECT count(*) FROM objects WHERE id = ?`:          0,
			`SELECT count(*) FROM refs WHERE to_id = ?`:          0,
			`SELECT count(*) FROM tokens WHERE principal_id = ?`: 0,
			`SELECT count(*) FROM principals WHERE id = ?`:       0,
		} {
			if n := count(t, s, q, id); n != want {
				t.Fatalf("after reopening, %s: %d, want %d", q, n, want)
			}
		}
		if n := count(t, s, pendingCount); n != 0 {
			t.Fatalf("after reopening, %d deletes are pending", n)
		}
		if st := s.DeleteStats(); st.MaxObjects != keys-CascadeChunk || st.Transactions != 2 {
			t.Fatalf("the finishing delete's stats: %+v", st)
		}
	})
}

const pendingCount = `SELECT count(*) FROM objects WHERE kind LIKE '` + hiddenLike + `'`

// count runs a count query on the store's read pool.
func count(t *testing.T, s *Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(context.Background(), s.d.rebind(q), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrationNumbersUnique: migrate records migrations by their number, so a second file with
// the same number would be skipped silently wherever the first one ran. Two changes made at the
// same time can pick the same next number; this makes that a failing test, not a missing index.
func TestMigrationNumbersUnique(t *testing.T) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, f := range files {
		num, _, _ := strings.Cut(path.Base(f), "_")
		if other, ok := seen[num]; ok {
			t.Errorf("migrations %s and %s have the same number: renumber the newer one", other, f)
		}
		seen[num] = f
	}
}
