package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testKey struct{}

// The lazy request deadline behaves as context.WithDeadline: it carries the deadline (the
// parent's when that is earlier), reports it passed with or without a waiter, fires Done at the
// deadline, follows the parent's cancellation, passes values through, and contexts derived from
// it end with it.
func TestLazyDeadline(t *testing.T) {
	parent := context.WithValue(context.Background(), testKey{}, "v")
	d := time.Now().Add(30 * time.Millisecond)
	ctx, release := withLazyDeadline(parent, d)
	defer release()
	if got, ok := ctx.Deadline(); !ok || !got.Equal(d) {
		t.Fatalf("deadline %v %v", got, ok)
	}
	if ctx.Value(testKey{}) != "v" || ctx.Err() != nil {
		t.Fatal("a fresh context lost its value or has ended")
	}
	time.Sleep(40 * time.Millisecond)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the deadline, nothing waiting: Err %v", ctx.Err())
	}

	ctx, release = withLazyDeadline(parent, time.Now().Add(30*time.Millisecond))
	defer release()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	select {
	case <-child.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) || child.Value(testKey{}) != "v" {
			t.Fatalf("Err %v, derived %v", ctx.Err(), child.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not fire at the deadline")
	}

	early, cancelEarly := context.WithDeadline(parent, time.Now().Add(time.Millisecond))
	defer cancelEarly()
	ctx, release = withLazyDeadline(early, time.Now().Add(time.Hour))
	defer release()
	if got, _ := ctx.Deadline(); got.After(time.Now().Add(time.Minute)) {
		t.Fatal("the parent's earlier deadline was not kept")
	}
	cancelled, cancel := context.WithCancel(parent)
	ctx, release = withLazyDeadline(cancelled, time.Now().Add(time.Hour))
	defer release()
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("the parent's cancellation: Err %v", ctx.Err())
	}
	<-ctx.Done()
}
