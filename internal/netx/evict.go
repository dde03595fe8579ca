package netx

import (
	"net"
	"time"
)

// evictRetry is how often an Accept waiting for a slot looks again for a connection to close, in
// case another listener of the limiter took the slot its last eviction freed.
const evictRetry = 50 * time.Millisecond

// An Eviction is a connection closed to make room for a new one (see Limits.Evict).
type Eviction struct {
	// Remote is the closed connection's client address.
	Remote net.Addr
	// Pending is true when it never did its first work (a request head, a carried TLS
	// connection, an agent's Auth), false when it was idle between HTTP requests.
	Pending bool
	// Trusted is true when its peer had authenticated (an API key holder's idle connection).
	Trusted bool
	// Unproductive is how long it had been pending or idle.
	Unproductive time.Duration
}

// acceptEvicting is Accept under Limits.Evict: it accepts the next connection, refuses it when
// its address is over its limits, and then takes a slot, closing the connection that has been
// unproductive longest when none is free. Without a connection to close it waits, as Accept
// does, for one to close or become unproductive; the new connection waits meanwhile (one at a
// time per listener; those behind it stay in the backlog).
func (ln *listener) acceptEvicting() (net.Conn, error) {
	l := ln.l
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Over its address's or its account's limit, it is closed before it takes a slot: it
		// makes no room, closing nobody's connection for a client that would be refused.
		account := ln.accountOf() // once: the admission below counts against this one
		if l.overAddr(c) || l.overAccount(account) {
			c.Close()
			continue
		}
		if !l.makeRoom(ln.done) {
			c.Close()
			return nil, net.ErrClosed
		}
		if lc := l.admit(c, ln.pending, account); lc != nil {
			return lc, nil
		}
		c.Close()
	}
}

// overAddr reports, and counts as refused, a connection whose address has reached its limits;
// admit checks again when it counts the connection.
func (l *Limiter) overAddr(c net.Conn) bool {
	key, keyed := addrKey(c.RemoteAddr())
	if !keyed {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.addrs[key]
	if n == nil {
		return false
	}
	if l.lim.PerAddr > 0 && n.open >= l.lim.PerAddr ||
		l.lim.PerAddrUntrusted > 0 && n.untrusted >= l.lim.PerAddrUntrusted {
		l.stats.Refused++
		return true
	}
	return false
}

// makeRoom takes a slot, evicting unproductive connections until one is free; false when done
// closed first.
func (l *Limiter) makeRoom(done <-chan struct{}) bool {
	var retry *time.Timer
	for {
		// A free slot first: after an eviction both the slot and a stale signal of idled may
		// be ready, and only the slot must be taken.
		select {
		case l.sem <- struct{}{}:
			return true
		default:
		}
		if retry == nil {
			retry = time.NewTimer(evictRetry)
			defer retry.Stop()
		}
		l.evictOldest()
		select {
		case l.sem <- struct{}{}:
			return true
		case <-done:
			return false
		case <-l.idled:
		case <-retry.C:
			retry.Reset(evictRetry)
		}
	}
}

// evictOldest closes the untrusted connection that has been unproductive longest, or else the
// trusted one, if any: closing it frees its slot. The connection may have become productive in
// the instant since (a request head read): its client sees the connection closed, as with any
// idle timeout, and HTTP clients retry.
func (l *Limiter) evictOldest() {
	l.mu.Lock()
	e := l.unproductive[0].Front()
	trusted := e == nil
	if trusted {
		e = l.unproductive[1].Front()
	}
	if e == nil {
		l.mu.Unlock()
		return
	}
	c := e.Value.(*conn)
	ev := Eviction{Remote: c.RemoteAddr(), Pending: c.pending, Trusted: trusted, Unproductive: time.Since(c.since)}
	l.delist(c)
	l.stats.Evicted++
	l.mu.Unlock()
	c.Close()
	if l.lim.OnEvict != nil {
		l.lim.OnEvict(ev)
	}
}

// setIdle puts c at the end of its unproductive list as idle, or takes it out of the lists. A
// closed connection is never put in. An idle connection does no account's work: it leaves its
// account's count until its next request is routed (Claim).
func (l *Limiter) setIdle(c *conn, idle bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delist(c)
	if idle {
		l.uncount(c)
		l.enlist(c, false)
	}
}

// enlist puts c at the end of its unproductive list (the untrusted or the trusted one), pending
// or idle, unless it is closed; l.mu must be held.
func (l *Limiter) enlist(c *conn, pending bool) {
	c.mu.Lock()
	closed, trusted := c.closed, c.trusted
	c.mu.Unlock()
	if closed {
		return
	}
	c.in = &l.unproductive[0]
	if trusted {
		c.in = &l.unproductive[1]
	}
	c.at, c.pending, c.since = c.in.PushBack(c), pending, time.Now()
	if pending {
		l.pending++
	}
	select {
	case l.idled <- struct{}{}:
	default:
	}
}

// delist takes c out of the unproductive lists; l.mu must be held.
func (l *Limiter) delist(c *conn) {
	if c.at == nil {
		return
	}
	c.in.Remove(c.at)
	if c.pending {
		l.pending--
	}
	c.at, c.in, c.pending = nil, nil, false
}

// working marks the connection inside c as doing its work: it is no longer pending or idle, and
// is not closed to make room. Pipe calls it for the connections it carries.
func working(c net.Conn) {
	lc := find(c)
	if lc == nil {
		return
	}
	lc.l.mu.Lock()
	lc.l.delist(lc)
	lc.l.mu.Unlock()
}
