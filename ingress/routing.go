package ingress

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
)

// A raw public connection (a TCP endpoint's or edge's, a TLS endpoint's or edge's) is routing
// from its accept until its stream to the agent or backend is open, or it is refused: its
// endpoint is being looked up, its connection rules run, its TLS ended. A handover's drain
// stops accepting and then ends each agent session once no stream of it is open; a connection
// accepted just before, still routing, would then find its agent gone (the agent reconnects to
// the successor, which this process cannot reach) and be closed with nothing carried. So the
// drain waits for the routing connections first (AwaitRouted): the stream each opens holds its
// session until the connection is done.
//
// A public HTTP request is routing in the same way, from its handler's start until the proxy
// has its stream to the agent (a new one dialled, or an idle one of its connection taken from
// the pool), or until it is answered without one (an unknown host, a module's refusal or
// redirect, a response backend, a failed dial). Traffic policies and sign-in modules run in
// between, and may take long on a loaded machine. A request to a static backend routes until
// its round trip starts: no agent's session is at stake. The count costs no allocation: the
// handler adds one on entry and takes it back on return, and the request's dialInfo (allocated
// anyway) takes it back once it has its stream and adds it again once answered; between the
// answer and the handler's return the request counts again, which only delays a drain by as
// long as the handler takes to return.

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

// routed records that the request of info has its stream to the agent (or, to a static
// backend, needs none): it routes no more. Only its first stream counts: a retry on another
// stream changes nothing.
func (info *dialInfo) routed() {
	if info.routing != nil && !info.carried {
		info.carried = true
		info.routing.Add(-1)
	}
}

// answered undoes routed once the proxy has answered the request, so that the handler's return
// takes back the count its start added.
func (info *dialInfo) answered() {
	if info.carried {
		info.carried = false
		info.routing.Add(1)
	}
}

// carryRaw is enforce.CarryRaw for a request of the public listeners: a websocket that a
// websocket_tcp_converter stage carries as a raw stream routes until its dial is done, not for
// as long as it is carried. The wrapped dial is allocated for such requests only.
func (s *Server) carryRaw(r *http.Request, dial enforce.DialFunc) bool {
	if dial == nil || !enforce.CarriesRaw(r) {
		return false
	}
	carried := false
	enforce.CarryRaw(r, func(ctx context.Context) (net.Conn, error) {
		c, err := dial(ctx)
		if err == nil && !carried {
			carried = true
			s.httpRouting.Add(-1)
		}
		return c, err
	})
	if carried {
		s.httpRouting.Add(1)
	}
	return true
}

// AwaitRouted returns once no connection this server accepted and no HTTP request it received
// is routing, or when ctx ends. A drain calls it once the listeners are closed, before it ends
// the agents' sessions; the connections' and requests' own bounds (the handshake, header, dial
// and module timeouts) bound the wait.
func (s *Server) AwaitRouted(ctx context.Context) {
	t := time.NewTicker(routingPoll)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := int64(s.routing)
		s.mu.Unlock()
		n += s.httpRouting.Load()
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
