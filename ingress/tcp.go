package ingress

import (
	"io"
	"net"
	"strconv"

	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/netx"
)

// InheritedPorts holds the listening sockets of TCP ports that the process a handover took
// over from passed on: the very sockets its TCP endpoints and edges listened on, so their
// ports stay open across the handover and no connection is refused while agents move.
type InheritedPorts interface {
	// Take returns the inherited listener of port, once, or nil when there is none (never
	// passed on, already taken, or given up once the handover's span ended).
	Take(port int) net.Listener
}

// TCPListener is an open TCP endpoint's or edge's listener. A tcp endpoint's address can pass
// to another account while its port stays open (its binds here and on other replicas share the
// port): SetAccount moves whom its connections count against without closing the socket.
type TCPListener interface {
	io.Closer
	SetAccount(account string)
}

// ListenTCP opens the public listener of account's tcp endpoint (or TCP edge) on port of the
// TCP listen host and hands each connection to serve. Its connections count against the
// account from their accepting (netx.Limiter.ListenAccount): past the account's share of the
// public connections, a new one is closed at once, before it takes anybody's slot. A port in
// use by something else fails at once with the listener's error, which the agent's bind
// reports (a random port's bind then tries another).
//
// The port is bound exclusively, without SO_REUSEPORT: Linux lets sockets of the same user
// that all set the option share a port, splitting its connections between them, so another
// edgeplane of the same user on the host would silently receive some of this one's tenants'
// connections. A handover's successor does not bind its predecessor's ports beside it: it
// takes the sockets themselves (Config.Inherited).
func (s *Server) ListenTCP(port int, account string, serve func(net.Conn)) (TCPListener, error) {
	addr := net.JoinHostPort(s.cfg.TCPHost, strconv.Itoa(port))
	raw, err := s.inheritedTCP(port, addr)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		raw = ln.(*net.TCPListener)
	}
	var ln net.Listener = raw
	if s.cfg.Limiter != nil {
		ln = s.cfg.Limiter.ListenAccount(ln, account)
	}
	l := &tcpListener{s: s, ln: ln, raw: raw, port: port, account: account}
	if !s.trackTCP(l) {
		return nil, net.ErrClosed
	}
	go func() {
		_ = netx.Serve(ln, func(c net.Conn) {
			forget, ok := s.trackConn(c)
			if !ok {
				c.Close()
				return
			}
			defer forget()
			serve(c)
		})
	}()
	return l, nil
}

// inheritedTCP takes the inherited listener of port, if any, when it listens where this
// server would bind (addr): one on another host (the listen host changed across the handover)
// is closed, and the port bound anew.
func (s *Server) inheritedTCP(port int, addr string) (*net.TCPListener, error) {
	if s.cfg.Inherited == nil {
		return nil, nil
	}
	ln := s.cfg.Inherited.Take(port)
	if ln == nil {
		return nil, nil
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, nil
	}
	want, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		ln.Close()
		return nil, err
	}
	got := tl.Addr().(*net.TCPAddr)
	if (want.IP == nil && !got.IP.IsUnspecified()) || (want.IP != nil && !want.IP.Equal(got.IP)) {
		s.log.Warn("an inherited TCP listener is not on the TCP listen host: bound anew", "inherited", got.String(), "addr", addr)
		ln.Close()
		return nil, nil
	}
	return tl, nil
}

// trackTCP records an open TCP endpoint's or edge's listener, for Close and Drain and for the
// next handover (TCPListeners).
func (s *Server) trackTCP(l *tcpListener) bool {
	if !s.track(l.ln) {
		return false
	}
	s.mu.Lock()
	s.tcpLns[l] = struct{}{}
	s.mu.Unlock()
	return true
}

// TCPListeners returns the listening socket of every TCP endpoint's and edge's port open here,
// by port: a handover passes them on to its successor, which takes them instead of binding.
func (s *Server) TCPListeners() map[int]*net.TCPListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]*net.TCPListener, len(s.tcpLns))
	for l := range s.tcpLns {
		out[l.port] = l.raw
	}
	return out
}

// ServeTCPEndpoint carries a public connection to the tcp endpoint ep at addr, once its
// connection stages (IP restriction, the on_tcp_connect rules of its traffic policy) admit the
// client: a refused connection is closed before any byte reaches the agent.
func (s *Server) ServeTCPEndpoint(c net.Conn, ep Endpoint, addr string) {
	tr := s.traceConn(inspect.KindTCP, c, addr)
	tr.atEndpoint(ep, "tcp")
	v := ep.DecideConn(c, nil)
	switch {
	case !v.Allow:
		tr.refused(refusedByEndpoint)
	case v.Forward != nil:
		s.carryForwarded(c, v, nil, tr)
	default:
		s.carryTo(c, ep, "tcp", false, tr)
	}
}

// tcpListener closes an endpoint's listener and forgets it.
type tcpListener struct {
	s       *Server
	ln      net.Listener
	raw     *net.TCPListener // the socket itself, for a handover
	port    int
	account string
}

// SetAccount makes the connections the listener accepts from now on count against account
// (netx.SetAccount): a tcp endpoint's address that passes to another account keeps its port's
// socket, so nothing waiting in its backlog is reset and a socket a handover passed on stays
// in use (it cannot be bound again while the old process holds it).
func (l *tcpListener) SetAccount(account string) {
	netx.SetAccount(l.ln, account)
	l.s.mu.Lock()
	l.account = account
	l.s.mu.Unlock()
}

func (l *tcpListener) Close() error {
	l.s.mu.Lock()
	delete(l.s.lns, l.ln)
	delete(l.s.tcpLns, l)
	l.s.mu.Unlock()
	return l.ln.Close()
}
