package tunnel

import (
	"context"
	"time"
)

// A bind whose agent moves between replicas (its replica restarted with a handover, or lost)
// keeps its row id: the agent presents it again when it binds on the replica it reconnected
// to, and a labeled tunnel's bind takes its session's row with the same labels (rebind.go). A
// connection this replica was forwarding to the old holder, refused there because the agent has
// just left or because that replica has gone, is sent to the bind's new place instead of
// failing, once the directory has seen it there.

// movedWait is how long a forwarded connection waits for its bind to come online again when
// nothing says its agent is on its way: a holder that died may have taken its agent with it,
// and its endpoint answers within a second. While the rows say the agent is moving (its holder
// is draining, or the agent reconnected to a replica and has not bound again yet: Moving,
// LabeledMoving), the wait goes on, up to MoveWait.
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
	labeled := r.row.Proto == "" && len(r.row.Labels) > 0
	if !labeled && (r.row.Proto == "" || r.row.Name == "") {
		return nil // no row of it can say where it went
	}
	start := time.Now()
	tick := time.NewTicker(movedPoll)
	defer tick.Stop()
	for {
		if t := g.movedBind(r, labeled); t != nil {
			return t
		}
		if t := g.Registry.byRowID(r.row.ID); t == nil && g.rebinds.pendingRow(r.row.ID) {
			if t = g.awaitRebind(ctx, r.row.ID); t != nil {
				return t // its agent reconnected here
			}
		}
		waited := time.Since(start)
		if waited >= g.moveWait || (waited >= movedWait && !g.rowMoving(r, labeled)) {
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

// movedBind returns the bind with r's row id online here or on a replica other than r's, nil
// for none. A labeled tunnel is looked for among its own account's only.
func (g *Gateway) movedBind(r *remoteTunnel, labeled bool) Endpoint {
	if labeled {
		if t := g.Registry.byRowID(r.row.ID); t != nil && t.AccountID() == r.row.AccountID {
			return t
		}
		if g.dir == nil {
			return nil
		}
		for _, t := range g.dir.view.Load().labeled[r.row.AccountID] {
			if t.row.ID == r.row.ID && t.replica != r.replica {
				return t
			}
		}
		return nil
	}
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
	return nil
}

// rowMoving reports whether the rows say r's agent is on its way (Moving, LabeledMoving).
func (g *Gateway) rowMoving(r *remoteTunnel, labeled bool) bool {
	if labeled {
		return g.LabeledMoving(r.row.AccountID, r.row.Labels)
	}
	return g.Moving(r.row.Proto, r.row.Name)
}
