package tunnel

import (
	"context"
	"time"
)

// A bind whose agent moves between replicas (its replica restarted with a handover, or lost)
// keeps its row id: the agent presents it again when it binds on the replica it reconnected
// to. A connection this replica was forwarding to the old holder, refused there because the
// agent has just left or because that replica has gone, is sent to the bind's new place
// instead of failing, once the directory has seen it there.

// movedWait bounds how long a forwarded connection waits for its bind to come online again;
// drainedWait, when the holder was draining (a handover): its agent is known to be on its way,
// and its move takes up to about 1.2 s on a starved machine (two commits). A holder that died
// may have taken its agent with it, and its endpoint answers within a second.
const (
	movedWait   = 750 * time.Millisecond
	drainedWait = 2 * time.Second
	movedPoll   = 15 * time.Millisecond
)

// relocate returns the bind with r's row id online here or on a replica other than r's, waiting
// up to movedWait (or ctx) for it; nil when it does not come back in time. Only the same bind
// is taken: its modules, built from the same options, are those the connection passed. While
// it waits, the directory polls without pause: its interval (250 ms, and a poll's own queries
// on a loaded store) would otherwise take a good part of movedWait after the agent has bound
// again elsewhere.
func (g *Gateway) relocate(ctx context.Context, r *remoteTunnel) Endpoint {
	if r.row.Proto == "" || r.row.Name == "" {
		return nil // a labeled tunnel takes a new id when its agent reconnects
	}
	deadline := time.NewTimer(movedWaitFor(r))
	defer deadline.Stop()
	tick := time.NewTicker(movedPoll)
	defer tick.Stop()
	for {
		local, remote := g.groups(r.row.Proto, r.row.Name)
		if local != nil {
			for _, t := range local.tunnels {
				if t.rowID == r.row.ID {
					return t
				}
			}
		}
		if remote != nil {
			for _, t := range remote.tunnels {
				if t.row.ID == r.row.ID && t.replica != r.replica {
					return t
				}
			}
		}
		if g.dir != nil {
			g.dir.pollSoon()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}

// movedWaitFor is how long a connection forwarded to r waits for its bind elsewhere.
func movedWaitFor(r *remoteTunnel) time.Duration {
	if r.Draining() {
		return drainedWait
	}
	return movedWait
}
