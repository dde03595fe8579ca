package netx

import (
	"container/list"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
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
	// EvictIdle, with a Max, admits a new connection when every slot is taken by closing the
	// HTTP keep-alive connection that has waited longest for its next request (see ConnState),
	// rather than leaving the newcomer in the backlog: idle connections then cost their
	// clients a reconnection, never other clients their answer. Accept then takes the
	// connection before its slot, so a new client is seen while the slots are full.
	EvictIdle bool
}

// Stats are a limiter's counts, for tests and metrics.
type Stats struct {
	// Open is the connections open now; Untrusted those of them not trusted yet; Idle those
	// waiting for their next HTTP request (counted with Limits.EvictIdle only).
	Open, Untrusted, Idle int
	// Accepted counts the connections handed to the server, Refused those closed at once
	// because their address had reached its limit, Evicted the idle keep-alive connections
	// closed to make room for a new one (see Limits.EvictIdle).
	Accepted, Refused, Evicted uint64
}

// A Limiter counts the live connections of one or more listeners (see Listen) and holds them
// to its Limits. Its methods are safe for concurrent use.
type Limiter struct {
	lim Limits
	sem chan struct{} // nil without a Max

	mu    sync.Mutex
	addrs map[netip.Addr]*addrCount
	stats Stats
	// idle holds the connections waiting for their next HTTP request, longest waiting first,
	// when the limits evict idle connections; idled is signalled when one joins it.
	idle  list.List
	idled chan struct{}
}

// addrCount is what one client address holds.
type addrCount struct{ open, untrusted int }

// NewLimiter returns a limiter with the limits; negative fields count as zero (no limit).
func NewLimiter(lim Limits) *Limiter {
	l := &Limiter{lim: lim, addrs: map[netip.Addr]*addrCount{}, idled: make(chan struct{}, 1)}
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
	st.Idle = l.idle.Len()
	return st
}

// Listen wraps ln: its connections count against the limiter's limits, together with those of
// every other listener of the limiter. Closing the returned listener closes ln.
func (l *Limiter) Listen(ln net.Listener) net.Listener {
	return &listener{Listener: ln, l: l, done: make(chan struct{})}
}

type listener struct {
	net.Listener
	l    *Limiter
	done chan struct{}
	once sync.Once
}

// Accept waits for a free slot, then accepts the next connection whose address is within its
// limits; connections beyond them are closed and counted as refused. With Limits.EvictIdle it
// accepts first, then makes room (see acceptEvicting).
func (ln *listener) Accept() (net.Conn, error) {
	if ln.l.lim.EvictIdle && ln.l.sem != nil {
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
		if lc := ln.l.admit(c); lc != nil {
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

// admit counts c against its address, or refuses it (releasing its slot) and returns nil.
func (l *Limiter) admit(c net.Conn) *conn {
	key, keyed := addrKey(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
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
	return &conn{Conn: c, l: l, key: key, keyed: keyed}
}

// conn is an accepted connection counted by its limiter until it is closed.
type conn struct {
	net.Conn
	l     *Limiter
	key   netip.Addr
	keyed bool
	// idleAt is the connection's place in its limiter's idle list, or nil; guarded by l.mu.
	idleAt *list.Element

	mu        sync.Mutex
	trusted   bool
	closed    bool
	clampIdle bool // the next read deadline is the wait for a request on an idle connection
}

// Close frees the connection's counts and closes it.
func (c *conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.Conn.Close()
	}
	c.closed = true
	trusted := c.trusted
	c.mu.Unlock()
	c.l.mu.Lock()
	c.l.unidle(c)
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

// trust marks the connection trusted, once.
func (c *conn) trust() {
	c.mu.Lock()
	if c.trusted || c.closed {
		c.mu.Unlock()
		return
	}
	c.trusted = true
	c.mu.Unlock()
	c.l.mu.Lock()
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
// counts against Limits.PerAddr only, and waits for the server's own idle timeout. Trust does
// nothing to other connections, so callers need not know whether a listener was limited.
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
// With Limits.EvictIdle it also keeps the limiter's list of idle connections, the ones it may
// close to make room.
func ConnState(c net.Conn, st http.ConnState) {
	if st == http.StateNew {
		return
	}
	lc := find(c)
	if lc == nil {
		return
	}
	if lc.l.lim.EvictIdle {
		lc.l.setIdle(lc, st == http.StateIdle)
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
