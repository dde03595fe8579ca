package tunnel

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A tunnel stopped by the server (its reservation deleted, its credential's ACL changed) leaves
// routing at once, but a proxy stream opened to it just before may still be on its way to the
// agent. ngrok-go (v1.12.1) handles a StopTunnel by shutting the tunnel and then silently drops,
// without closing, any proxy stream that arrives for it afterwards: the public request that
// opened it would wait until its client gave up. So a stopped tunnel's StopTunnel waits until the
// streams opened to it have been answered (the agent's first byte, or a close), for at most
// stopGrace; by then the agent has taken each one from its session.

// stopGrace bounds how long a StopTunnel waits for the streams opened before it.
const stopGrace = 5 * time.Second

// unanswered counts the proxy streams of a tunnel that have not yet had a byte from the agent.
type unanswered struct{ n atomic.Int64 }

// track wraps a stream just opened to the tunnel: it counts as unanswered until its first read
// returns data or an error, or it is closed.
func (u *unanswered) track(c net.Conn) net.Conn {
	u.n.Add(1)
	return &answerConn{Conn: c, u: u}
}

// wait returns once no stream of the tunnel is unanswered, or after grace.
func (u *unanswered) wait(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for u.n.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// answerConn is a proxy stream counted by its tunnel's unanswered until the agent answers it.
type answerConn struct {
	net.Conn
	u    *unanswered
	once sync.Once
}

func (c *answerConn) answered() { c.once.Do(func() { c.u.n.Add(-1) }) }

// Read reads from the stream; its first data or error marks the stream answered.
func (c *answerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 || err != nil {
		c.answered()
	}
	return n, err
}

// CloseWrite half-closes the stream (a muxado stream can), for TCP's half-close.
func (c *answerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// HoldsWindowBudget reports whether the stream holds window budget (limitedStream's).
func (c *answerConn) HoldsWindowBudget() bool { return holdsWindowBudget(c.Conn) }

// Close closes the stream; a closed stream no longer holds up its tunnel's StopTunnel.
func (c *answerConn) Close() error {
	c.answered()
	return c.Conn.Close()
}
