package ingress

import (
	"net"
	"sync/atomic"

	"github.com/edgeplane/edgeplane/enforce"
)

// countingConn counts the bytes read from and written to a public connection (its TLS records
// included), for a traffic policy reading conn.bytes_in and conn.bytes_out
// (enforce.ByteCounter). Every plain HTTP connection is wrapped (countingListener); of the
// HTTPS ones, only those to an edge or endpoint whose policy reads them (Server.connReads),
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

// connReads reports what the traffic policies of the HTTPS edge or endpoint serving sni read
// of their connections that the listener provides only when asked: the byte counts and the
// ClientHello's JA4 fingerprint. It is asked once per connection, after the ClientHello: the
// routes' and endpoint's stages are built with the plan or the bind, and each says what it
// reads (enforce.Chain.ConnReads).
func (s *Server) connReads(sni string) enforce.ConnReads {
	var out enforce.ConnReads
	e, ep := s.httpsRoute(sni)
	if e != nil {
		for _, r := range e.Routes {
			cr := r.Chain.ConnReads()
			out.Bytes, out.JA4 = out.Bytes || cr.Bytes, out.JA4 || cr.JA4
		}
		return out
	}
	if ep != nil {
		out = ep.Chain().ConnReads()
	}
	return out
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
