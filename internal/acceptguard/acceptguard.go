// Package acceptguard keeps a test's agent-side serving loop alive through a client library's
// panic in Accept.
package acceptguard

import (
	"fmt"
	"net"
)

// Listener turns a panic inside a tunnel's Accept into an error, so that one goroutine serving
// a tunnel ends instead of the whole test binary.
//
// ngrok-go v1.12.1 races with itself in Connect: the first connection's callback can store the
// session's state (with its logger) before Connect stores an empty placeholder over it, and when
// that happens every later Accept error (any tunnel close, including each test's own cleanup)
// dereferences the placeholder's nil logger. Which of the two stores lands last depends on the
// scheduler alone; a server answering the handshake quickly on a loaded machine makes it more
// likely, but nothing the server sends selects that path. Accept errors are expected at close, so
// a guarded listener just reports the panic as the error that ends the serving loop.
type Listener struct{ net.Listener }

// Accept returns the next connection, or the tunnel's error, or the client library's panic as an
// error.
func (g Listener) Accept() (c net.Conn, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("ngrok-go panicked in Accept: %v", r)
		}
	}()
	return g.Listener.Accept()
}
