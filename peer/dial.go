package peer

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.ngrok.com/muxado/v2"
)

// outLink is a link this replica dialled to a peer: one muxado session over one TLS
// connection, which every stream forwarded to the peer shares.
type outLink struct {
	p       *peer
	raw     net.Conn
	sess    muxado.Session
	streams atomic.Int64  // forwarded streams open on it
	ws      *windows      // its streams' send windows
	dog     *watchdog     // ends it when the peer goes quiet
	done    chan struct{} // closed once the session has ended
	reason  atomic.Pointer[error]
	down    atomic.Bool // set as the link starts ending: no new stream is opened on it
}

// fail ends the link for reason, which its log line gives.
func (o *outLink) fail(reason error) {
	o.reason.CompareAndSwap(nil, &reason)
	o.down.Store(true)
	o.sess.Close()
}

// errRetired is why a link to a peer no longer named is closed.
var errRetired = errors.New("the replica is no longer a peer")

// retire ends the link to a peer no longer named, without waiting (muxado's Close waits up to
// 250 ms for its GOAWAY).
func (o *outLink) retire() {
	o.reason.CompareAndSwap(nil, &errRetired)
	o.down.Store(true)
	go o.sess.Close()
}

// unavailable is a dial error of ErrUnavailable for replica id.
func unavailable(id string, format string, args ...any) error {
	return fmt.Errorf("peer %s: %w: %s", id, ErrUnavailable, fmt.Sprintf(format, args...))
}

// backoff is the wait after the given number of failed attempts in a row.
func (t timing) backoff(fails int) time.Duration {
	d := t.backoffMin
	for i := 1; i < fails && d < t.backoffMax; i++ {
		d *= 2
	}
	return min(d, t.backoffMax)
}

// Dial opens a stream to replica id for one public connection to a tunnel it holds, and
// returns it once the replica has opened the stream to the agent: the connection carries the
// public client's bytes both ways from then on, and its CloseWrite half-closes the agent's
// stream. A link to the replica that is up is used; else one is dialled at addr (or at the
// address SetPeers gave, when addr is ""). The error wraps ErrNoTunnel or ErrAgentDial when the
// replica refused, and ErrUnavailable when it could not be asked (and ctx's error when ctx ended
// first). It never waits longer than ctx allows, a handshake (5 s) when a new link is needed,
// and the replica's answer (10 s); a replica that failed recently is not dialled again before
// its backoff (250 ms, doubling to 2 s) has passed: Dial fails at once meanwhile.
func (l *Link) Dial(ctx context.Context, id, addr string, req Request) (net.Conn, error) {
	hdr, err := appendHeader(make([]byte, 0, 256), req)
	if err != nil {
		return nil, fmt.Errorf("peer: %w", err)
	}
	o, err := l.link(ctx, id, addr)
	if err != nil {
		return nil, err
	}
	p := o.p
	if o.streams.Add(1) > l.maxStreams {
		o.streams.Add(-1)
		p.refusedOut.Add(1)
		return nil, unavailable(id, "%d streams are open on the link, its limit", l.maxStreams)
	}
	p.streamsOut.Add(1)
	c, err := l.open(ctx, o, hdr)
	if err != nil {
		o.streams.Add(-1)
		p.streamsOut.Add(-1)
		p.refusedOut.Add(1)
		return nil, err
	}
	c.done = func() {
		o.streams.Add(-1)
		p.streamsOut.Add(-1)
	}
	p.forwardedOut.Add(1)
	return c, nil
}

// link returns the link to replica id, dialling addr if none is up, or why there is none.
func (l *Link) link(ctx context.Context, id, addr string) (*outLink, error) {
	waited := false
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, unavailable(id, "the link is closed")
		}
		if id == l.id.ID() {
			l.mu.Unlock()
			return nil, unavailable(id, "it is this replica")
		}
		p := l.peerLocked(id)
		if o := p.out; o != nil {
			l.mu.Unlock()
			if o.down.Load() {
				// watch marks a link down without a reason of its own when its session simply
				// ended; the reason, when there is one, says who ended it.
				why := error(errLinkDown)
				if r := o.reason.Load(); r != nil {
					why = *r
				}
				return nil, unavailable(id, "the link is going down: %v", why)
			}
			return o, nil
		}
		ch := p.dialing
		if ch == nil {
			if waited || time.Now().Before(p.retryAt) {
				err := unavailable(id, "%v (next attempt in %s)", p.lastErr, time.Until(p.retryAt).Round(time.Millisecond))
				l.mu.Unlock()
				return nil, err
			}
			if addr != "" {
				p.addr = addr
			}
			ch = l.startDialLocked(p)
		}
		l.mu.Unlock()
		select {
		case <-ch:
			waited = true
		case <-ctx.Done():
			return nil, fmt.Errorf("peer %s: %w: %w", id, ErrUnavailable, ctx.Err())
		}
	}
}

// startDialLocked starts dialling p and returns a channel closed once the attempt is over;
// mu is held.
func (l *Link) startDialLocked(p *peer) chan struct{} {
	ch := make(chan struct{})
	p.dialing = ch
	addr := p.addr
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(ch)
		o, err := l.connect(p, addr)
		l.mu.Lock()
		defer l.mu.Unlock()
		p.dialing = nil
		if err == nil && l.closed {
			o.sess.Close()
			err = errors.New("the link is closed")
		}
		if err != nil {
			p.fails++
			p.retryAt = time.Now().Add(l.t.backoff(p.fails))
			if errors.Is(err, errOtherReplica) {
				// The address is changing hands (a successor announced it while its predecessor
				// still accepts there): the peer will answer as soon as the predecessor stops,
				// and a link that comes up a backoff late leaves its agents unreachable from here
				// that long. Tried again soon, without backing off further.
				p.retryAt = time.Now().Add(otherReplicaRetry)
				time.AfterFunc(otherReplicaRetry, l.poke)
			}
			p.lastErr = err
			level := slog.LevelWarn // the first failure in a row; the retries' at debug
			if p.fails > 1 {
				level = slog.LevelDebug
			}
			l.log.Log(l.ctx, level, "peer link: dial failed", "peer", p.id, "addr", addr, "fails", p.fails, "err", err)
			return
		}
		p.out, p.fails, p.lastErr = o, 0, nil
		l.log.Info("peer link up", "peer", p.id, "addr", addr)
		if f := l.onUp.Load(); f != nil {
			(*f)(p.id)
		}
		l.wg.Add(2)
		go l.watch(o)
		go l.heartbeat(o)
	}()
	return ch
}

// connect dials addr and makes the link: TCP, the TLS handshake (the server must be replica
// p.id), then muxado; bounded by the handshake timeout.
func (l *Link) connect(p *peer, addr string) (*outLink, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.t.handshake)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !l.track(raw) {
		raw.Close()
		return nil, errors.New("the link is closed")
	}
	bc := newBatchConn(raw)
	tc := tls.Client(bc, l.id.ClientConfig(p.id))
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		l.untrack(raw)
		return nil, err
	}
	ws, dog := newWindows(), newWatchdog(l.t.heartbeat)
	sess := muxado.Client(rawCloser{tc, raw}, &muxado.Config{MaxWindowSize: l.window, AcceptBacklog: 1,
		NewFramer: newGuardFramer(l.window, false, ws, dog, bc)})
	return &outLink{p: p, raw: raw, sess: sess, ws: ws, dog: dog, done: make(chan struct{})}, nil
}

// watch waits for a dialled link's end, marks its peer down, and backs off before dialling it
// again.
func (l *Link) watch(o *outLink) {
	defer l.wg.Done()
	err, _, _ := o.sess.Wait()
	o.dog.stop()
	o.down.Store(true)
	o.ws.end(errLinkDown)
	close(o.done)
	l.untrack(o.raw)
	if r := o.reason.Load(); r != nil {
		err = *r
	}
	retired := errors.Is(err, errRetired)
	l.mu.Lock()
	p := o.p
	if p.out == o {
		p.out, p.lastErr = nil, fmt.Errorf("the link went down: %v", err)
		if !retired {
			p.fails, p.retryAt = 1, time.Now().Add(l.t.backoff(1))
		}
	}
	closed := l.closed
	l.mu.Unlock()
	switch {
	case closed:
	case retired:
		l.log.Info("peer link closed", "peer", p.id, "err", err)
	default:
		l.log.Warn("peer link down", "peer", p.id, "err", err)
	}
}

// heartbeat pings the peer over the link's ping stream every interval, which the peer echoes,
// and arms the link's watchdog, which ends the link when nothing at all has come from the peer
// for the heartbeat timeout (guard.go). The peer, in turn, ends the link when nothing comes from
// this replica.
func (l *Link) heartbeat(o *outLink) {
	defer l.wg.Done()
	o.dog.start(o.fail)
	st, err := o.sess.OpenStream()
	if err != nil {
		o.fail(err)
		return
	}
	defer st.Close()
	tick := time.NewTicker(l.t.interval)
	defer tick.Stop()
	buf := append(make([]byte, 0, 9), kindPing)
	var echo [8]byte
	for seq := uint64(1); ; seq++ {
		buf = binary.BigEndian.AppendUint64(buf, seq)
		_, err := st.Write(buf)
		if err == nil {
			_, err = io.ReadFull(st, echo[:])
		}
		if err == nil && binary.BigEndian.Uint64(echo[:]) != seq {
			err = fmt.Errorf("%w: the heartbeat's echo is %d, not %d", errBadHeader, binary.BigEndian.Uint64(echo[:]), seq)
		}
		if err != nil {
			select {
			case <-o.done:
			default:
				o.fail(err)
			}
			return
		}
		buf = buf[:0]
		select {
		case <-o.done:
			return
		case <-tick.C:
		}
	}
}

// open opens a forwarded stream on o, writes its header and waits for the holder's answer.
func (l *Link) open(ctx context.Context, o *outLink, hdr []byte) (*streamConn, error) {
	id := o.p.id
	st, err := o.sess.OpenStream()
	if err != nil {
		return nil, unavailable(id, "the link broke: %v", err)
	}
	c := &streamConn{Stream: st, p: o.p, ws: o.ws, w: o.ws.add(st.Id(), l.window)}
	start := time.Now()
	deadline := start.Add(l.t.answer)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Unix(1, 0)) })
	err = c.send(hdr)
	if err == nil {
		err = readAnswer(st)
	}
	if !stop() {
		err = fmt.Errorf("peer %s: %w: %w", id, ErrUnavailable, ctx.Err())
	}
	if err != nil {
		c.Close()
		var ref *refusal
		switch {
		case errors.As(err, &ref):
			return nil, fmt.Errorf("peer %s: %w", id, err)
		case errors.Is(err, ErrUnavailable):
			return nil, err
		case errors.Is(err, errBadHeader):
			o.fail(err)
			return nil, unavailable(id, "%v", err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, unavailable(id, "no answer within %s", deadline.Sub(start).Round(time.Millisecond))
		}
		return nil, unavailable(id, "the link broke: %v", err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// streamConn is a forwarded stream as its user sees it: its writes wait on the link's copy of
// its send window (window.go), it counts the bytes each way, and it calls done once on its
// first Close.
type streamConn struct {
	muxado.Stream
	p    *peer
	ws   *windows
	w    *sendWindow
	done func()
	once sync.Once
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.Stream.Read(b)
	if n > 0 {
		c.p.bytesIn.Add(uint64(n))
	}
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) {
	n, err := c.write(b)
	if n > 0 {
		c.p.bytesOut.Add(uint64(n))
	}
	return n, err
}

// send writes the whole of b, uncounted: the link's own header or answer.
func (c *streamConn) send(b []byte) error {
	_, err := c.write(b)
	return err
}

// write hands muxado as much of b at a time as the send window holds.
func (c *streamConn) write(b []byte) (int, error) {
	total := 0
	for len(b) > 0 {
		n, err := c.w.take(len(b))
		if err != nil {
			return total, err
		}
		m, err := c.Stream.Write(b[:n])
		total += m
		b = b[m:]
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// SetDeadline sets the stream's read and write deadlines.
func (c *streamConn) SetDeadline(t time.Time) error {
	c.w.setDeadline(t)
	return c.Stream.SetDeadline(t)
}

// SetWriteDeadline bounds the writes' wait for the window as well as muxado's.
func (c *streamConn) SetWriteDeadline(t time.Time) error {
	c.w.setDeadline(t)
	return c.Stream.SetWriteDeadline(t)
}

// Close closes the stream both ways: a Write waiting for the window returns, the peer's end
// reads its end, and a write the peer makes after it resets the peer's end.
func (c *streamConn) Close() error {
	c.release()
	return c.Stream.Close()
}

// release ends the stream's writes and counts it closed, once, without closing it.
func (c *streamConn) release() {
	c.once.Do(func() {
		c.ws.remove(c.Stream.Id(), net.ErrClosed)
		if c.done != nil {
			c.done()
		}
	})
}
