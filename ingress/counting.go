package ingress

import (
	"net"
	"sync/atomic"
)

// countingConn counts the bytes read from and written to a public connection (its TLS records
// included), for a traffic policy reading conn.bytes_in and conn.bytes_out
// (enforce.ByteCounter). Every plain HTTP connection is wrapped (countingListener); of the
// HTTPS ones, only those to an edge or endpoint whose policy reads them (Server.countsBytes),
// which the ClientHello names before the handshake's first byte is answered.
type countingConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// Bytes are the bytes read and written so far.
func (c *countingConn) Bytes() (in, out int64) { return c.in.Load(), c.out.Load() }

// NetConn returns the connection underneath, so that the public limiter finds its own.
func (c *countingConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection underneath, when it can.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// countsBytes reports whether the HTTPS edge or endpoint serving sni has a traffic policy
// reading its connections' byte counts. It is asked once per connection, after the
// ClientHello: the routes' and endpoint's stages are built with the plan or the bind, and each
// says whether it reads them (enforce.Chain.CountsBytes).
func (s *Server) countsBytes(sni string) bool {
	e, ep := s.httpsRoute(sni)
	if e != nil {
		for _, r := range e.Routes {
			if r.Chain.CountsBytes() {
				return true
			}
		}
		return false
	}
	return ep != nil && ep.Chain().CountsBytes()
}

// countingListener wraps each connection it accepts in a countingConn: the plain HTTP
// listener's, whose endpoint a connection's first request names only after bytes were read.
type countingListener struct{ net.Listener }

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c}, nil
}
