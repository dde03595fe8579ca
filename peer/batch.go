package peer

import (
	"net"
	"sync"
)

// batchConn is a link's TCP connection under its TLS connection, which gathers the TLS records
// of one frame and writes them with one system call. crypto/tls writes every record of at most
// 16 KiB with a write of its own, so a frame of a bulk transfer (up to the 256 KiB window) cost
// one write(2) per 16 KiB on the sending replica and as many wake-ups of the receiving one; on
// two shared cores those system calls were most of the link's cost. The framer arms the
// connection before it writes a frame and flushes it after (guard.go), so nothing it gathers
// waits for a later frame; every other write (the handshake, which runs before the framer
// exists, and the alerts and key updates crypto/tls writes on its own) goes out as it comes,
// after what was gathered before it. At most batchMax bytes are held: past it they are written
// out, and so is the gathering's buffer, once, per link connection.
type batchConn struct {
	net.Conn
	mu    sync.Mutex // orders the writes of the framer's flush and crypto/tls's own
	armed bool
	buf   []byte
}

// batchMax is the most a batchConn gathers before writing: 64 KiB, the loopback interface's
// MTU and more than the kernel takes in one segment elsewhere.
const batchMax = 64 << 10

func newBatchConn(c net.Conn) *batchConn { return &batchConn{Conn: c} }

// Write gathers p while the connection is armed and p fits, else writes what was gathered and
// then p.
func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && len(c.buf)+len(p) <= batchMax {
		if c.buf == nil {
			c.buf = make([]byte, 0, batchMax)
		}
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// arm starts gathering the writes of one frame.
func (c *batchConn) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}

// flush writes what was gathered and stops gathering.
func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	return c.flushLocked()
}

func (c *batchConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	b := c.buf
	c.buf = c.buf[:0]
	for len(b) > 0 {
		n, err := c.Conn.Write(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
