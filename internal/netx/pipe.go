// Package netx holds the small connection helpers both sides of the data plane share.
package netx

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// closeWriter is a connection that can half-close.
type closeWriter interface{ CloseWrite() error }

// Pipe copies both ways between a, a public client's connection, and b, the connection it is
// carried to (an agent's stream, a backend), and returns when both directions are done; both
// are closed on return.
//
// A side that finishes sending half-closes the other (so a client that shuts down its sending
// side still gets the whole answer). A carried connection is working: a limiter never closes it
// to make room (see Limits.Evict), whether bytes flow or not, until its client has finished
// sending: from then on it only waits for the rest of its answer, which the other side may
// never send, so it rests (see rest): it leaves its account's count and may be closed to make
// room, which ends the pipe. A client's FIN cannot tell a half-close from a close, so a client
// that closes gives its slot back at once this way, and a half-closing one keeps getting its
// answer while nobody needs the slot.
//
// With idle above zero, the pipe ends once no byte has moved either way for idle. It returns the
// bytes copied each way, for the traffic inspector's record of the connection.
func Pipe(a, b net.Conn, idle time.Duration) (aToB, bToA int64) {
	working(a)
	working(b)
	carry(a, b)
	var last atomic.Int64 // nanoseconds since start at the last byte moved, either way
	start := time.Now()
	if idle > 0 {
		// One timer per pipe, not one per read: when it fires early (bytes moved since), it is
		// set again for the rest of the quiet time. mu orders its setting before its use.
		var mu sync.Mutex
		var t *time.Timer
		mu.Lock()
		t = time.AfterFunc(idle, func() {
			if quiet := time.Since(start) - time.Duration(last.Load()); quiet < idle {
				mu.Lock()
				t.Reset(idle - quiet)
				mu.Unlock()
				return
			}
			a.Close()
			b.Close()
		})
		mu.Unlock()
		defer func() {
			mu.Lock()
			t.Stop()
			mu.Unlock()
		}()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn, fromClient bool, n *int64) {
		defer wg.Done()
		var err error
		*n, err = io.Copy(dst, &activeReader{r: src, start: start, last: &last})
		if cw, ok := dst.(closeWriter); ok && err == nil {
			_ = cw.CloseWrite()
			if fromClient {
				rest(a)
			}
		} else {
			dst.Close()
			src.Close()
		}
	}
	go cp(a, b, false, &bToA)
	go cp(b, a, true, &aToB)
	wg.Wait()
	carry(a, nil)
	a.Close()
	b.Close()
	return aToB, bToA
}

// carry records on the limiter's connection inside a the connection it is carried to, which
// its Close then closes too; nil forgets it.
func carry(a, b net.Conn) {
	if lc := find(a); lc != nil {
		lc.mu.Lock()
		if !lc.closed || b == nil {
			lc.carried = b
		}
		lc.mu.Unlock()
	}
}

// activeReader records when bytes were last read from r, for Pipe's idle timeout.
type activeReader struct {
	r     io.Reader
	start time.Time
	last  *atomic.Int64
}

func (r *activeReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.last.Store(int64(time.Since(r.start)))
	}
	return n, err
}
