package tunnel

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/store"
)

// An agent that reconnects with its session id takes its session's rows over
// (store.PutAgentSession), the rows of its named binds included, and binds those again by their
// ids moments later. Meanwhile the rows name this replica, and the other replicas route the
// endpoints' requests here; they are not online here yet. Such a request waits here for its
// bind, for as long as the row is pending (MoveWait at most), rather than fail, and so does a
// request this replica's own listeners take for such an endpoint. Rows the agent does not bind
// again within MoveWait are deleted: its application stopped listening on them meanwhile.

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
	byRow map[string]pendingBind
	byKey map[endpointKey]int
	// bySession are each session's pending rows (by id), so that its binds and its end look
	// at its own rows only: after a replica's restart thousands of agents take rows over at
	// once, and a scan of every pending row per bind would grow with their square.
	bySession map[*session]map[string]endpointKey
	// changed is closed, and replaced, whenever a row stops pending.
	changed chan struct{}
}

// pendingBind is a row a session took over.
type pendingBind struct {
	s   *session
	key endpointKey
}

func newRebinds() *rebinds {
	return &rebinds{byRow: map[string]pendingBind{}, byKey: map[endpointKey]int{},
		bySession: map[*session]map[string]endpointKey{}, changed: make(chan struct{})}
}

// expectRebinds records the rows s took over, and deletes those its agent has not bound
// again after moveWait.
func (g *Gateway) expectRebinds(s *session, took store.Takeover) {
	if len(took.Tunnels) == 0 {
		return
	}
	r := g.rebinds
	r.take(s, took.Tunnels)
	time.AfterFunc(g.moveWait, func() {
		select {
		case <-s.done:
			return // its rows went with it, or wait for its agent's next session
		default:
		}
		if !r.forgetSession(s) {
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
// before is s's now.
func (r *rebinds) take(s *session, rows []store.KeptTunnel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range rows {
		if k.Proto == "" || k.Name == "" {
			continue
		}
		key := endpointKey{k.Proto, strings.ToLower(k.Name)}
		if old, ok := r.byRow[k.ID]; ok {
			r.drop(k.ID, old) // taken over again, by the agent's newer session
		}
		r.byRow[k.ID] = pendingBind{s: s, key: key}
		r.byKey[key]++
		mine := r.bySession[s]
		if mine == nil {
			mine = map[string]endpointKey{}
			r.bySession[s] = mine
		}
		mine[k.ID] = key
	}
}

// adopt gives t the id of a row its session took over for the same endpoint and that is not
// bound again yet, when t presents another (an agent that does not send its bind's token
// back): the row is that bind's, and another row of the endpoint would refuse it.
func (r *rebinds) adopt(s *session, t *Tunnel) {
	if t.proto == "" {
		return
	}
	key := t.key()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.byRow[t.rowID]; ok && p.s == s {
		return
	}
	for id, k := range r.bySession[s] {
		if k == key {
			t.rowID = id
			return
		}
	}
}

// holds reports whether s took over a row of the endpoint that is not bound again yet: a
// random tcp port's, which only its agent may bind again.
func (r *rebinds) holds(s *session, key endpointKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.bySession[s] {
		if k == key {
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
func (r *rebinds) drop(id string, p pendingBind) {
	delete(r.byRow, id)
	if r.byKey[p.key]--; r.byKey[p.key] <= 0 {
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
