package tunnel

import (
	"context"
	"errors"
	"time"
)

// An agent whose link drops reconnects with its session id, to this replica or another, and
// binds again with what it was given: a random TCP port's address among it. Its session's rows
// stay for that, MoveWait at most, as a draining replica leaves them (drain.go): the agent's
// new session takes them over (store.PutAgentSession) and the port is its own again
// (rebinds.holds); meanwhile no other account takes its names. An agent that said goodbye (a
// muxado GOAWAY: it closed its session) or that this replica ended has its rows deleted at once.

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
// replica noticed its link was gone: its rows stay for the new session to take over. It
// reports false when the session is ending already for another reason (its rows may be gone).
func (s *session) supersede() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	s.moving.Store(true)
	s.close()
	return true
}

// keepForReturn leaves a lost session's rows for its agent's return, and deletes them after
// MoveWait unless a new session of the agent has taken them over (the row's connection is then
// that session's, and DeleteAgentSession leaves it).
func (g *Gateway) keepForReturn(s *session) {
	time.AfterFunc(g.moveWait, func() {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		if err := g.cfg.Store.DeleteAgentSession(ctx, s.id, s.connID); err != nil {
			g.log.Warn("cannot delete a lost session's rows", "session", s.id, "err", err)
		}
	})
}
