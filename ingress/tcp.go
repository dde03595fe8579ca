package ingress

import (
	"context"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/netx"
)

// ListenTCP opens the public listener of account's tcp endpoint (or TCP edge) on port of the
// TCP listen host and hands each connection to serve. Its connections count against the
// account from their accepting (netx.Limiter.ListenAccount): past the account's share of the
// public connections, a new one is closed at once, before it takes anybody's slot. A port in
// use by something else fails at once with the listener's error, which the agent's bind
// reports (a random port's bind then tries another).
//
// The listener is opened with SO_REUSEPORT so that a handover's successor can open the same
// port beside this process. But Linux lets any socket of the same user share such a port, and
// then splits the port's connections between the two: another edgeplane of the same user (a
// second deployment on the host) would silently receive some of this one's tenants'
// connections. So unless this process may still share its predecessor's ports
// (Config.SharePortsUntil), the port is first bound without the option, which fails while any
// other socket holds it.
func (s *Server) ListenTCP(port int, account string, serve func(net.Conn)) (io.Closer, error) {
	addr := net.JoinHostPort(s.cfg.TCPHost, strconv.Itoa(port))
	if !time.Now().Before(s.cfg.SharePortsUntil) {
		probe, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		probe.Close()
	}
	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	if s.cfg.Limiter != nil {
		ln = s.cfg.Limiter.ListenAccount(ln, account)
	}
	if !s.track(ln) {
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
	return &tcpListener{s: s, ln: ln, account: account}, nil
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
	account string
}

func (l *tcpListener) Close() error {
	l.s.mu.Lock()
	delete(l.s.lns, l.ln)
	l.s.mu.Unlock()
	return l.ln.Close()
}
