package server

import (
	"container/list"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	ep "github.com/edgeplane/edgeplane"
)

// DefaultResponseBytes is Config.ResponseBytes's default: the response bodies the API renders at
// once. One answer is at most ep.MaxPageBytes (about 9 MiB), and rendering it takes a few times
// that in memory (the documents read, the JSON, the body), so the default lets a few of the
// largest answers be rendered at once and keeps the process within its memory target; small
// answers are charged little and pass many at a time.
const DefaultResponseBytes = 16 << 20

// budgetRetryAfter is the Retry-After, in seconds, of a request refused for want of budget.
const budgetRetryAfter = "1"

// bodyBudget bounds the bytes of the response bodies being rendered at once: many concurrent
// answers of the largest size would otherwise multiply their bound by the number of clients.
// A request takes its share before it reads what it will show, and waits in arrival order for
// it; one that cannot have it within its deadline is answered 503 (see errOverloaded). A nil
// budget is no limit.
type bodyBudget struct {
	max int64

	mu    sync.Mutex
	used  int64
	queue list.List // of *budgetWaiter, first come first served
}

// budgetWaiter is a request waiting for n bytes; ready is closed when they are its.
type budgetWaiter struct {
	n       int64
	ready   chan struct{}
	granted bool
}

// newBodyBudget returns a budget of max bytes, or nil (no limit) when max is not positive.
func newBodyBudget(max int64) *bodyBudget {
	if max <= 0 {
		return nil
	}
	return &bodyBudget{max: max}
}

// budgetHold is the share of the budget one request holds.
type budgetHold struct {
	b *bodyBudget
	n int64
}

// take waits until n bytes of the budget are free and returns them, or fails with the
// overload error when ctx ends first. A share larger than the whole budget is cut to it, so
// that the largest answer is still served, alone. Waiters are served in arrival order: a large
// share is not starved by a stream of small ones.
func (b *bodyBudget) take(ctx context.Context, n int64) (*budgetHold, error) {
	if b == nil {
		return nil, nil
	}
	n = max(1, min(n, b.max))
	b.mu.Lock()
	if b.queue.Len() == 0 && b.used+n <= b.max {
		b.used += n
		b.mu.Unlock()
		return &budgetHold{b, n}, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := b.queue.PushBack(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return &budgetHold{b, n}, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.granted {
		b.mu.Unlock()
		b.give(n)
	} else {
		b.queue.Remove(e)
		b.grant() // those behind it may fit now
		b.mu.Unlock()
	}
	return nil, errOverloaded()
}

// give returns n bytes to the budget and hands them to the waiters they now fit.
func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
}

// grant gives the first waiters their shares while they fit; b.mu must be held.
func (b *bodyBudget) grant() {
	for e := b.queue.Front(); e != nil; e = b.queue.Front() {
		w := e.Value.(*budgetWaiter)
		if b.used+w.n > b.max {
			return
		}
		b.used += w.n
		w.granted = true
		b.queue.Remove(e)
		close(w.ready)
	}
}

// inUse is the bytes taken now, for tests.
func (b *bodyBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// resize makes the hold n bytes once the body is rendered and its size known: the rest goes
// back to the budget, or, when the body came out larger than the share taken for it, the
// difference is taken without waiting (the budget may be passed by it for a moment, and those
// waiting wait until it is back within). A nil hold does nothing.
func (h *budgetHold) resize(n int64) {
	if h == nil {
		return
	}
	n = max(n, 0)
	switch {
	case n < h.n:
		h.b.give(h.n - n)
	case n > h.n:
		h.b.mu.Lock()
		h.b.used += n - h.n
		h.b.mu.Unlock()
	}
	h.n = n
}

// release returns the whole hold. A nil hold does nothing; a hold is released once.
func (h *budgetHold) release() {
	if h == nil || h.n == 0 {
		return
	}
	h.b.give(h.n)
	h.n = 0
}

// errOverloaded is the answer to a request that could not have its share of the response
// budget within its deadline: 503 ERR_NGROK_9000, as when the database cannot serve a request in
// time, which tells clients to try again (Retry-After says when).
func errOverloaded() *ep.Error {
	return &ep.Error{Status: http.StatusServiceUnavailable, Code: ep.CodeUnavailable,
		Msg: "The server is rendering too many large answers at once; try again shortly."}
}

// takeBudget is take for a request: when it fails, Retry-After is set on w for the 503.
func (s *Server) takeBudget(w http.ResponseWriter, r *http.Request, n int64) (*budgetHold, error) {
	h, err := s.budget.take(r.Context(), n)
	if err != nil {
		w.Header().Set("Retry-After", budgetRetryAfter)
	}
	return h, err
}

// docBound is the most one document of the collection shows, its embedded children included:
// what a GET of it, or one object of a page, is charged before it is read.
func (s *Server) docBound(c *collection) int64 {
	if c.embeds != nil {
		return ep.MaxHTTPSEdgeResponseBytes
	}
	return s.maxBody + ep.RenderSlack
}

// pageBound is the most a list page of limit objects may show: the documents at their bound,
// and never more than a page may show (ep.MaxPageBytes, which lets the first object of a page
// pass when it is larger).
func (s *Server) pageBound(c *collection, limit int) int64 {
	return max(min(int64(limit)*s.docBound(c), ep.MaxPageBytes), s.docBound(c))
}

// pageShare is what a list page of limit objects takes of the budget before it is read. At
// most pageBound, and that when the server knows nothing of the collection's sizes in the
// account (since it started), when the collection embeds children (an HTTPS edge grows with each
// route) or is live. Otherwise limit times the largest document of the collection this server
// has seen the account create, change or read, and at least a quarter of pageBound: pages of
// small objects then pass several at a time rather than take turns. A page larger than its
// share (objects another replica made, or that this one has not shown since it started) takes
// the rest once rendered, and the server learns its size; as no share is under a quarter of
// the bound, such pages make what is rendered at once at most four times the budget.
func (s *Server) pageShare(account string, c *collection, limit int) int64 {
	bound := s.pageBound(c, limit)
	largest, ok := c.sizes.largest(account)
	if !ok || c.embeds != nil || c.live {
		return bound
	}
	return max(min(int64(limit)*(largest+1), bound), bound/4)
}

// docSizes remembers, per account, the largest document of one collection the server has
// rendered (or been given, in a create or update) since it started. Each collection has its own
// (collection.sizes), keyed by the account alone: a key of account and collection together was
// hashed through its type on every request.
type docSizes struct{ m sync.Map } // account → *atomic.Int64

// saw records a document of n bytes.
func (d *docSizes) saw(account string, n int) {
	if account == "" {
		return
	}
	v, ok := d.m.Load(account)
	if !ok {
		v, _ = d.m.LoadOrStore(account, new(atomic.Int64))
	}
	largest := v.(*atomic.Int64)
	for cur := largest.Load(); int64(n) > cur; cur = largest.Load() {
		if largest.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// largest is the largest document seen, and whether any was.
func (d *docSizes) largest(account string) (int64, bool) {
	v, ok := d.m.Load(account)
	if !ok {
		return 0, false
	}
	return v.(*atomic.Int64).Load(), true
}

// forget drops what is known of the collection's sizes in the account, after a change that
// may have made one of its documents larger without the server seeing it whole (a module set
// on it): its next list takes its bound again.
func (d *docSizes) forget(account string) {
	d.m.Delete(account)
}

// parts is a response body made of pieces: small pieces are gathered into chunks of
// partsChunk bytes, large ones kept as they are, so a large body is never copied whole.
type parts struct {
	chunks [][]byte
	size   int
}

const partsChunk = 32 << 10

// add appends b, which the caller no longer changes.
func (p *parts) add(b []byte) {
	p.size += len(b)
	n := len(p.chunks)
	switch {
	case len(b) >= partsChunk/2:
		p.chunks = append(p.chunks, b[:len(b):len(b)]) // full: nothing is appended to it
	case n > 0 && len(p.chunks[n-1])+len(b) <= cap(p.chunks[n-1]):
		p.chunks[n-1] = append(p.chunks[n-1], b...)
	default:
		p.chunks = append(p.chunks, append(make([]byte, 0, partsChunk), b...))
	}
}

// writeTo writes the body to w, stopping at the first error (the client went away).
func (p *parts) writeTo(w io.Writer) {
	for _, c := range p.chunks {
		if _, err := w.Write(c); err != nil {
			return
		}
	}
}
