package tunnel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/peer"
)

// One view of the online endpoints for the public listeners: an endpoint's binds are those of
// this replica's agents and those of the other replicas' (the directory), taken in turn as one
// server takes pooled binds; a tunnel-group backend chooses among the labeled tunnels of both.

// Endpoint returns a bind of the online endpoint for proto (http, https, tls, tcp) and host
// (the address for tcp), here or on another replica, or nil when none is online. Each call
// chooses one of all the endpoint's binds, local and remote, at random: the listeners look an
// endpoint up more than once per connection (its TLS settings, the certificate, its route), so a
// turn kept per lookup would send some binds every connection (two binds and two lookups per
// connection: always the same one), and each replica would keep its own turn anyway. Another
// replica's bind of a name another account serves here is never chosen.
func (g *Gateway) Endpoint(proto, host string) Endpoint {
	local, remote := g.groups(proto, host)
	nl, nr := 0, 0
	if local != nil {
		nl = len(local.tunnels)
	}
	if remote != nil && (!remote.draining || nl == 0) {
		nr = len(remote.tunnels) // a draining replica's binds only when no other holds one
	}
	switch {
	case nl+nr == 0:
		return nil
	case nl+nr == 1 && nl == 1:
		return local.tunnels[0]
	case nl+nr == 1:
		return remote.tunnels[0]
	}
	i := rand.IntN(nl + nr)
	if i < nl {
		return local.tunnels[i]
	}
	return remote.tunnels[i-nl]
}

// groups returns the local and remote binds of an endpoint; remote is nil when there are none,
// or when they are of another account than the local ones.
func (g *Gateway) groups(proto, host string) (*group, *remoteGroup) {
	key := endpointKey{proto, strings.ToLower(host)}
	local := g.Registry.snap.Load().endpoints[key]
	if g.dir == nil {
		return local, nil
	}
	remote := g.dir.group(key)
	if local != nil && remote != nil && local.tunnels[0].AccountID() != remote.tunnels[0].row.AccountID {
		remote = nil
	}
	return local, remote
}

// Online reports whether an endpoint of proto serves host, here or on another replica.
func (g *Gateway) Online(proto, host string) bool {
	local, remote := g.groups(proto, host)
	return local != nil || remote != nil
}

// Moving reports whether the rows say the agent of an endpoint that is not online is on its way
// (MoveWait at most): a row of it is on a draining replica, whose agents are moving, or was
// taken over by an agent that reconnected here and has not bound it again yet. A request for
// such an endpoint is worth waiting for.
func (g *Gateway) Moving(proto, host string) bool {
	key := endpointKey{proto, strings.ToLower(host)}
	if g.rebinds.pending(key) {
		return true
	}
	return g.dir != nil && g.dir.view.Load().moving[key]
}

// LabeledMoving reports whether the rows say an agent serving a tunnel group of the account
// with want among its labels is on its way (MoveWait at most): a labeled tunnel's row with those
// labels is on a draining replica, or was taken over by an agent that reconnected here and has
// not bound it again yet. Another account's rows never count: labels are an account's own.
func (g *Gateway) LabeledMoving(account string, want map[string]string) bool {
	if g.rebinds.pendingLabels(account, want) {
		return true
	}
	if g.dir == nil {
		return false
	}
	for _, labels := range g.dir.view.Load().movingLabeled[account] {
		if ep.LabelsMatch(labels, want) {
			return true
		}
	}
	return false
}

// PollSoon asks the directory for a poll now, for a caller waiting on an endpoint to move.
func (g *Gateway) PollSoon() {
	if g.dir != nil {
		g.dir.pollSoon()
	}
}

// Unrouted reports whether host is the name of an https or tls endpoint of another replica that
// is not routed to now (its link is down or its row stale): the listener still presents a
// certificate for it, so that its clients get the offline page instead of a failed handshake.
func (g *Gateway) Unrouted(host string) bool {
	return g.dir != nil && g.dir.view.Load().unrouted[strings.ToLower(host)]
}

// Labeled returns the online labeled tunnels of the account whose labels include all of want,
// here and on other replicas.
func (g *Gateway) Labeled(account string, want map[string]string) []Endpoint {
	var out []Endpoint
	for _, t := range g.Registry.Labeled(account, want) {
		out = append(out, t)
	}
	if g.dir != nil {
		out = g.dir.labeledOf(account, want, out)
	}
	// A draining replica's tunnels only when there is no other: its agents are about to leave.
	kept := out[:0:0]
	for _, t := range out {
		if r, ok := t.(*remoteTunnel); !ok || !r.Draining() {
			kept = append(kept, t)
		}
	}
	if len(kept) > 0 {
		return kept
	}
	return out
}

// SetOnRemoteChange sets a function called (from the directory's loop) each time the tunnels
// of other replicas routed to change, for whatever waits on the online endpoints (requests
// waiting for a moving endpoint). Call it before serving.
func (g *Gateway) SetOnRemoteChange(f func()) { g.onRemoteChange = f }

// peerDraining tells Config.OnPeerDraining that another replica started draining.
func (g *Gateway) peerDraining() {
	if g.cfg.OnPeerDraining != nil {
		g.cfg.OnPeerDraining()
	}
}

func (g *Gateway) remoteChanged() {
	if g.onRemoteChange != nil {
		g.onRemoteChange()
	}
}

// AcceptPeer opens the stream to the agent of a tunnel of this replica for a public connection
// another replica forwards (peer.Config.Accept): the tunnel is found by its row id among the
// tunnels online here, and its agent is given the proxy header the other replica asked for. A
// tunnel this replica does not hold is never dialled: peer.ErrNoTunnel.
func (g *Gateway) AcceptPeer(ctx context.Context, req peer.Request) (net.Conn, error) {
	t := g.Registry.byRowID(req.TunnelID)
	if t == nil {
		t = g.awaitRebind(ctx, req.TunnelID) // its agent may have just reconnected here
	}
	if t == nil {
		return nil, fmt.Errorf("%w: no tunnel %s is online here", peer.ErrNoTunnel, req.TunnelID)
	}
	c, err := t.Dial(ctx, req.ClientAddr, req.Proto, req.EdgeType, req.Passthrough)
	if errors.Is(err, ErrSessionGone) {
		return nil, fmt.Errorf("%w: the agent of tunnel %s has gone", peer.ErrNoTunnel, req.TunnelID)
	}
	return c, err
}

// movedAway ends the session of this replica with the id a tunnel row of another replica
// names, when its row was written before that replica's rows were read: the agent has
// reconnected there (and taken its session id along), while this end has not noticed yet
// (its connection lost without a reset). Its binds would otherwise take a share of the
// endpoint's traffic and fail it.
func (g *Gateway) movedAway(sessionID string, readAt time.Time) {
	s := g.session(sessionID)
	if s == nil {
		return
	}
	s.mu.Lock()
	stale := s.rows && s.rowsAt.Before(readAt)
	s.mu.Unlock()
	if stale {
		g.log.Info("agent session ended: its agent reconnected to another replica", "session", s.id)
		s.close()
	}
}

// RemoteTunnels returns how many tunnels of other replicas this replica routes to now (endpoint
// binds and labeled tunnels), for metrics.
func (g *Gateway) RemoteTunnels() int {
	if g.dir == nil {
		return 0
	}
	v := g.dir.view.Load()
	n := 0
	for _, grp := range v.endpoints {
		n += len(grp.tunnels)
	}
	for _, l := range v.labeled {
		n += len(l)
	}
	return n
}
