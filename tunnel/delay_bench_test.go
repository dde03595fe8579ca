package tunnel

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// BenchmarkStreamWindowRTT is BenchmarkStreamWindow across a link with a round trip of 10 ms
// (the agent's bytes reach edgeplane 10 ms after they were sent; its credit goes back at
// once), as between an agent and a server in another region: there a stream carries at most
// one window per round trip, which the CPU never gets near on loopback.
func BenchmarkStreamWindowRTT(b *testing.B) {
	for _, w := range []uint32{256 << 10, 4 << 20, 0} {
		name := fmt.Sprintf("window-%dKiB", w>>10)
		if w == 0 {
			name = "autotuned"
		}
		b.Run(name, func(b *testing.B) {
			benchStreamWindowWrapped(b, w, 32<<10, func(c net.Conn) net.Conn { return newDelayConn(c, 10*time.Millisecond) })
		})
	}
}

// delayConn hands out what its connection reads d after it was read, as a link of that
// one-way latency would.
type delayConn struct {
	net.Conn
	d    time.Duration
	ch   chan delayed
	once sync.Once
	buf  []byte
	err  error
}

type delayed struct {
	at  time.Time
	b   []byte
	err error
}

func newDelayConn(c net.Conn, d time.Duration) *delayConn {
	return &delayConn{Conn: c, d: d, ch: make(chan delayed, 1<<14)}
}

func (c *delayConn) pump() {
	for {
		b := make([]byte, 64<<10)
		n, err := c.Conn.Read(b)
		c.ch <- delayed{at: time.Now().Add(c.d), b: b[:n], err: err}
		if err != nil {
			return
		}
	}
}

func (c *delayConn) Read(p []byte) (int, error) {
	c.once.Do(func() { go c.pump() })
	for len(c.buf) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		x := <-c.ch
		time.Sleep(time.Until(x.at))
		c.buf, c.err = x.b, x.err
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}
