package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/ja4"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/plan"
)

// errHelloRead stops the handshake once the ClientHello has been read.
var errHelloRead = errors.New("ingress: client hello read")

// maxHello bounds the bytes read before the server name is known (a ClientHello is at most a
// few kilobytes; TLS allows up to 16 KiB per record).
const maxHello = 32 << 10

// recordingConn reads from a connection while recording what it read, and writes nothing: it
// lets crypto/tls parse a ClientHello without answering it.
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	if c.buf.Len() >= maxHello {
		return 0, errors.New("ingress: client hello too large")
	}
	p = p[:min(len(p), maxHello-c.buf.Len())]
	n, err := c.Conn.Read(p)
	c.buf.Write(p[:n])
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) { return 0, io.ErrClosedPipe }

// readHello reads the ClientHello of c and returns it as crypto/tls parsed it, its server name
// (lower case, without a final dot) and the bytes read.
func readHello(c net.Conn) (*tls.ClientHelloInfo, string, []byte, error) {
	rc := &recordingConn{Conn: c}
	var hello *tls.ClientHelloInfo
	err := tls.Server(rc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errHelloRead
	}}).Handshake()
	if hello == nil {
		return nil, "", nil, err
	}
	return hello, strings.ToLower(strings.TrimSuffix(hello.ServerName, ".")), rc.buf.Bytes(), nil
}

// replayConn reads the recorded bytes first, then from the connection.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// fingerprintedConn is a connection whose ClientHello the listener fingerprinted, for a
// traffic policy reading conn.tls.ja4_fingerprint (enforce.Fingerprinted). Only the
// connections to an edge or endpoint whose policy reads it are wrapped (Server.connReads).
type fingerprintedConn struct {
	*replayConn
	ja4 string
}

// JA4 is the fingerprint of the connection's ClientHello.
func (c *fingerprintedConn) JA4() (string, bool) { return c.ja4, true }

// NetConn returns the underlying connection, so that the public limiter finds its own
// connection inside an HTTPS one (netx.ConnState).
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the underlying connection, when it can.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// routeTLS reads a connection's ClientHello and hands it on by server name: a TLS endpoint gets
// the client's TLS untouched; an HTTPS endpoint (or a name edgeplane serves a certificate for) is
// terminated here and served as HTTP; for anything else the handshake fails with
// unrecognized_name.
func (s *Server) routeTLS(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.headerTimeout()))
	ch, sni, hello, err := readHello(c)
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	conn := &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(hello), c)}
	if s.answerALPN(conn, sni, ch.SupportedProtos) {
		return
	}
	// A TLS edge's or endpoint's connection counts against its account from here; at the
	// account's share of the public connections it is closed, as ngrok closes a TCP or TLS
	// connection over a connection limit. Their on_tcp_connect phase reads the ClientHello
	// (conn.tls.sni; conn.tls.ja4_fingerprint, fingerprinted only for a policy reading it).
	e, ep := s.tlsRoute(sni)
	if e != nil {
		if !netx.Claim(c, e.Account) {
			c.Close()
			return
		}
		s.serveTLSEdge(conn, e, &enforce.TLSHello{ServerName: sni, Info: ch})
		return
	}
	if ep != nil {
		if !netx.Claim(c, ep.AccountID()) {
			c.Close()
			return
		}
		s.serveTLSEndpoint(conn, ep, &enforce.TLSHello{ServerName: sni, Info: ch})
		return
	}
	// Any other name, or none, is an HTTPS handshake: one edgeplane serves no name for ends with
	// the unrecognized_name alert (see New's GetCertificate).
	var hc net.Conn = conn
	if reads := s.connReads(sni); reads.Bytes || reads.JA4 {
		if reads.JA4 {
			hc = &fingerprintedConn{replayConn: conn, ja4: ja4.Fingerprint(ch)}
		}
		if reads.Bytes {
			hc = &countingConn{Conn: hc} // counts the replayed ClientHello too
		}
	}
	if !s.handed.hand(tls.Server(hc, s.tlsConf)) {
		c.Close()
	}
}

// configForClient is the TLS configuration of an HTTPS connection, by its server name: an
// HTTPS edge's or an https endpoint's TLS policy (client certificates, minimum version), or the
// listener's base (nil) for a name that asks nothing.
func (s *Server) configForClient(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	e, ep := s.httpsRoute(name)
	h := plan.Hello{ServerName: name}
	if hello.Conn != nil {
		h.Client, h.Server = hello.Conn.RemoteAddr(), hello.Conn.LocalAddr()
	}
	if e != nil {
		ct, err := e.ConnTLS(h)
		if err != nil {
			return nil, err // an expression of terminate-tls's rule failed: no handshake
		}
		return connTLS(s.tlsBase, ct.Policy, ct.Cert), nil
	}
	if ep != nil {
		ct, err := ep.TLSFor(h)
		if err != nil {
			return nil, err // an expression of terminate-tls's rule failed: no handshake
		}
		if policy := ct.Policy; policy.MutualTLS || policy.MinVersion != 0 || policy.MaxVersion != 0 || ct.Cert != nil {
			return connTLS(s.tlsBase, policy, ct.Cert), nil
		}
	}
	return nil, nil
}

// connTLS is the TLS configuration of a public connection to an edge or an endpoint that the
// listener terminates: the listener's base with the policy's minimum version and client
// certificates (plan.TLSPolicy.Config, the same for edges and endpoints), presenting cert when
// one is given (a tls endpoint's own) and the host's certificate otherwise.
func connTLS(base *tls.Config, policy plan.TLSPolicy, cert *tls.Certificate) *tls.Config {
	c := policy.Config(base)
	if cert != nil {
		c.GetCertificate = nil
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}

// terminate runs the server side of a TLS handshake on c with cfg, bounded by the header
// timeout; false means it failed (a client without the certificate mutual TLS requires, a
// version below the minimum, a name without a certificate) and c is to be closed.
func (s *Server) terminate(c net.Conn, cfg *tls.Config) (*tls.Conn, bool) {
	tc := tls.Server(c, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), s.headerTimeout())
	defer cancel()
	return tc, tc.HandshakeContext(ctx) == nil
}

// serveTLSEndpoint carries a public connection to a tls endpoint, once its connection stages
// (IP restriction, the on_tcp_connect rules of its traffic policy) admit the client: a refused
// connection is closed after its ClientHello, before any byte reaches the agent. The client's
// TLS is passed through untouched, or, with TLS termination, ended here (with the agent's
// certificate or the host's, asking for a client certificate under mutual TLS) and the
// plaintext carried (PassthroughTLS false). hello is the ClientHello the listener read.
func (s *Server) serveTLSEndpoint(c net.Conn, ep Endpoint, hello *enforce.TLSHello) {
	defer c.Close()
	sni := hello.ServerName
	forget, ok := s.trackConn(c)
	if !ok {
		return
	}
	defer forget()
	tr := s.traceConn(inspect.KindTLS, c, sni)
	tr.atEndpoint(ep, "tls")
	v := ep.DecideConn(c, hello)
	switch {
	case !v.Allow:
		tr.refused(refusedByEndpoint)
	case v.Forward != nil:
		s.carryForwarded(c, v, hello, tr)
	default:
		s.carryTLS(c, ep, sni, tr)
	}
}

// carryTLS carries an admitted connection to a tls endpoint: passed through, or terminated
// here and its plaintext carried.
func (s *Server) carryTLS(c net.Conn, ep Endpoint, sni string, tr *connTrace) {
	var pub net.Conn = c
	ct, err := ep.TLSFor(plan.Hello{Client: c.RemoteAddr(), Server: c.LocalAddr(), ServerName: sni})
	if err != nil {
		tr.refused(handshakeFailed)
		return
	}
	passthrough := ep.Passthrough() && !ct.Terminate
	if !passthrough {
		cfg := connTLS(s.tlsBase, ct.Policy, ct.Cert)
		cfg.NextProtos = nil // the plaintext goes to the agent as it is, whatever it speaks
		tc, ok := s.terminate(c, cfg)
		if !ok {
			tr.refused(handshakeFailed)
			return
		}
		pub = tc
	}
	s.carryTo(pub, ep, "tls", passthrough, tr)
}

// carryTo opens a proxy stream to an endpoint's agent for the public connection pub and pipes
// bytes both ways, recording them in tr.
func (s *Server) carryTo(pub net.Conn, ep Endpoint, proto string, passthrough bool, tr *connTrace) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := ep.Dial(ctx, pub.RemoteAddr().String(), proto, "", passthrough)
	cancel()
	s.routed(pub)
	if err != nil {
		tr.refused(unreachable)
		return
	}
	tr.done(s.pipe(pub, up))
}
