// Package netx holds the small connection helpers both sides of the data plane share.
package netx

import (
	"io"
	"net"
	"sync"
)

// closeWriter is a connection that can half-close.
type closeWriter interface{ CloseWrite() error }

// Pipe copies both ways between a and b, half-closing each side when the other finishes
// sending (so a client that shuts down its sending side still gets the whole answer), and
// returns when both directions are done. Both are closed on return. A connection carried is
// working: a limiter never closes it to make room (see Limits.Evict), whether bytes flow or not.
func Pipe(a, b net.Conn) {
	working(a)
	working(b)
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(closeWriter); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
			src.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}
