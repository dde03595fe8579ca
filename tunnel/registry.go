package tunnel

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/plan"
)

// Tunnel is one online bind or labeled tunnel of an agent session. Its fields are fixed once it
// is registered; the public listeners read them without locks.
type Tunnel struct {
	// id is what the agent routes proxy streams by: the bind id it sent (kept across its
	// reconnects) or the one edgeplane gave it. rowID is its id in the API (/tunnels).
	id, rowID string
	sess      *session
	// proto is http, https, tcp or tls; "" for a labeled tunnel.
	proto string
	// host is the public hostname (http, https, tls), addr the public address (tcp).
	host, addr string
	// internal is set for an internal endpoint (a name ending in ".internal"), reachable only
	// from its account's forward-internal actions, never from the public listeners; port is
	// the port of its URL, part of its name (ep.InternalEndpointKey).
	internal   bool
	port       int
	labels     map[string]string
	url        string
	forwardsTo string
	metadata   string
	pooled     bool
	// reservation is the reserved domain or address the bind holds ("" for a name under a
	// service domain or a random port): deleting it takes the tunnel offline.
	reservation string
	chain       *enforce.Chain
	// policy is the on_tcp_connect phase of a tcp or tls bind's traffic policy; nil when none
	// (an http or https bind's policy is a stage of chain).
	policy *enforce.ConnPolicy
	// passthrough is set for TLS binds without TLS termination: the client's TLS is carried.
	passthrough bool
	// tls is what the bind asks of its public clients' TLS (mutual TLS, TLS termination and its
	// certificate); nil when nothing beyond the listener's defaults.
	tls     *endpointTLS
	started time.Time
	// handler is the endpoint's HTTP handler (its stages in front of the proxy), built once by
	// HTTPHandler for the life of the bind.
	handler struct {
		once sync.Once
		h    http.Handler
	}
	// streams counts the proxy streams the agent has not answered yet, which a StopTunnel waits
	// for (unanswered.go).
	streams unanswered
	// listener is the TCP listener a random-port tcp bind opened while choosing its port; the
	// registry takes it over when the tunnel is added (Registry.tcp).
	listener io.Closer
	// randomPort is set for a tcp bind whose port edgeplane chose; triedAddrs are the
	// addresses it chose before, which other replicas' tunnels had taken.
	randomPort bool
	triedAddrs []string
	// drawnPort is set for a tcp bind on a port edgeplane drew at random, now or for an earlier
	// session of its agent (bound again with the address it was given): a dropped link keeps
	// its row for the agent's return (relink.go).
	drawnPort bool
	// opts are the bind's options as the agent sent them, recorded (sealed) in the tunnel's row
	// for the other replicas to build the same modules.
	opts json.RawMessage
}

// ID is the id proxy streams carry.
func (t *Tunnel) ID() string { return t.id }

// Proto is the bind's protocol ("" for a labeled tunnel).
func (t *Tunnel) Proto() string { return t.proto }

// Chain is the stages of the modules the bind asked for; nil when none.
func (t *Tunnel) Chain() *enforce.Chain { return t.chain }

// HTTPHandler returns the endpoint's HTTP handler, built by build on first use and kept for the
// life of the bind: its stages are wrapped once, not on every request. A bind's chain never
// changes (a new bind is a new Tunnel), and one ingress server serves it.
func (t *Tunnel) HTTPHandler(build func() http.Handler) http.Handler {
	t.handler.once.Do(func() { t.handler.h = build() })
	return t.handler.h
}

// Labels returns the labels of a labeled tunnel.
func (t *Tunnel) Labels() map[string]string { return t.labels }

// AccountID is the account of the session's credential.
func (t *Tunnel) AccountID() string { return t.sess.cred.AccountID }

// Passthrough reports whether a TLS bind carries the client's TLS untouched.
func (t *Tunnel) Passthrough() bool { return t.passthrough }

// TLSFor is what the endpoint asks of a public client's TLS where the public listener
// terminates it (https binds, and tls binds with TLS termination or a terminate-tls action), by
// the connection's ClientHello: client certificates chaining to the agent's CAs (mutual TLS),
// the TLS versions, the certificate to present (nil for the host's) and, on a tls bind, whether
// the listener terminates this connection.
func (t *Tunnel) TLSFor(h plan.Hello) (plan.ConnTLS, error) { return t.tls.connTLS(h) }

// tlsDigest identifies the bind's TLS settings (zero when it has none).
func (t *Tunnel) tlsDigest() [32]byte {
	if t.tls == nil {
		return [32]byte{}
	}
	return t.tls.digest
}

// group is the tunnels serving one endpoint: one, or several when every bind asked for pooling;
// connections are spread over them in turn.
type group struct {
	tunnels []*Tunnel
	next    atomic.Uint32
}

func (g *group) pick() *Tunnel {
	n := len(g.tunnels)
	if n == 1 {
		return g.tunnels[0]
	}
	return g.tunnels[int(g.next.Add(1)-1)%n]
}

// endpointKey names an endpoint: its protocol and its public host (or tcp address), lowercase.
type endpointKey struct{ proto, host string }

// Registry is the set of online tunnels on this replica, by endpoint and by labels. Readers
// (every public connection) see an immutable snapshot; writers (binds and unbinds, rare) copy it.
// It also owns the public listener of each online tcp endpoint: opened with the endpoint's
// first bind, closed with its last (pooled binds share one).
type Registry struct {
	mu   sync.Mutex // serialises writers
	snap atomic.Pointer[snapshot]
	tcp  map[string]io.Closer // by public address; guarded by mu
	// count is the tunnels registered, every bind of a pooled endpoint and every labeled
	// tunnel; guarded by mu.
	count int
	// accounts counts, by account, the tcp endpoints and labeled tunnels online here, which
	// quotas bound (quota.go); guarded by mu.
	accounts map[string]*held
	quotas   Quotas
	// byRow finds a registered tunnel by its row id, for the streams other replicas forward.
	byRow sync.Map
}

// held is what one account holds on this replica: tcp endpoints (ports) and labeled tunnels.
type held struct{ tcp, labeled int }

type snapshot struct {
	endpoints map[endpointKey]*group
	// labeled holds the labeled tunnels by account, so a tunnel-group backend looks only at its
	// own account's.
	labeled map[string][]*Tunnel
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{tcp: map[string]io.Closer{}, accounts: map[string]*held{}}
	r.snap.Store(&snapshot{endpoints: map[endpointKey]*group{}, labeled: map[string][]*Tunnel{}})
	return r
}

// Endpoint returns a tunnel of the online endpoint for proto (http, https, tls, tcp) and host
// (the tcp address for tcp), or nil when none is online.
func (r *Registry) Endpoint(proto, host string) *Tunnel {
	g := r.snap.Load().endpoints[endpointKey{proto, strings.ToLower(host)}]
	if g == nil {
		return nil
	}
	return g.pick()
}

// Online reports whether some tunnel serves proto and host.
func (r *Registry) Online(proto, host string) bool { return r.Endpoint(proto, host) != nil }

// Labeled returns the online labeled tunnels of the account whose labels include all of want.
func (r *Registry) Labeled(account string, want map[string]string) []*Tunnel {
	var out []*Tunnel
	for _, t := range r.snap.Load().labeled[account] {
		if ep.LabelsMatch(t.labels, want) {
			out = append(out, t)
		}
	}
	return out
}

// Tunnels returns how many tunnels are online on this replica now: endpoint binds (each bind of
// a pooled endpoint) and labeled tunnels. It is for metrics, read when they are scraped; the
// count is kept by the writers, so reading it walks nothing.
func (r *Registry) Tunnels() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// held returns the tcp endpoints and labeled tunnels the account holds on this replica.
func (r *Registry) held(account string) (tcp, labeled int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.accounts[account]; h != nil {
		return h.tcp, h.labeled
	}
	return 0, 0
}

// hold adds n to what t's account holds of t's kind (a labeled tunnel, or a tcp endpoint);
// r.mu must be held.
func (r *Registry) hold(t *Tunnel, n int) {
	account := t.AccountID()
	h := r.accounts[account]
	if h == nil {
		h = &held{}
		r.accounts[account] = h
	}
	if t.proto == "" {
		h.labeled += n
	} else {
		h.tcp += n
	}
	if h.tcp == 0 && h.labeled == 0 {
		delete(r.accounts, account)
	}
}

// add registers t; for an endpoint already online it refuses unless both the online binds and t
// ask for pooling, with the same TLS settings, and are of one account. conflict is "" on
// success, "account" (another account's tunnel serves the name here, on any protocol, pooled or
// not), "online", "pool-mix" or "pool-tls" otherwise, and "quota-labeled" or "quota-tcp" for a
// labeled tunnel or a new tcp endpoint beyond its account's quota on this replica; first says t
// is the endpoint's first bind (whose tcp listener is to be opened).
func (r *Registry) add(t *Tunnel) (conflict string, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.snap.Load()
	next := &snapshot{endpoints: old.endpoints, labeled: old.labeled}
	if t.proto == "" {
		account := t.AccountID()
		if q := r.quotaConflict(old, t); q != "" {
			return q, false
		}
		next.labeled = maps.Clone(old.labeled)
		next.labeled[account] = append(slices.Clone(old.labeled[account]), t)
		r.snap.Store(next)
		r.count++
		r.hold(t, 1)
		r.byRow.Store(t.rowID, t)
		return "", true
	}
	key := t.key()
	if conflict := old.conflict(t); conflict != "" {
		return conflict, false
	}
	if q := r.quotaConflict(old, t); q != "" {
		return q, false
	}
	var tunnels []*Tunnel
	if g := old.endpoints[key]; g != nil {
		tunnels = append(tunnels, g.tunnels...)
	} else if t.opensPort() {
		r.hold(t, 1) // a new port; pooled binds share their endpoint's
	}
	next.endpoints = maps.Clone(old.endpoints)
	next.endpoints[key] = &group{tunnels: append(tunnels, t)}
	r.snap.Store(next)
	r.count++
	r.byRow.Store(t.rowID, t)
	return "", len(tunnels) == 0
}

// Conflict is what add would refuse t for now ("" for nothing), without adding it: a bind asks
// before it writes its row, so that a bind refused here writes none.
func (r *Registry) Conflict(t *Tunnel) string {
	if t.proto != "" {
		if c := r.snap.Load().conflict(t); c != "" {
			return c
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.quotaConflict(r.snap.Load(), t)
}

// quotaConflict is "quota-labeled" for a labeled tunnel, and "quota-tcp" for a tcp bind that
// would open a new port, beyond what t's account may hold on this replica; "" otherwise. r.mu
// must be held.
func (r *Registry) quotaConflict(s *snapshot, t *Tunnel) string {
	h := r.accounts[t.AccountID()]
	switch {
	case h == nil:
	case t.proto == "" && r.quotas.LabeledPerAccount > 0 && h.labeled >= r.quotas.LabeledPerAccount:
		return "quota-labeled"
	case t.opensPort() && s.endpoints[t.key()] == nil && r.quotas.TCPPerAccount > 0 && h.tcp >= r.quotas.TCPPerAccount:
		return "quota-tcp"
	}
	return ""
}

// conflict is why t cannot join the snapshot's endpoints ("" when it can).
func (s *snapshot) conflict(t *Tunnel) string {
	if s.heldElsewhere(t) {
		return "account"
	}
	g := s.endpoints[t.key()]
	if g == nil {
		return ""
	}
	first := g.tunnels[0]
	switch {
	case first.pooled && t.pooled && first.tlsDigest() != t.tlsDigest():
		return "pool-tls"
	case first.pooled && t.pooled:
		return ""
	case first.pooled != t.pooled:
		return "pool-mix"
	}
	return "online"
}

// heldElsewhere reports whether a tunnel of another account than t's serves t's name in this
// snapshot: its tcp address, or its hostname on any of http, https and tls (a name belongs to one
// account whatever the protocol, as the store's holds say across replicas).
func (s *snapshot) heldElsewhere(t *Tunnel) bool {
	keys := []endpointKey{t.key()}
	if h := t.key().host; t.proto != "tcp" {
		keys = []endpointKey{{"http", h}, {"https", h}, {"tls", h}}
	}
	for _, k := range keys {
		if g := s.endpoints[k]; g != nil && g.tunnels[0].AccountID() != t.AccountID() {
			return true
		}
	}
	return false
}

// setTCPListener records the public listener of a tcp endpoint.
func (r *Registry) setTCPListener(addr string, l io.Closer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tcp[addr] = l
}

// byRowID returns the registered tunnel with the row id, or nil.
func (r *Registry) byRowID(id string) *Tunnel {
	t, _ := r.byRow.Load(id)
	tun, _ := t.(*Tunnel)
	return tun
}

// remove takes t offline; it reports whether t was registered. The listener of a tcp endpoint
// is closed with its last bind.
func (r *Registry) remove(t *Tunnel) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byRow.CompareAndDelete(t.rowID, t)
	old := r.snap.Load()
	next := &snapshot{endpoints: old.endpoints, labeled: old.labeled}
	if t.proto == "" {
		account := t.AccountID()
		i := slices.Index(old.labeled[account], t)
		if i < 0 {
			return false
		}
		next.labeled = maps.Clone(old.labeled)
		rest := slices.Delete(slices.Clone(old.labeled[account]), i, i+1)
		if len(rest) == 0 {
			delete(next.labeled, account)
		} else {
			next.labeled[account] = rest
		}
		r.snap.Store(next)
		r.count--
		r.hold(t, -1)
		return true
	}
	key := t.key()
	g := old.endpoints[key]
	if g == nil {
		return false
	}
	var rest []*Tunnel
	for _, x := range g.tunnels {
		if x != t {
			rest = append(rest, x)
		}
	}
	if len(rest) == len(g.tunnels) {
		return false
	}
	next.endpoints = maps.Clone(old.endpoints)
	if len(rest) == 0 {
		delete(next.endpoints, key)
		if t.opensPort() {
			r.hold(t, -1) // the endpoint's port, counted with its first bind
			if l := r.tcp[t.addr]; l != nil {
				l.Close()
				delete(r.tcp, t.addr)
			}
		}
	} else {
		next.endpoints[key] = &group{tunnels: rest}
	}
	r.snap.Store(next)
	r.count--
	return true
}

// name is the public name the tunnel serves: its hostname, the address of a tcp bind, "" for a
// labeled tunnel.
// An internal endpoint's name is scoped to its account (ep.InternalEndpointKey): the public
// listeners, which look names up by Host and server name, never find it.
func (t *Tunnel) name() string {
	switch {
	case t.internal:
		return ep.InternalEndpointKey(t.AccountID(), t.host, t.port)
	case t.proto == "tcp":
		return t.addr
	}
	return t.host
}

// opensPort reports whether the tunnel is a public tcp endpoint's, which listens on its port
// (an internal tcp endpoint's port is only part of its name).
func (t *Tunnel) opensPort() bool { return t.proto == "tcp" && !t.internal }

func (t *Tunnel) key() endpointKey {
	if t.proto == "tcp" && !t.internal {
		return endpointKey{"tcp", t.addr}
	}
	return endpointKey{t.proto, t.name()}
}
