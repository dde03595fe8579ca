package ingress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"time"
)

// The stream transport's pool: idle streams by key, bounded per key and in all, closed after
// their idle timeout or as soon as a watched idle stream is closed by its agent.

// get returns an idle stream of key that is still open, else a new one.
func (t *streamTransport) get(ctx context.Context, key string, info *dialInfo) (sc *streamConn, reused bool, err error) {
	for {
		sc := t.take(key)
		if sc == nil {
			break
		}
		if sc.fresh() {
			info.routed()
			return sc, true, nil
		}
		sc.close()
	}
	c, err := info.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	info.routed()
	sc = &streamConn{t: t, key: key, c: c, watched: make(chan error, 1)}
	sc.br = bufio.NewReaderSize(sc, 4<<10)
	sc.sw = &streamWriter{c: c}
	sc.bw = bufio.NewWriterSize(sc.sw, 4<<10)
	return sc, false, nil
}

// streamWriter is what a stream's bufio.Writer writes to. Its ReadFrom, which bufio.Writer
// hands a body to once the headers are flushed, sends a body with a Content-Length on as it
// arrives, piece by piece as net/http's Transport does, instead of holding it in 4 KiB
// pieces: an upload in progress reaches the agent as it is made. (A chunked body is flushed
// after every chunk by Request.Write itself.)
//
// The head of a request with a body is held back (hold) until the body's first bytes, and
// written with them: one frame to the agent where the head and the body were two, each a TLS
// record and a system call on both sides, and for the agent a read, a window credit and often
// a write to its upstream more. It is held for headWait at most: a body whose first bytes are
// slower than that (a client that stalls, or that waits for an answer before it sends) lets the
// head go alone, so that the upstream sees the request and may answer it before its body (a 401
// or a 413). Nothing else waits: the body's first bytes are sent as soon as a read of the
// client's body returns them, as before. A request that waits for 100-continue is not held
// (its body comes only after the agent's answer to the head).
type streamWriter struct {
	c net.Conn
	// hold: keep the next Write (the request's head) until the body's first bytes.
	hold bool
	// held is a buffer of the copy pool holding n bytes of head, nil when nothing is held.
	held []byte
	n    int
	// timer sends a held head alone after headWait (sendHeld); made once per stream.
	timer *time.Timer
	// Under mu, between the writing goroutine and the timer: armed while the timer may still
	// send the held head; sent once it has (with the error of its write).
	mu      sync.Mutex
	armed   bool
	sent    bool
	sentErr error
}

// headWait is how long a request's head waits for its body's first bytes. A client sends
// its body right after its head, so the body's first bytes arrive within a round trip of
// the head (Nagle's algorithm and a delayed ACK at worst); a body slower than that is a client
// that stalls or waits.
const headWait = 100 * time.Millisecond

// maxHeldHead is the largest head held for its body: the rest of a copy buffer is room for the
// body's first bytes.
const maxHeldHead = 8 << 10

func (w *streamWriter) Write(p []byte) (int, error) {
	if w.held == nil {
		if !w.hold || len(p) > maxHeldHead {
			return w.c.Write(p)
		}
		w.hold = false
		w.held = copyBuffers{}.Get()
		w.n = copy(w.held, p)
		w.arm()
		return len(p), nil
	}
	if err := w.claim(); err != nil {
		return 0, w.fail(err)
	}
	if w.n+len(p) <= len(w.held) {
		w.n += copy(w.held[w.n:], p)
		return len(p), w.release()
	}
	if err := w.release(); err != nil {
		return 0, err
	}
	return w.c.Write(p)
}

func (w *streamWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := w.held
	var sent int64
	if buf != nil {
		// The body's first bytes after the held head, in one write, unless the timer has
		// sent the head meanwhile (the read waited for the client longer than headWait).
		k, err := r.Read(buf[w.n:])
		from := 0
		if w.claimSent() {
			from = w.n
		}
		w.held = nil
		werr := w.sentErr
		if werr == nil && from < w.n+k {
			_, werr = w.c.Write(buf[from : w.n+k])
		}
		w.sentErr = nil
		if werr != nil {
			copyBuffers{}.Put(buf)
			return 0, werr
		}
		sent = int64(k)
		if err != nil {
			copyBuffers{}.Put(buf)
			if err == io.EOF {
				err = nil
			}
			return sent, err
		}
	} else {
		buf = copyBuffers{}.Get()
	}
	defer copyBuffers{}.Put(buf)
	k, err := io.CopyBuffer(struct{ io.Writer }{w.c}, r, buf)
	return sent + k, err
}

// arm starts the wait of a held head for its body.
func (w *streamWriter) arm() {
	w.mu.Lock()
	w.armed, w.sent, w.sentErr = true, false, nil
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(headWait, w.sendHeld)
	} else {
		w.timer.Reset(headWait)
	}
}

// sendHeld is the timer's: the head held for headWait goes alone.
func (w *streamWriter) sendHeld() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed {
		return // claimed by the writing goroutine first
	}
	w.armed = false
	_, w.sentErr = w.c.Write(w.held[:w.n])
	w.sent = true
}

// claimSent takes the held head back from the timer, and reports whether the timer had already
// sent it (its error is then in sentErr). After it, the timer does nothing until the next arm.
func (w *streamWriter) claimSent() bool {
	w.timer.Stop()
	w.mu.Lock()
	w.armed = false
	sent := w.sent
	w.sent = false
	w.mu.Unlock()
	return sent
}

// claim is claimSent for a writer about to add to the held bytes or send them: a head the
// timer sent is dropped from them (what is held is what is still to send).
func (w *streamWriter) claim() error {
	if w.held == nil || !w.claimSent() {
		return nil
	}
	err := w.sentErr
	w.sentErr = nil
	w.n = 0
	return err
}

// fail forgets a held head whose timer's write failed, and returns the error.
func (w *streamWriter) fail(err error) error {
	copyBuffers{}.Put(w.held)
	w.held = nil
	return err
}

// release writes a held head (a body that never came: the request's write is over).
func (w *streamWriter) release() error {
	w.hold = false
	if w.held == nil {
		return nil
	}
	if err := w.claim(); err != nil {
		return w.fail(err)
	}
	buf := w.held
	w.held = nil
	var err error
	if w.n > 0 {
		_, err = w.c.Write(buf[:w.n])
	}
	copyBuffers{}.Put(buf)
	return err
}

// drop forgets a held head (the request's write failed: the stream is closed).
func (w *streamWriter) drop() {
	w.hold = false
	if w.held != nil {
		_ = w.claim()
		copyBuffers{}.Put(w.held)
		w.held = nil
	}
}

// take removes the most recently idle stream of key from the pool, nil if there is none.
func (t *streamTransport) take(key string) *streamConn {
	t.mu.Lock()
	sc := t.idle[key]
	if sc == nil {
		t.mu.Unlock()
		return nil
	}
	t.removeLocked(sc)
	watching := sc.watching
	if !watching {
		sc.timer.Stop() // a watch starting late finds the stream taken (watch)
	}
	t.mu.Unlock()
	if watching {
		// Wake the watcher; what it read tells whether the stream is still good.
		_ = sc.c.SetReadDeadline(time.Unix(1, 0))
		err := <-sc.watched
		sc.watching = false
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			sc.close()
			return t.take(key)
		}
		if err := sc.c.SetReadDeadline(time.Time{}); err != nil {
			sc.close()
			return t.take(key)
		}
	}
	return sc
}

// fresh reports whether a stream taken from the pool may carry a request: nothing arrived on
// it while it was idle (an answer nobody asked for makes the stream unusable).
func (sc *streamConn) fresh() bool { return sc.br.Buffered() == 0 }

// removeLocked takes sc out of the pool. t.mu is held.
func (t *streamTransport) removeLocked(sc *streamConn) {
	// Its key's list: at most maxIdlePerKey long.
	if head := t.idle[sc.key]; head == sc {
		if sc.sameKey == nil {
			delete(t.idle, sc.key)
		} else {
			t.idle[sc.key] = sc.sameKey
		}
	} else {
		for p := head; p != nil; p = p.sameKey {
			if p.sameKey == sc {
				p.sameKey = sc.sameKey
				break
			}
		}
	}
	if sc.older != nil {
		sc.older.newer = sc.newer
	} else {
		t.oldest = sc.newer
	}
	if sc.newer != nil {
		sc.newer.older = sc.older
	} else {
		t.newest = sc.older
	}
	sc.sameKey, sc.older, sc.newer, sc.pooled = nil, nil, nil, false
	t.idleN--
}

// idleOf counts the idle streams of key. t.mu is held.
func (t *streamTransport) idleOf(key string) int {
	n := 0
	for p := t.idle[key]; p != nil; p = p.sameKey {
		n++
	}
	return n
}

// WindowHolder is what a stream an Endpoint dials may also be: one whose flow-control window
// grew past the agent's base window (a download the public client kept up with) holds part of
// a window budget shared between accounts until it closes, since the credit its agent holds
// and the buffer it grew cannot be taken back while it is open.
type WindowHolder interface {
	// HoldsWindowBudget reports whether the stream holds some of the budget now.
	HoldsWindowBudget() bool
}

// holdsWindowBudget reports whether c is a WindowHolder holding some of the budget.
func holdsWindowBudget(c net.Conn) bool {
	h, ok := c.(WindowHolder)
	return ok && h.HoldsWindowBudget()
}

// put returns a stream whose exchange is complete to the pool, or closes it when the pool of
// its key, or the whole pool (then the longest idle stream goes instead), is full. A stream
// that holds window budget is closed too: idle for up to idleTimeout, it would hold budget the
// other accounts' streams (and its own account's next ones) could grow into, for an answer
// that is over; the connection's next request opens a stream (one frame, no round trip more)
// whose window grows again if its answer is large.
func (t *streamTransport) put(sc *streamConn) {
	if holdsWindowBudget(sc.c) {
		sc.close()
		return
	}
	sc.limit = math.MaxInt64
	t.mu.Lock()
	if t.idleOf(sc.key) >= t.maxIdlePerKey {
		t.mu.Unlock()
		sc.close()
		return
	}
	var evicted *streamConn
	if t.idleN >= t.maxIdle {
		evicted = t.oldest
		t.removeLocked(evicted)
	}
	sc.idleSince = time.Now()
	sc.pooled = true
	sc.older, sc.newer = t.newest, nil
	if t.newest != nil {
		t.newest.newer = sc
	} else {
		t.oldest = sc
	}
	t.newest = sc
	sc.sameKey = t.idle[sc.key]
	t.idle[sc.key] = sc
	t.idleN++
	if sc.timer == nil {
		sc.timer = time.AfterFunc(t.watchAfter, sc.watch)
	} else {
		sc.timer.Reset(t.watchAfter)
	}
	t.mu.Unlock()
	if evicted != nil {
		evicted.close()
	}
}

// watch reads a stream idle for watchAfter until its idle timeout, so that one its agent or
// upstream closes (or writes to unasked) leaves the pool at once, as net/http's reading
// goroutine does; a stream reused sooner is not watched, which saves a hand-off per request on
// a busy connection. A request taking the stream meanwhile ends the read with a past deadline
// and receives the result (take).
func (sc *streamConn) watch() {
	t := sc.t
	t.mu.Lock()
	if !sc.pooled || sc.watching {
		t.mu.Unlock()
		return
	}
	sc.watching = true
	_ = sc.c.SetReadDeadline(sc.idleSince.Add(t.idleTimeout))
	t.mu.Unlock()
	_, err := sc.br.Peek(1)
	if err == nil {
		err = errors.New("ingress: the agent sent data on an idle stream")
	}
	t.mu.Lock()
	if sc.pooled { // closed, written to, or idle for idleTimeout: not taken
		t.removeLocked(sc)
		t.mu.Unlock()
		sc.close()
		return
	}
	t.mu.Unlock()
	sc.watched <- err
}

// CloseIdleConnections closes every idle stream (the server's Close, a drain).
func (t *streamTransport) CloseIdleConnections() {
	t.mu.Lock()
	var all []*streamConn
	for sc := t.oldest; sc != nil; sc = sc.newer {
		all = append(all, sc)
	}
	for _, sc := range all {
		t.removeLocked(sc)
		sc.timer.Stop()
	}
	t.mu.Unlock()
	for _, sc := range all {
		sc.close()
	}
}
