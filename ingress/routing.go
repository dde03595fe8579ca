package ingress

import (
	"context"
	"net"
	"time"
)

// A raw public connection (a TCP endpoint's or edge's, a TLS endpoint's or edge's) is routing
// from its accept until its stream to the agent or backend is open, or it is refused: its
// endpoint is being looked up, its connection rules run, its TLS ended. A handover's drain
// stops accepting and then ends each agent session once no stream of it is open; a connection
// accepted just before, still routing, would then find its agent gone (the agent reconnects to
// the successor, which this process cannot reach) and be closed with nothing carried. So the
// drain waits for the routing connections first (AwaitRouted): the stream each opens holds its
// session until the connection is done.

// routingPoll is how often AwaitRouted looks at the count.
const routingPoll = 5 * time.Millisecond

// routed says that pub, a connection trackConn recorded (or one that wraps it, such as the TLS
// connection a terminating endpoint ends), routes no more: it has its stream, or has none.
func (s *Server) routed(pub net.Conn) {
	if w, ok := pub.(interface{ NetConn() net.Conn }); ok {
		pub = w.NetConn()
	}
	s.mu.Lock()
	if s.conns[pub] {
		s.conns[pub] = false
		s.routing--
	}
	s.mu.Unlock()
}

// AwaitRouted returns once no connection this server accepted is routing, or when ctx ends. A
// drain calls it once the listeners are closed, before it ends the agents' sessions; the
// connections' own bounds (the handshake and dial timeouts) bound the wait.
func (s *Server) AwaitRouted(ctx context.Context) {
	t := time.NewTicker(routingPoll)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := s.routing
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
