package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// Opening a proxy stream to an agent for one public connection, counted on its session for a
// handover's drain (drain.go).

// ErrSessionGone is returned by Dial when the agent's session has ended.
var ErrSessionGone = errors.New("tunnel: the agent's session has ended")

// gone returns ErrSessionGone for a stream that failed because the session ended meanwhile (a
// drain, the agent leaving), so that the caller knows the agent may be found elsewhere, and err
// otherwise.
func (s *session) gone(err error) error {
	select {
	case <-s.done:
		return fmt.Errorf("%w: %v", ErrSessionGone, err)
	default:
		return err
	}
}

// Dial opens a proxy stream to the agent for one public connection and writes its header: the
// returned connection carries the public client's bytes from then on. clientAddr is the public
// client's ip:port; edgeType is "" for plain endpoints, "1" TCP, "2" TLS, "3" HTTPS edges.
func (t *Tunnel) Dial(ctx context.Context, clientAddr, proto, edgeType string, passthrough bool) (net.Conn, error) {
	select {
	case <-t.sess.done:
		return nil, ErrSessionGone
	default:
	}
	if !t.sess.enter() {
		return nil, ErrSessionGone // a drain retired the session: its agent is moving
	}
	if proto == "" {
		proto = t.proto
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		st, err := t.sess.openProxyStream()
		if err != nil {
			t.sess.leave()
			ch <- result{nil, t.sess.gone(err)}
			return
		}
		_ = st.SetWriteDeadline(time.Now().Add(rpcTimeout))
		if err := writeProxyHeader(st, ProxyHeader{ID: t.id, ClientAddr: clientAddr, Proto: proto, EdgeType: edgeType, PassthroughTLS: passthrough}); err != nil {
			st.Close()
			t.sess.leave()
			ch <- result{nil, t.sess.gone(err)}
			return
		}
		_ = st.SetWriteDeadline(time.Time{})
		ch <- result{t.sess.countOpen(t.streams.track(st)), nil}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// openProxyStream opens a proxy stream; with wide windows (window.go) its writes are held to the
// agent's own window, which muxado no longer knows.
func (s *session) openProxyStream() (muxado.Stream, error) {
	st, err := s.mux.OpenTypedStream(typeProxy)
	if err != nil || !s.guard.wide {
		return st, err
	}
	id := frame.StreamId(st.Id())
	w := s.guard.sendWindowOf(id)
	if w == nil {
		st.Close() // the agent reset it already, or the session is ending
		return nil, errStreamEnded
	}
	return &limitedStream{Stream: st, w: w, g: s.guard, id: id}, nil
}

// limitedStream is a proxy stream whose writes wait for the agent's window.
type limitedStream struct {
	muxado.Stream
	w  *sendWindow
	g  *streamGuard
	id frame.StreamId
}

// Write writes p in pieces of at most the agent's window left, waiting for its credit.
func (l *limitedStream) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := l.w.take(len(p) - n)
		if err != nil {
			return n, err
		}
		m, err := l.Stream.Write(p[n : n+k])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// HoldsWindowBudget reports whether the stream holds some of the window budget: its window grew
// past agentWindow, and until the stream closes the agent keeps the credit for the excess and
// muxado's buffer the capacity it grew to (neither can be taken back on an open stream). The
// public listeners close such a stream when its exchange ends rather than keep it idle for the
// connection's next request (ingress.WindowHolder), so a finished download returns its share
// of the budget at once.
func (l *limitedStream) HoldsWindowBudget() bool {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	e, ok := l.g.wins[l.id]
	return ok && e.charged > 0
}

// holdsWindowBudget reports whether the stream under a wrapper holds window budget.
func holdsWindowBudget(c net.Conn) bool {
	h, ok := c.(interface{ HoldsWindowBudget() bool })
	return ok && h.HoldsWindowBudget()
}

// Close closes the stream and forgets its window: muxado discards what the agent sends after.
func (l *limitedStream) Close() error {
	err := l.Stream.Close()
	l.g.mu.Lock()
	l.g.dropWide(l.id, errStreamEnded)
	l.g.mu.Unlock()
	return err
}
