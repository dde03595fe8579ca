package tunnel

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// An agent that reconnects with its session id takes its session's rows over
// (store.PutAgentSession), the rows of its named binds included, and binds those again by their
// ids moments later. Meanwhile the rows name this replica, and the other replicas route the
// endpoints' requests here; they are not online here yet. Such a request waits here for its
// bind, for as long as the row is pending (MoveWait at most), rather than fail, and so does a
// request this replica's own listeners take for such an endpoint. Rows the agent does not bind
// again within MoveWait are deleted: its application stopped listening on them meanwhile.
//
// A labeled tunnel (an edge's tunnel-group backend) moves the same way, but its agent binds it
// again without its id (StartTunnelWithLabel carries none): the first bind of the session with
// the same labels takes the row, and its id, over. Until then the account's tunnel groups whose
// labels the row's include wait (LabeledMoving), here and, through the row, on every replica.

// MoveWait bounds each wait of an agent's move between replicas: how long a draining replica
// keeps the rows of an agent that has not reconnected, how long a replica keeps the rows a
// reconnected agent took over and has not bound again, and how long a request waits for an
// endpoint whose rows say its agent is on the move. On a starved machine (two CPU burners on
// two cores) a move took up to 2.65 s; an agent not back within 5 s is taken for gone.
const MoveWait = 5 * time.Second

// rebinds are the rows taken over by this replica's sessions whose binds are not online again
// yet.
type rebinds struct {
	mu    sync.Mutex
	byRow map[string]*pendingBind
	byKey map[endpointKey]int
	// labeled are the pending labeled tunnels' rows by account, then id: a tunnel group's
	// lookup looks at its own account's only.
	labeled map[string]map[string]*pendingBind
	// bySession are each session's pending rows (by id), so that its binds and its end look
	// at its own rows only: after a replica's restart thousands of agents take rows over at
	// once, and a scan of every pending row per bind would grow with their square.
	bySession map[*session]map[string]*pendingBind
	// changed is closed, and replaced, whenever a row stops pending.
	changed chan struct{}
}

// pendingBind is a row a session took over: a named bind's (key) or a labeled tunnel's
// (labels, of the session's account).
type pendingBind struct {
	s      *session
	key    endpointKey
	labels map[string]string
	// claimed: a labeled bind of the session took the row, and is being made; another bind
	// with the same labels takes a row of its own.
	claimed bool
}

func newRebinds() *rebinds {
	return &rebinds{byRow: map[string]*pendingBind{}, byKey: map[endpointKey]int{},
		labeled: map[string]map[string]*pendingBind{}, bySession: map[*session]map[string]*pendingBind{},
		changed: make(chan struct{})}
}

// expectRebinds records the rows s took over, and deletes those its agent has not bound
// again after moveWait.
func (g *Gateway) expectRebinds(s *session, took store.Takeover) {
	if len(took.Tunnels) == 0 {
		return
	}
	r := g.rebinds
	untracked := r.take(s, took.Tunnels)
	time.AfterFunc(g.moveWait, func() {
		select {
		case <-s.done:
			return // its rows went with it, or wait for its agent's next session
		default:
		}
		if !r.forgetSession(s) && !untracked {
			return // every row bound again
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		if err := g.cfg.Store.DropKeptTunnels(ctx, s.id, s.connID, took.Gen); err != nil {
			g.log.Warn("cannot delete the rows of binds an agent did not make again", "session", s.id, "err", err)
		}
	})
}

// take records the rows s took over as pending; a row another session of the agent had taken
// before is s's now. It reports whether any row is of neither kind (no bind can take it: only
// MoveWait's deletion ends it).
func (r *rebinds) take(s *session, rows []store.KeptTunnel) (untracked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range rows {
		p := &pendingBind{s: s}
		switch {
		case k.Proto != "" && k.Name != "":
			p.key = endpointKey{k.Proto, strings.ToLower(k.Name)}
		case k.Proto == "" && len(k.Labels) > 0:
			p.labels = k.Labels
		default:
			untracked = true
			continue
		}
		if old, ok := r.byRow[k.ID]; ok {
			r.drop(k.ID, old) // taken over again, by the agent's newer session
		}
		r.byRow[k.ID] = p
		if p.labels != nil {
			account := s.cred.AccountID
			if r.labeled[account] == nil {
				r.labeled[account] = map[string]*pendingBind{}
			}
			r.labeled[account][k.ID] = p
		} else {
			r.byKey[p.key]++
		}
		mine := r.bySession[s]
		if mine == nil {
			mine = map[string]*pendingBind{}
			r.bySession[s] = mine
		}
		mine[k.ID] = p
	}
	return untracked
}

// adopt gives t the id of a row its session took over for the same endpoint and that is not
// bound again yet, when t presents another (an agent that does not send its bind's token
// back): the row is that bind's, and another row of the endpoint would refuse it. A labeled
// tunnel, which never presents an id, takes the row of one with the same labels that no other
// bind of the session has taken: its row keeps its id, so that the connections other replicas
// forward to that id while it moves find it here.
func (r *rebinds) adopt(s *session, t *Tunnel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.proto == "" {
		for id, p := range r.bySession[s] {
			if p.labels != nil && !p.claimed && maps.Equal(p.labels, t.labels) {
				p.claimed = true
				t.rowID = id
				return
			}
		}
		return
	}
	key := t.key()
	if p, ok := r.byRow[t.rowID]; ok && p.s == s {
		return
	}
	for id, p := range r.bySession[s] {
		if p.labels == nil && p.key == key {
			t.rowID = id
			return
		}
	}
}

// retakes reports whether a bind of s presenting rowID (a named bind's token), or a labeled
// tunnel's with labels, would take a row s took over and that is not bound again yet: such a
// bind writes no new row, so the account's count of rows, which holds that row already, is no
// reason to refuse it.
func (r *rebinds) retakes(s *session, rowID string, labels map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if labels == nil {
		p, ok := r.byRow[rowID]
		return ok && p.s == s && p.labels == nil
	}
	for _, p := range r.bySession[s] {
		if p.labels != nil && !p.claimed && maps.Equal(p.labels, labels) {
			return true
		}
	}
	return false
}

// holds reports whether s took over a row of the endpoint that is not bound again yet: a
// random tcp port's, which only its agent may bind again.
func (r *rebinds) holds(s *session, key endpointKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.bySession[s] {
		if p.labels == nil && p.key == key {
			return true
		}
	}
	return false
}

// bound says the bind of row id was made again, or refused: it is pending no more.
func (r *rebinds) bound(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.byRow[id]; ok {
		r.drop(id, p)
		r.wake()
	}
}

// forgetSession drops the rows s took over; it reports whether any was left.
func (r *rebinds) forgetSession(s *session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for id := range r.bySession[s] {
		if p, ok := r.byRow[id]; ok {
			r.drop(id, p)
			found = true
		}
	}
	if found {
		r.wake()
	}
	return found
}

// drop forgets row id (under mu).
func (r *rebinds) drop(id string, p *pendingBind) {
	delete(r.byRow, id)
	if p.labels != nil {
		account := p.s.cred.AccountID
		if delete(r.labeled[account], id); len(r.labeled[account]) == 0 {
			delete(r.labeled, account)
		}
	} else if r.byKey[p.key]--; r.byKey[p.key] <= 0 {
		delete(r.byKey, p.key)
	}
	if rows := r.bySession[p.s]; rows != nil {
		if delete(rows, id); len(rows) == 0 {
			delete(r.bySession, p.s)
		}
	}
}

// wake tells those waiting on a row that something changed (under mu).
func (r *rebinds) wake() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// pending reports whether the endpoint has a row pending here.
func (r *rebinds) pending(key endpointKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKey[key] > 0
}

// pendingLabels reports whether a labeled tunnel's row of the account whose labels include all
// of want is pending here: a tunnel group of want is worth waiting for.
func (r *rebinds) pendingLabels(account string, want map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.labeled[account] {
		if ep.LabelsMatch(p.labels, want) {
			return true
		}
	}
	return false
}

// pendingRow reports whether row id is pending here.
func (r *rebinds) pendingRow(id string) bool {
	ok, _ := r.row(id)
	return ok
}

// row reports whether row id is pending, and a channel closed at the next change.
func (r *rebinds) row(id string) (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.byRow[id]
	return ok, r.changed
}

// awaitRebind returns the tunnel of row id once its agent has bound it again here, waiting
// while the row is pending (at most moveWait, or ctx); nil when it is not, or not in time.
func (g *Gateway) awaitRebind(ctx context.Context, id string) *Tunnel {
	var deadline <-chan time.Time
	for {
		if t := g.Registry.byRowID(id); t != nil {
			return t
		}
		pending, changed := g.rebinds.row(id)
		if !pending {
			return g.Registry.byRowID(id)
		}
		if deadline == nil {
			tm := time.NewTimer(g.moveWait)
			defer tm.Stop()
			deadline = tm.C
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-deadline:
			return nil
		}
	}
}
