package tunnel

import (
	"context"
	"math"
	"net"
	"sync"
	"time"
)

// A handover (serve's SIGUSR2) moves the agents from this process to its successor, which
// listens on the same sockets. Ending a session makes its agent reconnect at once, to the
// successor; but a proxy stream still open on the session (a request in flight, a carried TCP
// connection) would be cut with it. So each session ends as soon as it has no proxy stream
// open, and one still busy when the drain's time is up ends then.

// drainPoll is how often Drain looks for sessions that have become idle.
const drainPoll = 10 * time.Millisecond

// openConn is a proxy stream counted by its session's open until it is closed.
type openConn struct {
	net.Conn
	s    *session
	once sync.Once
}

// drainedOpen is the open count of a session the drain has claimed (retire): far below zero, so
// no stream can be counted on it any more.
const drainedOpen = math.MinInt64 / 2

// enter counts a proxy stream about to be opened on the session, before it is: false once the
// drain has retired the session, whose agent is on its way to the successor. Counting first is
// what keeps the drain from ending a session under a stream being opened (it would fail, or be
// cut after its header). A stream that then fails to open is let go with leave.
func (s *session) enter() bool {
	for {
		n := s.open.Load()
		if n < 0 {
			return false
		}
		if s.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// leave stops counting a stream enter counted that was not opened after all.
func (s *session) leave() { s.open.Add(-1) }

// countOpen keeps counting c, a stream enter counted, until it is closed.
func (s *session) countOpen(c net.Conn) net.Conn {
	return &openConn{Conn: c, s: s}
}

// retire claims the session for the drain when no proxy stream is open or being opened on it:
// from then on enter refuses new ones (their Dial fails with ErrSessionGone, which another
// replica's forwarded connection takes as the agent having moved, and waits for it there).
func (s *session) retire() bool { return s.open.CompareAndSwap(0, drainedOpen) }

// Close closes the stream and stops counting it.
func (c *openConn) Close() error {
	c.once.Do(func() { c.s.open.Add(-1) })
	return c.Conn.Close()
}

// HoldsWindowBudget reports whether the stream holds window budget (limitedStream's).
func (c *openConn) HoldsWindowBudget() bool { return holdsWindowBudget(c.Conn) }

// CloseWrite half-closes the stream, for TCP's half-close.
func (c *openConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// Drain ends every agent session once it has no proxy stream open, so that its agent
// reconnects (to the process taking over the listener) without a request in flight being cut;
// when ctx ends first, the sessions still busy end then. It returns when every session it found
// has ended and its agent has taken its rows over (takeOver), and how many of them had to be
// cut. New sessions are not accepted meanwhile: the listener's owner has closed it. Close still
// stops the gateway afterwards.
func (g *Gateway) Drain(ctx context.Context) (cut int) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	var ended []*session
	end := func(s *session) {
		s.moving.Store(true)
		s.close()
		ended = append(ended, s)
	}
	for busy := true; busy; {
		busy = false
		for _, s := range g.snapshotSessions() {
			if !s.retire() && s.open.Load() >= 0 {
				busy = true
				continue
			}
			end(s)
		}
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			for _, s := range g.snapshotSessions() {
				cut++
				end(s)
			}
			busy = false
		case <-t.C:
		}
	}
	g.takeOver(ctx, ended)
	return cut
}

// takeoverPoll is how often the drain looks for the rows its agents have taken over.
const takeoverPoll = 25 * time.Millisecond

// takeOver leaves the rows of the sessions the drain ended to their agents, which reconnect
// with the same session id at once: the new session's row takes the old one's place and its
// binds take their rows back by id, in the store's transactions on the replica the agent
// reached. Deleting them here as each session ends would hold the locks those transactions
// wait on (the old session's row, this replica's generation) for as long as this process takes
// to commit, which on a loaded machine is hundreds of milliseconds added to every agent's move
// while public requests for its endpoints wait for it. So the rows stay until the agents have
// taken them over (no session row names this replica's sessions any more) or MoveWait has
// passed, and only then are the rows of the sessions not taken over deleted. Meanwhile the
// other replicas route to the old binds as a draining replica's, and a connection they forward
// there follows its bind to its new place (moved.go).
func (g *Gateway) takeOver(ctx context.Context, ended []*session) {
	pending := map[string]*session{}
	for _, s := range ended {
		s.mu.Lock()
		written := s.rows
		s.mu.Unlock()
		if written {
			pending[s.id] = s
		}
	}
	if len(pending) == 0 {
		return
	}
	wait, cancel := context.WithTimeout(ctx, g.moveWait)
	defer cancel()
	t := time.NewTicker(takeoverPoll)
	defer t.Stop()
	for waiting := g.awaitTakeover(wait, pending); waiting; {
		select {
		case <-wait.Done():
			waiting = false
		case <-t.C:
			waiting = g.awaitTakeover(wait, pending)
		}
	}
	dctx, dcancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer dcancel()
	for _, s := range pending {
		if err := g.cfg.Store.DeleteAgentSession(dctx, s.id, s.connID); err != nil {
			g.log.Warn("cannot delete a session row", "session", s.id, "err", err)
		}
	}
}

// awaitTakeover takes off pending the sessions whose rows no longer name this replica, and
// reports whether any is left. A store that cannot be read leaves them all, until the wait ends.
func (g *Gateway) awaitTakeover(ctx context.Context, pending map[string]*session) bool {
	ids, err := g.cfg.Store.ReplicaSessions(ctx, g.cfg.Replica)
	if err != nil {
		return ctx.Err() == nil
	}
	here := make(map[string]bool, len(ids))
	for _, id := range ids {
		here[id] = true
	}
	for id := range pending {
		if !here[id] {
			delete(pending, id)
		}
	}
	return len(pending) > 0
}

// EachLocal calls f with every tunnel of this replica's agents: its proto ("" for a labeled
// tunnel), its hostname (http, https, tls), its account and its labels. A handover tells its
// successor these, as the endpoints whose agents are about to reconnect to it.
func (g *Gateway) EachLocal(f func(proto, host, account string, labels map[string]string)) {
	for _, s := range g.snapshotSessions() {
		for _, t := range s.tunnelList() {
			f(t.proto, t.host, s.cred.AccountID, t.labels)
		}
	}
}
