package server

import (
	"net"

	"github.com/edgeplane/edgeplane/internal/netx"
)

// LimitListener accepts at most n connections at a time: beyond that, Accept waits until a
// connection closes, and the operating system's backlog holds new clients. It bounds the memory
// and goroutines that many clients, or slow ones holding connections open, can take; together
// with the server's read and idle timeouts, slow clients cannot exhaust the server. serve uses
// netx.Limiter directly, which also limits connections per client address.
func LimitListener(l net.Listener, n int) net.Listener {
	return netx.Limit(l, netx.Limits{Max: n})
}
