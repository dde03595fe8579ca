package ingress

import (
	"net"
	"strconv"
	"time"

	"github.com/edgeplane/edgeplane/plan"
)

// TCP edges' ports. The routing plan says which port each TCP edge's reserved address listens
// on and whose account it is; SyncTCPEdges makes the open listeners follow it. A port can be
// held by something else when the plan wants it: an agent's TCP endpoint that has not let go
// yet, the old process of a handover while it drains (a port first opened after the fork is
// not passed on), another program. Such a port is tried again on a timer of its own, backing
// off, until it opens or the plan stops wanting it for that account: the edge does not stay
// dark until some unrelated change of the plan. TLS edges have no port of their own (they
// share the TLS listener, routed by SNI), so only TCP edges need this.

// The wait before a failing TCP edge port is tried again: tcpEdgeRetryMin after the first
// failure, doubling to tcpEdgeRetryMax. The first retries come quickly because the usual
// holder (an agent's endpoint moving away, a drained predecessor) lets go within a second;
// the cap keeps a port held for good at one bind attempt every ten seconds.
const (
	tcpEdgeRetryMin = 250 * time.Millisecond
	tcpEdgeRetryMax = 10 * time.Second
)

// tcpEdges is the server's state of TCP edge ports, guarded by Server.mu.
type tcpEdges struct {
	// want is what the latest plan given to SyncTCPEdges wants, by port. An entry is replaced
	// (never changed) when the port's account changes, so a retry holding an entry that is no
	// longer want's knows the plan moved on.
	want map[int]*tcpEdgePort
	// open are the ports listening, each for want's entry of its port.
	open map[int]*tcpListener
	// stopped is set by Close and Drain: from then on no port is opened, and no retry runs
	// (a draining process must leave the ports to its successor).
	stopped bool
	// retryMin and retryMax override tcpEdgeRetryMin and tcpEdgeRetryMax (tests).
	retryMin, retryMax time.Duration
}

// tcpEdgePort is one port the plan wants: the edge's address and account and, while the port
// cannot be opened, its pending retry.
type tcpEdgePort struct {
	port          int
	addr, account string
	failing       bool          // the last attempt failed (the unavailable count)
	delay         time.Duration // the wait before the next retry
	retry         *time.Timer   // the pending retry; nil when none
}

// SyncTCPEdges makes the TCP edges' listeners follow pl: it opens a listener for each port of
// a TCP edge address that has none, and closes those of ports no edge has any more or whose
// account changed (a reservation can change hands). A port that cannot be opened is logged
// and retried on its own timer, backing off, until it opens or a later plan no longer wants
// it for that account; a port already waiting for its retry is left to it.
func (s *Server) SyncTCPEdges(pl *plan.Plan) {
	type wanted struct{ addr, account string }
	want := map[int]wanted{}
	for _, addr := range pl.TCPAddrs() {
		_, portText, err := net.SplitHostPort(addr)
		if port, perr := strconv.Atoi(portText); err == nil && perr == nil {
			want[port] = wanted{addr, pl.TCP(addr).Account}
		}
	}
	s.mu.Lock()
	e := &s.tcpEdges
	if e.stopped {
		s.mu.Unlock()
		return
	}
	if e.want == nil {
		e.want, e.open = map[int]*tcpEdgePort{}, map[int]*tcpListener{}
	}
	for port, w := range e.want {
		if nw, keep := want[port]; !keep || nw.account != w.account {
			w.cancelLocked()
			delete(e.want, port)
		}
	}
	var closing []*tcpListener
	for port, l := range e.open {
		if w := e.want[port]; w == nil || w.account != l.account {
			closing = append(closing, l)
			delete(e.open, port)
		}
	}
	var opening []*tcpEdgePort
	for port, nw := range want {
		if e.want[port] == nil {
			w := &tcpEdgePort{port: port, addr: nw.addr, account: nw.account}
			e.want[port] = w
			opening = append(opening, w)
		}
	}
	s.mu.Unlock()
	for _, l := range closing {
		l.Close()
	}
	for _, w := range opening {
		s.openTCPEdge(w)
	}
}

// openTCPEdge tries to open w's port. It binds only while w is what the latest plan wants of
// the port, and installs the listener only if w still is once bound (checked under the lock
// again): a retry that was already running when the plan dropped the port or gave it to
// another account closes what it opened at once (a connection accepted in that instant is
// still routed by the current plan: serveTCPEdge looks its edge up there). A port that does
// not open is tried again after w's next wait.
func (s *Server) openTCPEdge(w *tcpEdgePort) {
	s.mu.Lock()
	wanted := !s.tcpEdges.stopped && s.tcpEdges.want[w.port] == w
	s.mu.Unlock()
	if !wanted {
		return
	}
	closer, err := s.ListenTCP(w.port, w.account, func(c net.Conn) { s.serveTCPEdge(w.addr, c) })
	s.mu.Lock()
	e := &s.tcpEdges
	current := !e.stopped && e.want[w.port] == w && e.open[w.port] == nil
	if !current {
		s.mu.Unlock()
		if err == nil {
			closer.Close()
			s.log.Debug("TCP edge port no longer wanted once bound: closed", "addr", w.addr, "port", w.port)
		}
		return
	}
	w.retry = nil
	if err == nil {
		e.open[w.port] = closer.(*tcpListener)
		recovered := w.failing
		w.failing, w.delay = false, 0
		s.mu.Unlock()
		if recovered {
			s.log.Info("TCP edge listens", "addr", w.addr, "port", w.port)
		}
		return
	}
	first := !w.failing
	w.failing = true
	w.delay = e.nextDelay(w.delay)
	delay := w.delay
	w.retry = time.AfterFunc(delay, func() { s.openTCPEdge(w) })
	s.mu.Unlock()
	if first {
		s.log.Warn("TCP edge cannot listen; retrying until it can", "addr", w.addr, "port", w.port, "err", err, "retry_in", delay)
	} else {
		s.log.Debug("TCP edge still cannot listen", "addr", w.addr, "port", w.port, "err", err, "retry_in", delay)
	}
}

// nextDelay is the wait after one of last: the minimum first, then doubling to the maximum.
func (e *tcpEdges) nextDelay(last time.Duration) time.Duration {
	lo, hi := e.retryMin, e.retryMax
	if lo <= 0 {
		lo = tcpEdgeRetryMin
	}
	if hi <= 0 {
		hi = tcpEdgeRetryMax
	}
	if last <= 0 {
		return min(lo, hi)
	}
	return min(2*last, hi)
}

// cancelLocked stops w's pending retry; one already running finds w no longer wanted.
func (w *tcpEdgePort) cancelLocked() {
	if w.retry != nil {
		w.retry.Stop()
		w.retry = nil
	}
}

// stopTCPEdgesLocked stops every pending retry and opens no port from now on (Close, Drain).
func (s *Server) stopTCPEdgesLocked() {
	s.tcpEdges.stopped = true
	for _, w := range s.tcpEdges.want {
		w.cancelLocked()
	}
}

// TCPEdgePortsUnavailable returns how many ports of TCP edges the current plan wants that
// could not be opened at their last attempt (something else holds them) and wait for their
// next retry: an edge whose API object looks fine but which does not listen. For metrics.
func (s *Server) TCPEdgePortsUnavailable() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.tcpEdges.want {
		if w.failing {
			n++
		}
	}
	return n
}
