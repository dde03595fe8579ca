package ingress

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// Large answers are copied to the public client with a large buffer. The ReverseProxy copies an
// answer's body by reading into its buffer and writing what it read, so each read is one write
// system call to the client and, on an agent's stream, one window increment back to the agent
// (muxado credits every read). With 32 KiB buffers a bulk download costs a write to the client
// and a credit frame to the agent for every 32 KiB: on loopback each of them is also a wake-up of
// the process at the other end, and those wake-ups, not the bytes, were most of the CPU a
// download spent in edgeplane and the agent (docs/performance.md). A read takes whatever the
// stream holds up to the buffer's size, so a 256 KiB buffer moves several of the agent's frames
// at once whenever the client side is the slower (the common case while edgeplane and the agent
// share cores): fewer writes, fewer credit frames, fewer wake-ups, and the same bytes. The
// agent's window is unchanged (credit is still returned for every byte read as it is read).
//
// Only answers declaring a body of at least bulkCopyMin borrow one, and they are bounded: at most
// maxBulkCopies at once in a server, and at most maxBulkCopiesPerAccount of them for any one
// account, so the memory they take is bounded and one account's downloads cannot take every
// large buffer from another's. An answer that finds none free is copied with the 32 KiB buffer,
// as every answer was before.

const (
	// bulkCopySize is the buffer a large answer is copied with: the agents' whole 256 KiB stream
	// window, so one read can take all the agent may have sent.
	bulkCopySize = 256 << 10
	// bulkCopyMin is the declared body length from which an answer borrows a large buffer.
	// Answers of unknown length (streamed, chunked) keep the small one: they are flushed after
	// every write and may stay open for long (server-sent events) while sending little.
	bulkCopyMin = 1 << 20
	// maxBulkCopies bounds the large buffers lent at once in one server (16 MiB).
	maxBulkCopies = 64
	// maxBulkCopiesPerAccount is one account's share of them.
	maxBulkCopiesPerAccount = 16
)

// bulkCopies lends the large buffers of one server's proxy, within the bounds above.
type bulkCopies struct {
	max, perAccount int
	pool            sync.Pool    // of *[]byte of bulkCopySize
	taken           atomic.Int64 // buffers lent since the start, for tests and benchmarks

	mu        sync.Mutex
	lent      int
	byAccount map[string]int
}

func newBulkCopies() *bulkCopies {
	return &bulkCopies{max: maxBulkCopies, perAccount: maxBulkCopiesPerAccount, byAccount: map[string]int{}}
}

// take lends a large buffer for one of account's answers, or returns nil when the server's
// or the account's share is lent out.
func (b *bulkCopies) take(account string) *[]byte {
	b.mu.Lock()
	if b.lent >= b.max || b.byAccount[account] >= b.perAccount {
		b.mu.Unlock()
		return nil
	}
	b.lent++
	b.byAccount[account]++
	b.mu.Unlock()
	b.taken.Add(1)
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return buf
	}
	buf := make([]byte, bulkCopySize)
	return &buf
}

// give takes back a buffer take lent for account.
func (b *bulkCopies) give(account string, buf *[]byte) {
	b.pool.Put(buf)
	b.mu.Lock()
	b.lent--
	if b.byAccount[account]--; b.byAccount[account] <= 0 {
		delete(b.byAccount, account)
	}
	b.mu.Unlock()
}

// inUse is the number of large buffers lent, in all and to account.
func (b *bulkCopies) inUse(account string) (all, ofAccount int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lent, b.byAccount[account]
}

// copyPool is the ReverseProxy's BufferPool for one request: it lends the large buffer when the
// answer (seen by proxy.RoundTrip before the body is copied) is large, else the small one.
type copyPool struct {
	copies  *bulkCopies
	account string
	bulk    bool    // the answer declared at least bulkCopyMin bytes
	big     *[]byte // the large buffer lent, until Put
}

// Get is called by the ReverseProxy once per answer, after the transport returned it.
func (c *copyPool) Get() []byte {
	if c.bulk && c.big == nil && c.copies != nil {
		if c.big = c.copies.take(c.account); c.big != nil {
			return *c.big
		}
	}
	return copyBuffers{}.Get()
}

// Put takes back what Get lent.
func (c *copyPool) Put(buf []byte) {
	if c.big != nil && cap(buf) == bulkCopySize && &buf[:1][0] == &(*c.big)[0] {
		c.copies.give(c.account, c.big)
		c.big = nil
		return
	}
	copyBuffers{}.Put(buf)
}

// sawAnswer notes whether the answer to the request is large enough for a large buffer.
func (c *copyPool) sawAnswer(resp *http.Response) {
	c.bulk = resp.ContentLength >= bulkCopyMin
}
