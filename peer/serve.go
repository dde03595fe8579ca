package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.ngrok.com/muxado/v2"

	"github.com/edgeplane/edgeplane/internal/netx"
)

// inLink is a link a peer dialled to this replica: the peer opens streams on it, this replica
// carries them to its agents.
type inLink struct {
	p       *peer
	sess    muxado.Session
	ctx     context.Context // ends with the link
	streams atomic.Int64    // forwarded streams open on it
	ws      *windows        // its streams' send windows
	pinging atomic.Bool     // the ping stream has been opened
	reason  atomic.Pointer[error]
}

// fail ends the link for reason, which its log line gives.
func (in *inLink) fail(reason error) {
	in.reason.CompareAndSwap(nil, &reason)
	in.sess.Close()
}

// Serve accepts the links other replicas dial, on ln, until ln or the link is closed. A
// connection whose TLS handshake does not present a link certificate of edgeplane's CA (within
// 5 s) is closed before anything else it sends is read.
func (l *Link) Serve(ln net.Listener) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	l.lns[ln] = struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	defer l.wg.Done()
	err := netx.Serve(ln, l.serveConn)
	l.mu.Lock()
	delete(l.lns, ln)
	l.mu.Unlock()
	return err
}

// enter counts c as one of the link's connections, for Close to close and wait for; false once
// the link is closed.
func (l *Link) enter(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	l.wg.Add(1)
	return true
}

func (l *Link) leave(c net.Conn) {
	l.untrack(c)
	l.wg.Done()
}

// serveConn runs one link a peer dialled: the handshake, then its streams until it ends.
func (l *Link) serveConn(c net.Conn) {
	if !l.enter(c) {
		c.Close()
		return
	}
	defer l.leave(c)
	defer c.Close()
	bc := newBatchConn(c)
	tc := tls.Server(bc, l.serverTLS)
	ctx, cancel := context.WithTimeout(l.ctx, l.t.handshake)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		// Debug: anything that reaches the port gets here, and the dialling replica logs its
		// own failure.
		l.log.Debug("peer link: handshake refused", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	id, err := ReplicaID(tc.ConnectionState().PeerCertificates[0])
	if err != nil { // VerifyConnection has refused it already
		return
	}
	netx.Trust(c) // a replica: off its address's count of connections before their handshake
	ws, dog := newWindows(), newWatchdog(l.t.heartbeat)
	sess := muxado.Server(rawCloser{tc, c}, &muxado.Config{MaxWindowSize: l.window,
		AcceptBacklog: uint32(l.maxStreams), NewFramer: newGuardFramer(l.window, true, ws, dog, bc)})
	sctx, cancelSess := context.WithCancel(l.ctx)
	defer cancelSess()
	l.mu.Lock()
	p := l.peerLocked(id)
	p.inbound++
	l.mu.Unlock()
	in := &inLink{p: p, sess: sess, ctx: sctx, ws: ws}
	dog.start(in.fail)
	defer dog.stop()
	l.log.Info("peer link accepted", "peer", id, "remote", c.RemoteAddr().String())
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		if in.streams.Load() >= l.maxStreams {
			p.refusedIn.Add(1)
			c := &streamConn{Stream: st, p: p, ws: ws, w: ws.add(st.Id(), l.window)}
			refuse(c, statusBusy, fmt.Sprintf("%d streams are open on the link, its limit", l.maxStreams), l.t.header)
			continue
		}
		in.streams.Add(1)
		l.wg.Add(1)
		go l.serveStream(in, st)
	}
	sess.Close()
	err, remote, _ := sess.Wait()
	ws.end(errLinkDown)
	if r := in.reason.Load(); r != nil {
		err = *r
	}
	l.mu.Lock()
	p.inbound--
	closed := l.closed
	l.mu.Unlock()
	code, _ := muxado.GetError(remote)
	switch {
	case closed:
	case remote != nil && code == muxado.NoError && in.reason.Load() == nil:
		l.log.Info("peer link closed by the peer", "peer", id) // it no longer forwards here
	default:
		l.log.Warn("peer link from peer down", "peer", id, "err", err)
	}
}

// refuse answers a forwarded stream with a refusal and closes it, waiting at most wait.
func refuse(c *streamConn, status byte, msg string, wait time.Duration) {
	_ = c.SetWriteDeadline(time.Now().Add(wait))
	_ = c.send(appendAnswer(nil, status, msg))
	c.Close()
}

// serveStream serves one stream of a peer's link: the ping stream, or a public connection
// forwarded to one of this replica's tunnels.
func (l *Link) serveStream(in *inLink, st muxado.Stream) {
	p := in.p
	forwarded := false
	defer func() {
		in.streams.Add(-1) // first: the stats never show room the link does not have yet
		if forwarded {
			p.streamsIn.Add(-1)
		}
		l.wg.Done()
	}()
	c := &streamConn{Stream: st, p: p, ws: in.ws, w: in.ws.add(st.Id(), l.window)}
	_ = st.SetReadDeadline(time.Now().Add(l.t.header))
	var kind [1]byte
	if _, err := io.ReadFull(st, kind[:]); err != nil {
		c.Close()
		return
	}
	switch kind[0] {
	case kindPing:
		in.streams.Add(-1) // the link's own: it takes no forwarded stream's room
		defer in.streams.Add(1)
		l.echo(in, c)
		return
	case kindForward:
	default:
		in.fail(fmt.Errorf("%w: a stream of unknown kind %d", errBadHeader, kind[0]))
		c.Close()
		return
	}
	req, err := readRequest(st)
	if err != nil {
		if errors.Is(err, errBadHeader) {
			in.fail(err) // not a replica's header: the peer is out of step, or not a replica
		}
		c.Close()
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	p.streamsIn.Add(1)
	forwarded = true
	ctx, cancel := context.WithTimeout(in.ctx, l.t.answer)
	agent, err := l.accept(ctx, req)
	cancel()
	if err != nil {
		p.refusedIn.Add(1)
		status := statusAgentDial
		if errors.Is(err, ErrNoTunnel) {
			status = statusNoTunnel
		}
		refuse(c, status, err.Error(), l.t.answer)
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(l.t.answer))
	if err := c.send([]byte{statusOK}); err != nil {
		p.refusedIn.Add(1)
		c.Close()
		agent.Close()
		return
	}
	_ = c.SetWriteDeadline(time.Time{})
	p.forwardedIn.Add(1)
	// The copy towards an agent that stopped reading does not see the link end: close the
	// agent's stream when it does.
	stop := context.AfterFunc(in.ctx, func() { agent.Close() })
	defer stop()
	// No idle timeout here: the replica that took the public connection bounds its quiet time
	// (--public-tcp-idle-timeout), and its end closes the stream.
	netx.Pipe(c, agent, 0)
}

// echo answers the pings of a peer's ping stream. A second ping stream is refused with the
// link.
func (l *Link) echo(in *inLink, c *streamConn) {
	defer c.Close()
	if !in.pinging.CompareAndSwap(false, true) {
		in.fail(fmt.Errorf("%w: a second ping stream", errBadHeader))
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var b [8]byte
	for {
		if _, err := io.ReadFull(c.Stream, b[:]); err != nil {
			return // the link is ending, or the watchdog will end it
		}
		if err := c.send(b[:]); err != nil {
			return
		}
	}
}
