package enforce

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two replicas' views of one store: a revocation recorded through one is seen by the other when
// it reads the store again (at once once its view is stale, in the background after a second),
// only for sessions issued up to the revocation, only in its scope; an expired one is not.
func TestRevocationsAcrossReplicas(t *testing.T) {
	st := storeOnce(t)
	ctx := context.Background()
	now := time.Now()
	clock := now
	one, two := NewRevocations(st), NewRevocations(st)
	two.now = func() time.Time { return clock }
	if got, err := two.Revoked(ctx, "saml-logout:rt_a", now.Add(-time.Minute), subjectAll("alice")); err != nil || got {
		t.Fatalf("before any revocation: %v %v", got, err)
	}
	if err := one.Revoke(ctx, "saml-logout:rt_a", subjectAll("alice"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := one.Revoked(ctx, "saml-logout:rt_a", now.Add(-time.Minute), subjectAll("alice")); !got {
		t.Fatal("the replica that recorded the revocation does not see it")
	}
	clock = now.Add(revocationStale + time.Second) // two's view is stale: read again first
	for _, c := range []struct {
		scope   string
		issued  time.Time
		subject string
		want    bool
	}{
		{"saml-logout:rt_a", now.Add(-time.Minute), subjectAll("alice"), true},
		{"saml-logout:rt_a", now.Add(2 * time.Second), subjectAll("alice"), false}, // a later sign-in
		{"saml-logout:rt_b", now.Add(-time.Minute), subjectAll("alice"), false},    // another route
		{"saml-logout:rt_a", now.Add(-time.Minute), subjectAll("bob"), false},
		{"saml-logout:rt_a", now.Add(-time.Minute), subjectOne("alice", "idx-1"), false},
	} {
		if got, err := two.Revoked(ctx, c.scope, c.issued, c.subject); err != nil || got != c.want {
			t.Fatalf("%s %q issued %v: %v %v, want %v", c.scope, c.subject, c.issued, got, err, c.want)
		}
	}
	clock = now.Add(2 * time.Hour) // past the revocation's end
	if got, _ := two.Revoked(ctx, "saml-logout:rt_a", now.Add(-time.Minute), subjectAll("alice")); got {
		t.Fatal("an expired revocation still ends sessions")
	}
}

// countingRevocations is a real store's record of ended sessions that counts its reads, and
// holds each read until release is closed (nil: at once).
type countingRevocations struct {
	RevocationStore
	reads   atomic.Int32
	release chan struct{}
}

func (c *countingRevocations) SessionRevocations(ctx context.Context, since, now time.Time, fn func(scope, subject string, at, until time.Time)) error {
	c.reads.Add(1)
	if c.release != nil {
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.RevocationStore.SessionRevocations(ctx, since, now, fn)
}

// Checks that find the view stale at once (the first requests after a quiet spell) wait for
// one read of the store between them, not one each; a store that does not answer refuses them
// once the wait is over instead of holding them.
func TestRevocationsStaleReadOnce(t *testing.T) {
	src := &countingRevocations{RevocationStore: storeOnce(t), release: make(chan struct{})}
	r := NewRevocations(src)
	const checks = 20
	var started sync.WaitGroup
	started.Add(checks)
	errs := make(chan error, checks)
	for range checks {
		go func() {
			started.Done()
			_, err := r.Revoked(context.Background(), "saml-logout:rt_a", time.Now(), subjectAll("alice"))
			errs <- err
		}()
	}
	started.Wait()
	close(src.release)
	for range checks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d checks of a stale view read the store %d times, want once", checks, n)
	}

	hung := &countingRevocations{RevocationStore: storeOnce(t), release: make(chan struct{})}
	defer close(hung.release)
	r = NewRevocations(hung)
	r.wait = 50 * time.Millisecond
	if _, err := r.Revoked(context.Background(), "saml-logout:rt_a", time.Now(), subjectAll("alice")); !errors.Is(err, ErrRevocationsUnknown) {
		t.Fatalf("a store that does not answer: %v, want ErrRevocationsUnknown", err)
	}
}
