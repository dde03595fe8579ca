package netx

import (
	"container/list"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound the connections a Limiter serves at once. A zero field means no limit.
type Limits struct {
	// Max is the most connections open at once across the limiter's listeners. Beyond it,
	// Accept waits for a connection to close, and new clients wait in the kernel's backlog.
	Max int
	// PerAddr is the most connections open at once from one client address (an IPv4 address,
	// or an IPv6 /64, which one host usually holds whole). Beyond it, a new connection is
	// closed as soon as it is accepted, and the others are served meanwhile.
	PerAddr int
	// PerAddrUntrusted is the most connections from one client address that have not been
	// trusted yet (see Trust): an agent that has not authenticated. Beyond it, a new connection
	// is closed as soon as it is accepted.
	PerAddrUntrusted int
	// UntrustedIdle, when positive, is the longest an HTTP keep-alive connection that was never
	// trusted may wait for its next request (see ConnState); a trusted one waits for the
	// server's own idle timeout.
	UntrustedIdle time.Duration
	// Evict, with a Max, admits a new connection when every slot is taken by closing the
	// connection that has been unproductive longest, rather than leaving the newcomer in the
	// backlog: a connection is unproductive while it waits between HTTP requests (see
	// ConnState) and, on a listener from ListenPending, from its accepting until its first
	// request head has been read, its TLS connection is carried (Pipe) or its peer
	// authenticated (Trust). Untrusted connections go first, longest first; an idle trusted
	// one only when no untrusted one is unproductive. A connection with a request in progress,
	// one carrying bytes and an authenticated agent are never closed. Accept then takes the
	// connection before its slot, so a new client is seen while the slots are full.
	Evict bool
	// OnEvict, when not nil, is told of each connection closed to make room (after it was
	// closed), for logs; it runs on the accepting goroutine and must not block.
	OnEvict func(Eviction)
	// PerAccount is the most connections one account may hold at once (see account.go): those
	// accepted on a listener of its own (ListenAccount, a TCP endpoint's) from their accepting,
	// and those routed to it (Claim, ClaimRequest) while they do its work. Beyond it, a
	// connection of the account's listener is closed as soon as accepted, before it takes a
	// slot, and a claim is refused; so one account's clients never hold more than this share of
	// Max.
	PerAccount int
}

// Stats are a limiter's counts, for tests and metrics.
type Stats struct {
	// Open is the connections open now; Untrusted those of them not trusted yet; Idle those
	// waiting for their next HTTP request, and Pending those that have not done their first
	// work yet (both counted with Limits.Evict only).
	Open, Untrusted, Idle, Pending int
	// Accepted counts the connections handed to the server, Refused those closed at once
	// because their address had reached its limit, Evicted the unproductive connections
	// closed to make room for a new one (see Limits.Evict), AccountRefused the connections
	// closed at once or refused by Claim because their account had reached Limits.PerAccount.
	Accepted, Refused, Evicted, AccountRefused uint64
}

// A Limiter counts the live connections of one or more listeners (see Listen) and holds them
// to its Limits. Its methods are safe for concurrent use.
type Limiter struct {
	lim Limits
	sem chan struct{} // nil without a Max

	mu    sync.Mutex
	addrs map[netip.Addr]*addrCount
	// accounts counts the connections each account holds (see Limits.PerAccount).
	accounts map[string]int
	stats    Stats
	// unproductive holds the connections that may be closed to make room (see Limits.Evict),
	// the untrusted ones [0] and the trusted ones [1], each longest unproductive first;
	// pending counts those of them that never did their first work. idled is signalled when
	// a connection joins a list.
	unproductive [2]list.List
	pending      int
	idled        chan struct{}
}

// addrCount is what one client address holds.
type addrCount struct{ open, untrusted int }

// NewLimiter returns a limiter with the limits; negative fields count as zero (no limit).
func NewLimiter(lim Limits) *Limiter {
	l := &Limiter{lim: lim, addrs: map[netip.Addr]*addrCount{}, accounts: map[string]int{}, idled: make(chan struct{}, 1)}
	if lim.Max > 0 {
		l.sem = make(chan struct{}, lim.Max)
	}
	return l
}

// Limit is NewLimiter(lim).Listen(ln): one listener with limits of its own.
func Limit(ln net.Listener, lim Limits) net.Listener { return NewLimiter(lim).Listen(ln) }

// Stats returns the limiter's counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats
	st.Pending = l.pending
	st.Idle = l.unproductive[0].Len() + l.unproductive[1].Len() - l.pending
	return st
}

// Listen wraps ln: its connections count against the limiter's limits, together with those of
// every other listener of the limiter. Closing the returned listener closes ln. Its connections
// are closed to make room (Limits.Evict) only while idle between HTTP requests: a listener of
// raw connections (a TCP endpoint's) whose client may rightly stay silent uses Listen.
func (l *Limiter) Listen(ln net.Listener) net.Listener {
	return &listener{Listener: ln, l: l, done: make(chan struct{})}
}

// ListenPending is Listen for a listener whose clients must do something first: send a request
// head (HTTP), a ClientHello that gets carried (TLS), or authenticate (agents). Until then a
// connection is pending, and with Limits.Evict the longest pending ones are closed to admit new
// clients, so that clients that never finish their first request cannot keep others out.
func (l *Limiter) ListenPending(ln net.Listener) net.Listener {
	return &listener{Listener: ln, l: l, done: make(chan struct{}), pending: true}
}

type listener struct {
	net.Listener
	l       *Limiter
	done    chan struct{}
	once    sync.Once
	pending bool // connections start pending (see ListenPending)
	// account is the account every connection is counted against from its accepting (see
	// ListenAccount): set once, or moved by SetAccount while the listener serves.
	account atomic.Pointer[string]
}

// accountOf is the account a connection accepted now counts against ("" for none).
func (ln *listener) accountOf() string {
	if a := ln.account.Load(); a != nil {
		return *a
	}
	return ""
}

// Accept waits for a free slot, then accepts the next connection whose address is within its
// limits; connections beyond them are closed and counted as refused. With Limits.Evict it
// accepts first, then makes room (see acceptEvicting).
func (ln *listener) Accept() (net.Conn, error) {
	if ln.l.lim.Evict && ln.l.sem != nil {
		return ln.acceptEvicting()
	}
	for {
		if ln.l.sem != nil {
			select {
			case ln.l.sem <- struct{}{}:
			case <-ln.done:
				return nil, net.ErrClosed
			}
		}
		c, err := ln.Listener.Accept()
		if err != nil {
			ln.l.releaseSlot()
			return nil, err
		}
		if lc := ln.l.admit(c, false, ln.accountOf()); lc != nil {
			return lc, nil
		}
		c.Close()
	}
}

func (ln *listener) Close() error {
	ln.once.Do(func() { close(ln.done) })
	return ln.Listener.Close()
}

func (l *Limiter) releaseSlot() {
	if l.sem != nil {
		<-l.sem
	}
}

// addrKey is the address a connection counts against: its IPv4 address, or its IPv6 /64.
// ok is false for connections without an IP address (a pipe, a Unix socket).
func addrKey(a net.Addr) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	return ip, true
}

// admit counts c against its address and its listener's account ("" for none), or refuses it
// (releasing its slot) and returns nil. A pending connection joins the unproductive ones when
// the limits evict.
func (l *Limiter) admit(c net.Conn, pending bool, account string) *conn {
	key, keyed := addrKey(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.accountFull(account) {
		l.stats.AccountRefused++
		l.releaseSlot()
		return nil
	}
	if keyed {
		n := l.addrs[key]
		if n == nil {
			n = &addrCount{}
		}
		if l.lim.PerAddr > 0 && n.open >= l.lim.PerAddr ||
			l.lim.PerAddrUntrusted > 0 && n.untrusted >= l.lim.PerAddrUntrusted {
			l.stats.Refused++
			l.releaseSlot()
			return nil
		}
		n.open++
		n.untrusted++
		l.addrs[key] = n
	}
	l.stats.Open++
	l.stats.Untrusted++
	l.stats.Accepted++
	lc := &conn{Conn: c, l: l, key: key, keyed: keyed}
	l.count(lc, account)
	if pending && l.lim.Evict {
		l.enlist(lc, true)
	}
	return lc
}

// conn is an accepted connection counted by its limiter until it is closed.
type conn struct {
	net.Conn
	l     *Limiter
	key   netip.Addr
	keyed bool
	// Guarded by l.mu: the connection's place in its limiter's unproductive lists (nil when
	// in none), the list, whether it is there as pending, and since when; the account it is
	// counted against ("" for none), and how many of its requests in progress claimed it.
	at       *list.Element
	in       *list.List
	pending  bool
	since    time.Time
	account  string
	requests int

	mu        sync.Mutex
	trusted   bool
	closed    bool
	clampIdle bool // the next read deadline is the wait for a request on an idle connection
	// carried is the connection Pipe carries this one to: closing this one (to make room, or
	// when its pipe has been idle) closes it too, so that the pipe ends.
	carried net.Conn
}

// Close frees the connection's counts and closes it.
func (c *conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.Conn.Close()
	}
	c.closed = true
	trusted, carried := c.trusted, c.carried
	c.carried = nil
	c.mu.Unlock()
	if carried != nil {
		// Not on this goroutine: closing an agent's stream writes to its session, and Close
		// may be called by an Accept making room, which must not wait.
		go carried.Close()
	}
	c.l.mu.Lock()
	c.l.delist(c)
	c.l.uncount(c)
	c.l.stats.Open--
	if !trusted {
		c.l.stats.Untrusted--
	}
	if n := c.l.addrs[c.key]; c.keyed && n != nil {
		n.open--
		if !trusted {
			n.untrusted--
		}
		if n.open == 0 {
			delete(c.l.addrs, c.key)
		}
	}
	c.l.mu.Unlock()
	c.l.releaseSlot()
	return c.Conn.Close()
}

// trust marks the connection trusted, once. Trusting is the first work of a pending connection
// (an agent's Auth), so it leaves the unproductive ones.
func (c *conn) trust() {
	c.mu.Lock()
	if c.trusted || c.closed {
		c.mu.Unlock()
		return
	}
	c.trusted = true
	c.mu.Unlock()
	c.l.mu.Lock()
	c.l.delist(c)
	c.l.stats.Untrusted--
	if n := c.l.addrs[c.key]; c.keyed && n != nil {
		n.untrusted--
	}
	c.l.mu.Unlock()
}

// SetReadDeadline sets the read deadline; on an idle HTTP connection that was never trusted
// (see ConnState), no later than the limiter's UntrustedIdle from now.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	clamp := c.clampIdle && !c.trusted
	c.clampIdle = false
	c.mu.Unlock()
	if clamp {
		if short := time.Now().Add(c.l.lim.UntrustedIdle); t.IsZero() || t.After(short) {
			t = short
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// CloseWrite half-closes the connection when the underlying one can (a TCP connection).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// ReadFrom lets io.Copy use the underlying connection's fast path (splice on Linux).
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// NetConn returns the underlying connection.
func (c *conn) NetConn() net.Conn { return c.Conn }

// find returns the limiter's connection inside c: c itself, or one that c wraps (a TLS
// connection, or any connection with a NetConn method).
func find(c net.Conn) *conn {
	for c != nil {
		if lc, ok := c.(*conn); ok {
			return lc
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
	return nil
}

// Trust marks a connection accepted by a Limiter trusted: its peer authenticated. It then
// counts against Limits.PerAddr only, waits for the server's own idle timeout, is no longer
// pending, and is closed to make room only when idle between HTTP requests and no untrusted
// connection can be closed instead. Trust does nothing to other connections, so callers need
// not know whether a listener was limited.
func Trust(c net.Conn) {
	if lc := find(c); lc != nil {
		lc.trust()
	}
}

// connKey is the context key of the connection an HTTP request came on.
type connKey struct{}

// ConnContext is an http.Server's ConnContext: it records the connection in the context of its
// requests, for TrustContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// TrustContext trusts the connection of the request whose context ctx is (see ConnContext).
func TrustContext(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		Trust(c)
	}
}

// ConnState is an http.Server's ConnState: when a keep-alive connection that was never trusted
// goes idle, the wait for its next request is cut to the limiter's UntrustedIdle. (net/http
// sets the idle read deadline right after this hook; the deadline after it, for the request's
// header, is not clamped.)
//
// With Limits.Evict it also keeps the limiter's lists of unproductive connections, the ones it
// may close to make room: a connection is idle from StateIdle, and productive from StateActive
// (net/http reports it once a whole request head has been read, or for HTTP/2 once a stream
// is open) until it goes idle again. StateNew leaves a pending connection pending.
func ConnState(c net.Conn, st http.ConnState) {
	if st == http.StateNew {
		return
	}
	lc := find(c)
	if lc == nil {
		return
	}
	if lc.l.lim.Evict {
		lc.l.setIdle(lc, st == http.StateIdle)
	} else if st == http.StateIdle {
		lc.l.mu.Lock()
		lc.l.uncount(lc) // an idle connection does no account's work (see Claim)
		lc.l.mu.Unlock()
	}
	if st != http.StateIdle {
		return
	}
	if lc.l.lim.UntrustedIdle > 0 {
		lc.mu.Lock()
		lc.clampIdle = !lc.trusted
		lc.mu.Unlock()
	}
}
