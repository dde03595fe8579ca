package tunnel

import (
	"context"
	"errors"
	"time"
)

// An agent whose link drops reconnects with its session id, to this replica or another, and
// binds again with what it was given: a random TCP port's address among it, which only the
// session holding its row may bind (rebinds.holds). So the session's row and those of its drawn
// TCP ports stay, MoveWait at most: the agent's new session takes them over
// (store.PutAgentSession) and the ports are its own again; meanwhile no other account draws
// them. Its other rows go at once, as before: a name is bound again by name, and a kept row
// would refuse it to the account's own agent restarted after a crash with a new session. An
// agent that said goodbye (a muxado GOAWAY: it closed its session) or that this replica ended
// has all its rows deleted at once.

// noteLost marks the session lost when its accept loop ended with err because the link broke:
// it was authenticated, this replica did not end it, and the agent sent no GOAWAY.
func (s *session) noteLost(err error) {
	if !s.authed.Load() || errors.Is(err, errNoStreamType) || s.guard.tripped.Load() != nil {
		return
	}
	select {
	case <-s.done:
		return // ended here
	default:
	}
	// AcceptStream fails only once the session is dead, so Wait returns at once.
	if _, remote, _ := s.raw.Wait(); remote != nil {
		return // the agent's goodbye
	}
	s.lost.Store(true)
}

// supersede ends the session for its agent, which has reconnected with its id before this
// replica noticed its link was gone: as a lost link, so that the new session takes over what a
// lost link keeps. It returns once the session has ended (close waits for a close under way).
func (s *session) supersede() {
	s.lost.Store(true)
	s.close()
}

// dropNamedRows deletes the rows of a lost session's binds other than those of drawn TCP
// ports: a name or a reserved address is bound again by name, and a kept row would refuse it to
// the account's own agent restarted with a new session ("already online") until MoveWait.
func (s *session) dropNamedRows() {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	for _, t := range s.tunnelList() {
		if t.drawnPort {
			continue
		}
		if err := s.gw.cfg.Store.DeleteAgentTunnel(ctx, t.rowID, s.id, s.connID); err != nil {
			s.gw.log.Warn("cannot delete a tunnel row", "tunnel", t.rowID, "err", err)
		}
	}
}

// keepForReturn leaves a lost session's rows for its agent's return, and deletes them after
// MoveWait unless a new session of the agent has taken them over (the row's connection is then
// that session's, and DeleteAgentSession leaves it). Close deletes them at once instead: the
// store may be closed once it returns, and a process on its way out fires no timer.
func (g *Gateway) keepForReturn(s *session) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.dropLost(s) // Close began after s was found lost: nothing waits for its return
		return
	}
	g.wg.Add(1) // Close waits for a deletion under way
	g.lost[s] = time.AfterFunc(g.moveWait, func() {
		g.mu.Lock()
		_, mine := g.lost[s] // else Close took it over
		delete(g.lost, s)
		g.mu.Unlock()
		if mine {
			g.dropLost(s)
			g.wg.Done()
		}
	})
	g.mu.Unlock()
}

// dropLost deletes a lost session's rows, unless another connection of its agent holds them.
func (g *Gateway) dropLost(s *session) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if err := g.cfg.Store.DeleteAgentSession(ctx, s.id, s.connID); err != nil {
		g.log.Warn("cannot delete a lost session's rows", "session", s.id, "err", err)
	}
}

// dropAllLost stops the timers of the lost sessions and deletes their rows now (Close).
func (g *Gateway) dropAllLost() {
	g.mu.Lock()
	lost := g.lost
	g.lost = map[*session]*time.Timer{}
	g.mu.Unlock()
	for s, t := range lost {
		t.Stop()
		g.dropLost(s)
		g.wg.Done()
	}
}

// closing reports whether Close has begun: the sessions' links it closes were not lost.
func (g *Gateway) closing() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}
