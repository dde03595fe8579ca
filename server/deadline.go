package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is a request's context with the request deadline, whose timer is started only
// when something waits on it. context.WithTimeout registers every request with its parent and
// starts a timer, and undoes both when the request ends: a few percent of the CPU of a GET that
// the read cache answers without waiting on anything. Here Deadline and Err answer from the
// deadline itself, and the first Done (a database call's) makes the real context, which from
// then on answers everything, so contexts derived from this one are linked to it as directly as
// to any other.
//
// One difference remains: context.Cause asked before anything waited and after the deadline
// passed says nil where Err says context.DeadlineExceeded. Nothing in this server asks.
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time
	// info, when set, is the request's opInfo, the value of opKey: the request's state and its
	// deadline are one context, made with one allocation (see requestState).
	info *opInfo

	mu     sync.Mutex
	made   atomic.Pointer[context.Context]
	cancel context.CancelFunc
}

// withLazyDeadline returns ctx with the deadline d and a function that releases it, which must be
// called when the request ends.
func withLazyDeadline(ctx context.Context, d time.Time) (context.Context, func()) {
	if p, ok := ctx.Deadline(); ok && p.Before(d) {
		d = p
	}
	c := &deadlineCtx{parent: ctx, deadline: d}
	return c, c.release
}

// real returns the real context, making it on first use.
func (c *deadlineCtx) real() context.Context {
	if m := c.made.Load(); m != nil {
		return *m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.made.Load(); m != nil {
		return *m
	}
	ctx, cancel := context.WithDeadline(c.parent, c.deadline)
	c.cancel = cancel
	c.made.Store(&ctx)
	return ctx
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} { return c.real().Done() }

func (c *deadlineCtx) Err() error {
	if m := c.made.Load(); m != nil {
		return (*m).Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *deadlineCtx) Value(key any) any {
	if c.info != nil && key == any(opKey) {
		return c.info
	}
	if m := c.made.Load(); m != nil {
		return (*m).Value(key)
	}
	return c.parent.Value(key)
}

func (c *deadlineCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}
