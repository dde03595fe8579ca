package tunnel

import (
	"context"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/peer"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/store"
)

// The directory of remote tunnels: the online tunnels of the other replicas, read from the
// store, which this replica's public listeners route to over the link between replicas (package
// peer). Every replica polls the replicas table (one row per replica) every DirectoryInterval
// and reads again the tunnel rows of a replica whose generation moved (store.PutAgentTunnel
// moves it in the same transaction as the row), or that appeared: a bind anywhere reaches
// every replica's routing within about that interval, on SQLite and PostgreSQL alike. A
// replica whose row is stale (it has not refreshed it within store.LiveTolerance: it died) or
// whose link is down is not routed to, so a killed replica's tunnels stop taking traffic as
// soon as its link drops, and a replica that cannot be reached never holds a connection.

// DirectoryStore is what the directory reads of the store.
type DirectoryStore interface {
	AgentReplicas(ctx context.Context) ([]store.AgentReplica, error)
	ReplicaTunnels(ctx context.Context, replica string, since int64) ([]store.ReplicaTunnel, error)
}

// DefaultDirectoryInterval is how often the directory polls the replicas table.
const DefaultDirectoryInterval = 250 * time.Millisecond

// directory is the gateway's view of other replicas' tunnels. The poll loop owns replicas and
// failed; the public listeners read view, swapped whole.
type directory struct {
	g    *Gateway
	st   DirectoryStore
	link *peer.Link
	view atomic.Pointer[dirView]

	replicas map[string]*remoteReplica
	peers    map[string]string // the peers last given to the link
	routable map[string]bool   // the replicas routed to in the current view
	failed   map[string]string // tcp addresses whose port could not be opened, and why

	// complete is closed by the first poll whose view routes to every other live replica
	// (Gateway.DirectoryComplete).
	complete     chan struct{}
	completeOnce sync.Once
	// wake asks the poll loop for a poll now: a link came up, and the replica it reaches is
	// routed to from that poll.
	wake chan struct{}
}

// remoteReplica is what the directory keeps of another replica.
type remoteReplica struct {
	// gen is the generation its tunnels were last read at (0: never).
	gen   int64
	fresh bool
	// draining: it handed over to a successor, and its agents are about to move
	// (store.DrainReplica).
	draining bool
	addr     string
	tunnels  map[string]*remoteTunnel // by row id
}

// dirView is the remote tunnels routed to now, by endpoint and by account.
type dirView struct {
	endpoints map[endpointKey]*remoteGroup
	labeled   map[string][]*remoteTunnel
	tcp       map[string]string // the addresses of remote tcp endpoints, and their account
	// unrouted holds the hostnames of the https and tls endpoints of replicas that are not
	// routed to now (their link is down, their row stale): a client of one still gets a
	// certificate, and then the offline page rather than a failed handshake.
	unrouted map[string]bool
	// moving holds the endpoints of draining replicas' rows, routed to or not: their agents are
	// on their way to another replica, or the draining replica deletes the rows (MoveWait).
	moving map[endpointKey]bool
	// movingLabeled holds, by account, the labels of draining replicas' labeled tunnels' rows,
	// as moving does the endpoints.
	movingLabeled map[string][]map[string]string
}

// remoteGroup is the remote binds of one endpoint, all of one account. The binds of draining
// replicas are left out while another replica holds one; draining says the group has only
// theirs.
type remoteGroup struct {
	tunnels  []*remoteTunnel
	draining bool
}

var emptyView = &dirView{endpoints: map[endpointKey]*remoteGroup{}, labeled: map[string][]*remoteTunnel{}}

func newDirectory(g *Gateway, st DirectoryStore, link *peer.Link) *directory {
	d := &directory{g: g, st: st, link: link, replicas: map[string]*remoteReplica{},
		routable: map[string]bool{}, failed: map[string]string{}, complete: make(chan struct{}),
		wake: make(chan struct{}, 1)}
	d.view.Store(emptyView)
	link.SetOnUp(func(string) { d.pollSoon() })
	return d
}

// pollSoon asks the poll loop for a poll as soon as the one under way, if any, is done.
func (d *directory) pollSoon() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// pollOnce reads the replicas table, the tunnels of the replicas that changed, and swaps the
// view when what is routed to changed; it runs every DirectoryInterval.
func (d *directory) pollOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reps, err := d.st.AgentReplicas(ctx)
	if err != nil {
		d.g.log.Warn("directory: cannot read the replicas", "err", err)
		return
	}
	self, selfAddr := d.g.cfg.Replica, ""
	for _, rep := range reps {
		if rep.Replica == self {
			selfAddr = rep.PeerAddr
		}
	}
	changed, drained := false, false
	seen := map[string]bool{}
	peers := map[string]string{}
	// awaited are the replicas a complete view routes to: the live ones that are not draining,
	// but for one at this replica's own link address (the process handing over to this one,
	// which no link from here reaches).
	awaited := map[string]int64{}
	for _, rep := range reps {
		if rep.Replica == self || rep.PeerAddr == "" {
			continue // this replica, or one without a link: nothing of it can be reached
		}
		seen[rep.Replica] = true
		r := d.replicas[rep.Replica]
		if r == nil {
			r = &remoteReplica{tunnels: map[string]*remoteTunnel{}}
			d.replicas[rep.Replica] = r
		}
		r.fresh, r.addr = rep.Fresh, rep.PeerAddr
		if rep.Draining != r.draining {
			r.draining = rep.Draining
			changed = true
			drained = drained || rep.Draining
		}
		if !rep.Fresh {
			continue
		}
		if !rep.Draining && rep.PeerAddr != selfAddr {
			awaited[rep.Replica] = rep.Gen
		}
		if !rep.Draining || d.link.Up(rep.Replica) {
			// A draining replica's address is its successor's: a link to it that is not up
			// already will never reach it.
			peers[rep.Replica] = rep.PeerAddr
		}
		if rep.Gen != r.gen {
			if d.read(ctx, rep.Replica, r, rep.Gen) {
				changed = true
			}
		}
	}
	for id := range d.replicas {
		if !seen[id] {
			delete(d.replicas, id)
			changed = true
		}
	}
	if !maps.Equal(peers, d.peers) {
		d.peers = peers
		d.link.SetPeers(peers)
	}
	routable := map[string]bool{}
	for id, r := range d.replicas {
		if r.fresh && d.link.Up(id) {
			routable[id] = true
		}
	}
	if !maps.Equal(routable, d.routable) {
		d.routable = routable
		changed = true
	}
	if changed {
		d.swap()
	}
	d.checkComplete(awaited)
	if drained {
		d.g.peerDraining()
	}
	d.syncPorts()
}

// checkComplete closes complete once the view routes to each awaited replica with its rows read
// at its current generation.
func (d *directory) checkComplete(awaited map[string]int64) {
	select {
	case <-d.complete:
		return
	default:
	}
	for id, gen := range awaited {
		if r := d.replicas[id]; r == nil || r.gen != gen || !d.routable[id] {
			return
		}
	}
	d.completeOnce.Do(func() { close(d.complete) })
}

// read reads again the tunnels of replica r, now at generation gen; it reports whether any
// changed. Rows written at or before the generation last read are the ones kept; the others
// come with their options and are built anew.
func (d *directory) read(ctx context.Context, id string, r *remoteReplica, gen int64) bool {
	since := r.gen
	if since > gen {
		since = 0 // cannot happen (a row made again starts past its old generations); read all
	}
	started := time.Now()
	rows, err := d.st.ReplicaTunnels(ctx, id, since)
	if err != nil {
		d.g.log.Warn("directory: cannot read a replica's tunnels", "replica", id, "err", err)
		return false
	}
	next := make(map[string]*remoteTunnel, len(rows))
	changed := len(rows) != len(r.tunnels)
	for _, row := range rows {
		old := r.tunnels[row.ID]
		if row.Gen <= since && old != nil && old.row.Gen == row.Gen {
			next[row.ID] = old
			continue
		}
		if row.Gen <= since {
			// Unchanged, but not kept (it cannot be: every row of the last read was kept):
			// read the replica whole at the next poll.
			r.gen = 0
			return false
		}
		next[row.ID] = newRemoteTunnel(row, id, d.link, plan.BindEnv{Env: d.g.cfg.Env, Log: d.g.cfg.PolicyLog})
		next[row.ID].gw = d.g
		changed = true
		if next[row.ID].broken != "" {
			d.g.log.Warn("directory: a remote tunnel fails closed here", "replica", id, "tunnel", row.ID, "why", next[row.ID].broken)
		}
		d.g.movedAway(row.SessionID, started)
	}
	r.tunnels, r.gen = next, gen
	return changed
}

// swap builds the view of the routable replicas' tunnels and makes it current.
func (d *directory) swap() {
	v := &dirView{endpoints: map[endpointKey]*remoteGroup{}, labeled: map[string][]*remoteTunnel{}, tcp: map[string]string{},
		unrouted: map[string]bool{}, moving: map[endpointKey]bool{}, movingLabeled: map[string][]map[string]string{}}
	var all []*remoteTunnel
	for id, r := range d.replicas {
		for _, t := range r.tunnels {
			t.draining.Store(r.draining)
			switch {
			case !r.draining || !r.fresh:
			case t.row.Proto != "" && t.row.Name != "":
				v.moving[endpointKey{t.row.Proto, strings.ToLower(t.row.Name)}] = true
			case t.row.Proto == "" && len(t.row.Labels) > 0:
				v.movingLabeled[t.row.AccountID] = append(v.movingLabeled[t.row.AccountID], t.row.Labels)
			}
			switch {
			case d.routable[id]:
				all = append(all, t)
			case t.row.Proto == "https" || t.row.Proto == "tls":
				v.unrouted[strings.ToLower(t.row.Name)] = true
			}
		}
	}
	// Oldest row first (row ids are KSUIDs): when rows disagree on the account of a name (they
	// cannot, while the store's holds are kept), the first bind's account keeps it.
	sort.Slice(all, func(i, j int) bool { return all[i].row.ID < all[j].row.ID })
	for _, t := range all {
		switch {
		case t.row.Proto == "" && len(t.row.Labels) > 0:
			v.labeled[t.row.AccountID] = append(v.labeled[t.row.AccountID], t)
		case t.row.Proto == "http" || t.row.Proto == "https" || t.row.Proto == "tcp" || t.row.Proto == "tls":
			if t.row.Name == "" {
				continue
			}
			key := endpointKey{t.row.Proto, strings.ToLower(t.row.Name)}
			grp := v.endpoints[key]
			if grp == nil {
				grp = &remoteGroup{}
				v.endpoints[key] = grp
			}
			if len(grp.tunnels) > 0 && grp.tunnels[0].row.AccountID != t.row.AccountID {
				continue
			}
			grp.tunnels = append(grp.tunnels, t)
			if _, _, internal := ep.SplitInternalEndpointKey(key.host); t.row.Proto == "tcp" && !internal {
				v.tcp[key.host] = t.row.AccountID // an internal tcp endpoint listens on no port
			}
		}
	}
	for _, grp := range v.endpoints {
		grp.tunnels, grp.draining = withoutDraining(grp.tunnels)
	}
	d.view.Store(v)
	d.g.remoteChanged()
}

// withoutDraining returns the binds of ts on replicas that are not draining, or, when every one
// is, all of them and true: a bind whose agent is about to leave a draining replica is routed to
// only while it has no other place (its agent moving to the successor shows up as a bind of
// the same row there).
func withoutDraining(ts []*remoteTunnel) ([]*remoteTunnel, bool) {
	kept := ts[:0:0]
	for _, t := range ts {
		if !t.draining.Load() {
			kept = append(kept, t)
		}
	}
	if len(kept) == 0 {
		return ts, true
	}
	return kept, false
}

// syncPorts keeps a listener open on every remote tcp endpoint's port, and logs each port that
// cannot be opened once per reason (it is tried again at every poll).
func (d *directory) syncPorts() {
	if d.g.ports == nil {
		return
	}
	failed := d.g.ports.setRemote(d.view.Load().tcp)
	for addr, err := range failed {
		if d.failed[addr] != err.Error() {
			d.g.log.Warn("directory: cannot listen for another replica's tcp endpoint; trying again", "addr", addr, "err", err)
			d.failed[addr] = err.Error()
		}
	}
	for addr := range d.failed {
		if _, still := failed[addr]; !still {
			delete(d.failed, addr)
		}
	}
}

// group returns the remote binds of an endpoint routed to now, nil for none.
func (d *directory) group(key endpointKey) *remoteGroup {
	return d.view.Load().endpoints[key]
}

// labeledOf returns the remote labeled tunnels of the account whose labels include want.
func (d *directory) labeledOf(account string, want map[string]string, out []Endpoint) []Endpoint {
	for _, t := range d.view.Load().labeled[account] {
		if ep.LabelsMatch(t.row.Labels, want) {
			out = append(out, t)
		}
	}
	return out
}

// completePoll is how often the directory polls until its view is complete: a starting replica
// waits on that before it serves, a few polls of a table of one row per replica.
const completePoll = 20 * time.Millisecond

// DirectoryComplete returns a channel closed once this replica's view of the other replicas'
// tunnels is complete: their rows read, and a link up to each live replica that is not
// draining (but for the process handing over to this one, at this replica's own link address).
// A replica answering public requests before that would answer ERR_NGROK_3200 for endpoints
// that are online elsewhere, or wait for them as if they were moving. Without a directory (no
// link) it is closed already.
func (g *Gateway) DirectoryComplete() <-chan struct{} {
	if g.dir == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return g.dir.complete
}
