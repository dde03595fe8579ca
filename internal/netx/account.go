package netx

import (
	"context"
	"net"
)

// Accounts: the public listeners carry many accounts' traffic on one limiter, and one account's
// clients (or one account's agent that never answers them) must not take every slot. A
// connection counts against an account while it does that account's work: a TCP endpoint's
// listener belongs to one account, known when the connection is accepted (ListenAccount); an
// HTTP or TLS connection's account is known only once its Host or server name has been routed
// (Claim, or ClaimRequest while a request is in progress). A connection that waits for its
// first request, or between requests, or whose client has finished sending (rest), belongs to
// no account: it may be closed to make room anyway.

// ListenAccount is Listen for the listener of one account (a TCP endpoint's): each connection
// counts against the account from its accepting, and one over Limits.PerAccount is closed as
// soon as it is accepted, before it takes a slot or makes room.
func (l *Limiter) ListenAccount(ln net.Listener, account string) net.Listener {
	al := &listener{Listener: ln, l: l, done: make(chan struct{})}
	al.account.Store(&account)
	return al
}

// SetAccount makes the connections a listener of ListenAccount accepts from now on count
// against account. A TCP endpoint's port is one socket shared by the binds of its address
// here and on other replicas; when the address passes to another account the socket stays
// open (closing it would reset the connections waiting in its backlog, and a socket a
// handover passed on cannot be bound again while the old process still holds it), and only
// whom its connections count against changes. Connections accepted already keep their count.
// It does nothing on a listener of Listen or ListenPending, which count against no account.
func SetAccount(ln net.Listener, account string) {
	if al, ok := ln.(*listener); ok && !al.pending && al.account.Load() != nil {
		al.account.Store(&account)
	}
}

// Claim counts the connection inside c against account, now that it has been routed to it; a
// connection counted against another account moves to this one. It reports false, counting
// nothing, when the account already holds Limits.PerAccount connections: the caller refuses
// the connection (or the request). Connections a limiter did not accept are always admitted.
func Claim(c net.Conn, account string) bool {
	lc := find(c)
	if lc == nil || account == "" {
		return true
	}
	return lc.l.claim(lc, account, false)
}

// ClaimRequest counts the connection of the request whose context ctx is (see ConnContext)
// against account while the request is in progress: release, called when the handler returns
// (before the end of the answer is sent), takes it off once no request of the connection is in
// progress, so that the client's next request, on any connection, finds the count without it.
// ok is false, counting nothing, when the account holds Limits.PerAccount connections already.
func ClaimRequest(ctx context.Context, account string) (release func(), ok bool) {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	lc := find(c)
	if lc == nil || account == "" {
		return func() {}, true
	}
	if !lc.l.claim(lc, account, true) {
		return nil, false
	}
	return func() { lc.l.unclaimRequest(lc, account) }, true
}

// claim counts c against account; request says it is for one request in progress (see
// ClaimRequest) rather than for the connection's life (Claim).
func (l *Limiter) claim(c *conn, account string, request bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.account == account {
		if request {
			c.requests++
		}
		return true
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return true // Close has counted it out already; it carries nothing more
	}
	if l.accountFull(account) {
		l.stats.AccountRefused++
		return false
	}
	l.uncount(c)
	l.count(c, account)
	if request {
		c.requests = 1
	}
	return true
}

// unclaimRequest ends one request's claim of c for account: c leaves the account's count once
// none of its requests is in progress.
func (l *Limiter) unclaimRequest(c *conn, account string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.account != account {
		return // counted out already (closed, idle) or moved
	}
	if c.requests--; c.requests <= 0 {
		l.uncount(c)
	}
}

// rest marks the connection inside c as doing no work for now: it leaves its account's count
// and, with Limits.Evict, joins the unproductive connections that may be closed to make room.
// Pipe calls it when a client has finished sending (a half-close) and only waits for the rest
// of its answer, which may never come.
func rest(c net.Conn) {
	lc := find(c)
	if lc == nil {
		return
	}
	l := lc.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uncount(lc)
	if l.lim.Evict {
		l.delist(lc)
		l.enlist(lc, false)
	}
}

// overAccount reports, and counts as refused, a new connection of account's listener when the
// account holds its limit already; admit checks again when it counts the connection.
func (l *Limiter) overAccount(account string) bool {
	if account == "" || l.lim.PerAccount <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.accountFull(account) {
		l.stats.AccountRefused++
		return true
	}
	return false
}

// accountFull reports whether account holds Limits.PerAccount connections; l.mu must be held.
func (l *Limiter) accountFull(account string) bool {
	return account != "" && l.lim.PerAccount > 0 && l.accounts[account] >= l.lim.PerAccount
}

// count counts c against account (nothing for ""); l.mu must be held and c counted against none.
func (l *Limiter) count(c *conn, account string) {
	if account == "" {
		return
	}
	c.account = account
	l.accounts[account]++
}

// uncount takes c off its account's count, if any; l.mu must be held.
func (l *Limiter) uncount(c *conn) {
	if c.account == "" {
		return
	}
	if n := l.accounts[c.account] - 1; n > 0 {
		l.accounts[c.account] = n
	} else {
		delete(l.accounts, c.account)
	}
	c.account, c.requests = "", 0
}

// AccountConns returns how many connections account holds now, for tests and metrics.
func (l *Limiter) AccountConns(account string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accounts[account]
}
