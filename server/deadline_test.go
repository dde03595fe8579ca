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
	// A loaded machine may reach this line past the deadline: then it has ended, rightly. Err is
	// read before the clock, so an error seen before the deadline is one that came too early.
	if err := ctx.Err(); ctx.Value(testKey{}) != "v" || (err != nil && time.Now().Before(d)) {
		t.Fatal("a fresh context lost its value or has ended")
	}
	time.Sleep(time.Until(d) + 10*time.Millisecond) // the deadline passes, with nothing waiting
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
