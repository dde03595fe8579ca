package store_test

import (
	"context"
	"testing"

	"github.com/edgeplane/edgeplane/store"
)

// Closing a store twice is harmless on every engine: the second call returns the first one's
// result (it used to panic closing the SQLite checkpointer's channel again), and the closed
// store refuses work instead of running it.
func TestCloseTwice(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		s, err := store.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		first := s.Close()
		if err := s.Close(); err != first {
			t.Fatalf("second Close: %v, want the first call's %v", err, first)
		}
		if _, err := s.Authenticate(context.Background(), "no-such", "token"); err == nil {
			t.Fatal("a closed store authenticated a token")
		}
	})
}
