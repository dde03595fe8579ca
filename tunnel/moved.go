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

// movedWait is how long a forwarded connection waits for its bind to come online again when
// nothing says its agent is on its way: a holder that died may have taken its agent with it,
// and its endpoint answers within a second. While the rows say the agent is moving (its holder
// is draining, or the agent reconnected to a replica and has not bound again yet: Moving), the
// wait goes on, up to MoveWait.
const (
	movedWait = 750 * time.Millisecond
	movedPoll = 15 * time.Millisecond
)

// relocate returns the bind with r's row id online here or on a replica other than r's, waiting
// for it (movedWait, longer while it is Moving, or until ctx ends); nil when it does not come
// back in time. Only the same bind is taken: its modules, built from the same options, are
// those the connection passed. While it waits, the directory polls without pause: its interval
// (250 ms, and a poll's own queries on a loaded store) would otherwise take a good part of the
// wait after the agent has bound again elsewhere.
func (g *Gateway) relocate(ctx context.Context, r *remoteTunnel) Endpoint {
	if r.row.Proto == "" || r.row.Name == "" {
		return nil // a labeled tunnel takes a new id when its agent reconnects
	}
	start := time.Now()
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
		if t := g.Registry.byRowID(r.row.ID); t == nil && g.rebinds.pendingRow(r.row.ID) {
			if t = g.awaitRebind(ctx, r.row.ID); t != nil {
				return t // its agent reconnected here
			}
		}
		waited := time.Since(start)
		if waited >= g.moveWait || (waited >= movedWait && !g.Moving(r.row.Proto, r.row.Name)) {
			return nil
		}
		g.PollSoon()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
