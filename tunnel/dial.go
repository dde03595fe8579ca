package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
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
		st, err := t.sess.mux.OpenTypedStream(typeProxy)
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
