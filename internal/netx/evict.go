package netx

import (
	"net"
	"time"
)

// evictRetry is how often an Accept waiting for a slot looks again for an idle connection to
// close, in case another listener of the limiter took the slot its last eviction freed.
const evictRetry = 50 * time.Millisecond

// acceptEvicting is Accept under Limits.EvictIdle: it accepts the next connection, refuses it
// when its address is over its limits, and then takes a slot, closing the longest idle HTTP
// keep-alive connection when none is free. Without an idle connection to close it waits, as
// Accept does, for one to close or go idle; the new connection waits meanwhile (one at a time
// per listener; those behind it stay in the backlog).
func (ln *listener) acceptEvicting() (net.Conn, error) {
	l := ln.l
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.overAddr(c) {
			c.Close()
			continue
		}
		if !l.makeRoom(ln.done) {
			c.Close()
			return nil, net.ErrClosed
		}
		if lc := l.admit(c); lc != nil {
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

// makeRoom takes a slot, evicting idle connections until one is free; false when done closed
// first.
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

// evictOldest closes the connection that has been idle longest, if any: closing it frees its
// slot. The connection may have received a request in the instant since it was last idle; its
// client sees the connection closed, as with any idle timeout, and HTTP clients retry.
func (l *Limiter) evictOldest() {
	l.mu.Lock()
	e := l.idle.Front()
	if e == nil {
		l.mu.Unlock()
		return
	}
	c := e.Value.(*conn)
	l.unidle(c)
	l.stats.Evicted++
	l.mu.Unlock()
	c.Close()
}

// setIdle puts c at the end of the idle list, or takes it out. A closed connection is never
// put in.
func (l *Limiter) setIdle(c *conn, idle bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unidle(c)
	if !idle {
		return
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	c.idleAt = l.idle.PushBack(c)
	select {
	case l.idled <- struct{}{}:
	default:
	}
}

// unidle takes c out of the idle list; l.mu must be held.
func (l *Limiter) unidle(c *conn) {
	if c.idleAt != nil {
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
}
