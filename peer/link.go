package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Config is what a link needs of its replica.
type Config struct {
	// Identity is this replica's link certificate (NewIdentity).
	Identity *Identity
	// Accept opens the stream to the agent of a tunnel this replica holds, for a request a
	// peer forwards, and writes the agent's proxy header. It returns an error wrapping
	// ErrNoTunnel when no online tunnel here has the row id (the peer's dialler then gets
	// ErrNoTunnel), and any other error when the agent could not be reached (ErrAgentDial).
	// ctx ends when the link does, or after answerTimeout. Nil refuses every request with
	// ErrNoTunnel.
	Accept func(ctx context.Context, req Request) (net.Conn, error)
	// Logger receives the link's events: links up and down, and peers cut for misbehaving.
	// Nil discards.
	Logger *slog.Logger
	// MaxStreams bounds the forwarded streams open at once on one link, in each direction
	// (default DefaultMaxStreams). Each may hold up to a window of unread bytes at each end.
	MaxStreams int
}

// Defaults and bounds of a link.
const (
	// DefaultMaxStreams is the default bound on streams per link: as many as a replica's
	// public listeners keep connections open by default.
	DefaultMaxStreams = 4096
	// Window is every link stream's flow-control window, at both ends (it is part of the
	// link's protocol version): what a stream may hold unread.
	Window = 256 << 10
	// handshakeTimeout bounds a link's TCP connect and TLS handshake.
	handshakeTimeout = 5 * time.Second
	// headerTimeout bounds the time a forwarded stream's header takes to arrive whole.
	headerTimeout = 5 * time.Second
	// answerTimeout bounds the holder's answer (its Accept) as the dialler waits for it.
	answerTimeout = 10 * time.Second
	// heartbeatInterval is how often the dialler pings; heartbeatTimeout is how long either
	// end waits for a ping or its echo before it declares the link down and closes it: five
	// pings, because a link taken for dead fails every stream on it, and a starved machine
	// (load 12-17 on two cores) has left one quiet for 3 s (docs/decisions.md).
	heartbeatInterval = time.Second
	heartbeatTimeout  = 5 * time.Second
	// backoffMin and backoffMax bound the wait before a new attempt to reach a peer after a
	// failed one: it doubles with each failure.
	backoffMin = 250 * time.Millisecond
	backoffMax = 2 * time.Second
	// otherReplicaRetry is the wait before a new attempt when the last one reached another
	// replica than the one dialled (a handover under way at its address); it does not grow.
	otherReplicaRetry = 100 * time.Millisecond
	// forgetAfter is how long a peer that is not wanted (SetPeers) and has nothing open is
	// remembered, with its counts.
	forgetAfter = 5 * time.Minute
)

// timing holds the link's durations: the constants above, which tests shorten before use.
type timing struct {
	handshake, header, answer, interval, heartbeat, backoffMin, backoffMax time.Duration
}

var defaultTiming = timing{handshakeTimeout, headerTimeout, answerTimeout, heartbeatInterval, heartbeatTimeout, backoffMin, backoffMax}

// Link is this replica's end of the links to its peers: it accepts the links other replicas
// dial (Serve) and carries their streams to this replica's agents (Config.Accept), and it
// dials one link to each peer it forwards to, on which Dial opens one stream per public
// connection.
type Link struct {
	id         *Identity
	accept     func(ctx context.Context, req Request) (net.Conn, error)
	log        *slog.Logger
	maxStreams int64
	t          timing
	window     uint32
	serverTLS  *tls.Config

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	peers  map[string]*peer // by replica id
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{} // every connection of the link, to close them all on Close
	wake   chan struct{}         // tells the upkeep loop that the wanted peers changed
	// onUp is told of each link this replica dialled as it comes up (SetOnUp).
	onUp atomic.Pointer[func(id string)]
	// managed is set by the first SetPeers: from then on a link to a peer it does not name is
	// closed once idle.
	managed bool
}

// peer is what a link keeps of one other replica: its dialled link and its counts. Fields
// under the Link's mu unless atomic.
type peer struct {
	id      string
	addr    string   // the address to dial
	wanted  bool     // named by the last SetPeers
	out     *outLink // the link this replica dialled, while it is up
	dialing chan struct{}
	fails   int       // failed attempts since the last success
	retryAt time.Time // no new attempt before
	lastErr error
	inbound int       // links the peer dialled here, up now
	seen    time.Time // when the peer last had anything open

	streamsOut, streamsIn     atomic.Int64
	forwardedOut, forwardedIn atomic.Uint64
	refusedOut, refusedIn     atomic.Uint64
	bytesOut, bytesIn         atomic.Uint64
}

// New makes a link; Serve accepts peers on a listener, Dial forwards to them.
func New(cfg Config) (*Link, error) { return newLink(cfg, defaultTiming, Window) }

// newLink makes a link with the given durations and stream window (tests change them).
func newLink(cfg Config, t timing, window uint32) (*Link, error) {
	if cfg.Identity == nil {
		return nil, errors.New("peer: a link needs this replica's identity")
	}
	l := &Link{id: cfg.Identity, accept: cfg.Accept, log: cfg.Logger, maxStreams: int64(cfg.MaxStreams),
		t: t, window: window, peers: map[string]*peer{}, lns: map[net.Listener]struct{}{},
		conns: map[net.Conn]struct{}{}, wake: make(chan struct{}, 1), serverTLS: cfg.Identity.ServerConfig()}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.maxStreams <= 0 {
		l.maxStreams = DefaultMaxStreams
	}
	if l.accept == nil {
		l.accept = func(context.Context, Request) (net.Conn, error) { return nil, ErrNoTunnel }
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.upkeep()
	return l, nil
}

// Close stops the link: its listeners and every link and stream, both ways, are closed, and
// it returns once the link's goroutines have ended.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for ln := range l.lns {
		ln.Close()
	}
	// The connections first: a stream of a link ends with an error, where closing the agents'
	// streams first (the context) would let a holder end some with a clean half-close.
	for c := range l.conns {
		c.Close()
	}
	l.cancel()
	l.mu.Unlock()
	l.wg.Wait()
	return nil
}

// track adds a connection to those Close closes; false when the link is closed.
func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// peerLocked returns the record of replica id, making it; mu is held.
func (l *Link) peerLocked(id string) *peer {
	p := l.peers[id]
	if p == nil {
		p = &peer{id: id, seen: time.Now()}
		l.peers[id] = p
	}
	return p
}

// SetPeers names the replicas this one forwards to, by id, with the address each advertises.
// The link dials each at once and keeps a link to it up (dialling again, with backoff, when it
// goes down), so Up tells the directory which peers can take streams and the first public
// connection for a peer finds its link ready. A link to a peer no longer named is closed once
// it carries no stream. This replica's own id is ignored.
func (l *Link) SetPeers(peers map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.managed = true
	for id, p := range l.peers {
		if _, ok := peers[id]; !ok {
			p.wanted = false
		}
	}
	for id, addr := range peers {
		if id == l.id.ID() {
			continue
		}
		p := l.peerLocked(id)
		p.wanted = true
		if p.addr != addr && p.out == nil {
			p.addr, p.fails, p.retryAt = addr, 0, time.Time{} // a new address deserves a try at once
		}
		p.addr = addr
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// SetOnUp sets a function told the replica id of each link this replica dialled as it comes up
// (the directory routes to that replica's tunnels from then on, without waiting for its next
// poll). It is called with the link's lock held: it must not block nor call the link.
func (l *Link) SetOnUp(f func(id string)) { l.onUp.Store(&f) }

// poke wakes the upkeep loop, which dials the peers whose retry time has come.
func (l *Link) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Up reports whether a link this replica dialled to replica id is up: streams opened now reach
// it, as far as the last heartbeat knows.
func (l *Link) Up(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.peers[id]
	return p != nil && p.out != nil && !p.out.down.Load()
}

// upkeep dials the wanted peers that have no link (when their backoff allows), closes idle
// links to peers no longer wanted, and forgets peers long gone, until the link is closed.
func (l *Link) upkeep() {
	defer l.wg.Done()
	t := time.NewTicker(l.t.backoffMin)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		case <-l.wake:
		}
		now := time.Now()
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return
		}
		for id, p := range l.peers {
			switch {
			case p.wanted && p.out == nil && p.dialing == nil && !now.Before(p.retryAt):
				l.startDialLocked(p)
			case l.managed && !p.wanted && p.out != nil && p.streamsOut.Load() == 0:
				p.out.retire()
			case !p.wanted && p.out == nil && p.dialing == nil && p.inbound == 0 && p.streamsIn.Load() == 0 &&
				now.Sub(p.seen) > forgetAfter:
				delete(l.peers, id)
			}
			if p.out != nil || p.inbound > 0 || p.streamsIn.Load() > 0 {
				p.seen = now
			}
		}
		l.mu.Unlock()
	}
}

// PeerStats is what a link reports of one peer, for the replica's metrics.
type PeerStats struct {
	// Replica is the peer's replica id; Addr the address it is dialled at ("" if it was never
	// dialled, only dialled this replica).
	Replica, Addr string
	// Up reports that the link this replica dialled to the peer is up; Inbound counts the
	// links the peer dialled to this replica that are up.
	Up      bool
	Inbound int
	// StreamsOut counts the streams open now that this replica forwarded to the peer;
	// StreamsIn those the peer forwarded to this replica's agents.
	StreamsOut, StreamsIn int64
	// ForwardedOut and ForwardedIn count the streams answered ok, since the peer was first
	// seen; RefusedOut and RefusedIn those refused (no such tunnel, agent unreachable, busy)
	// or that failed before their answer.
	ForwardedOut, ForwardedIn, RefusedOut, RefusedIn uint64
	// BytesOut counts the bytes of forwarded streams sent to the peer, BytesIn those received
	// from it, both directions of streams together.
	BytesOut, BytesIn uint64
}

// Stats reports every peer the link knows, by replica id.
func (l *Link) Stats() []PeerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]PeerStats, 0, len(l.peers))
	for _, p := range l.peers {
		out = append(out, PeerStats{Replica: p.id, Addr: p.addr, Up: p.out != nil && !p.out.down.Load(), Inbound: p.inbound,
			StreamsOut: p.streamsOut.Load(), StreamsIn: p.streamsIn.Load(),
			ForwardedOut: p.forwardedOut.Load(), ForwardedIn: p.forwardedIn.Load(),
			RefusedOut: p.refusedOut.Load(), RefusedIn: p.refusedIn.Load(),
			BytesOut: p.bytesOut.Load(), BytesIn: p.bytesIn.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Replica < out[j].Replica })
	return out
}

// rawCloser closes a link's TCP connection directly. A TLS connection's Close first sends a
// close_notify alert, which waits up to 5 s on a peer that stopped reading, and muxado fails a
// link's streams only after its transport's Close has returned: a stalled peer would hold them
// that much longer. muxado's GOAWAY already told a live peer the link is ending.
type rawCloser struct {
	net.Conn // the TLS connection: reads and writes
	raw      net.Conn
}

func (c rawCloser) Close() error { return c.raw.Close() }
