package ingress

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
)

// A public request's body is read under an idle bound: each read of it may wait at most
// Config.BodyTimeout for the client's next bytes. net/http bounds the request's head
// (ReadHeaderTimeout) but not its body, and a bound on the whole body would cut long uploads
// over slow links; without any, a client that declares a body and then sends nothing, or a byte
// a minute, would hold its connection's slot, the handler and a stream to the agent for ever.

// errBodyIdle ends a read of a public request's body that waited for the client past the body
// timeout. It wraps os.ErrDeadlineExceeded, the error of the read it replaces.
var errBodyIdle = fmt.Errorf("ingress: no byte of the request body arrived within the body timeout: %w", os.ErrDeadlineExceeded)

// BodyTimeoutCode is the ngrok-style code of the 408 answering a request whose body stopped
// arriving: ngrok documents none for it, so it is edgeplane's own, in the family of the data
// plane's refusals at the edge (ERR_NGROK_32xx).
const BodyTimeoutCode = 3220

// idleBody is a public request's body whose every read is bounded by the connection's read
// deadline (the stream's, over HTTP/2), set anew before each read and lifted at the body's end:
// a read that waits longer than idle for the client fails, and the request with it. It is part
// of the request's dialInfo, so it costs no allocation of its own.
type idleBody struct {
	rc   io.ReadCloser
	ctl  http.ResponseController // reaches the connection's (or HTTP/2 stream's) read deadline
	idle time.Duration
	// off: the writer reaches no read deadline (a handler in tests); the body is then unbounded.
	off bool
	// armed is the deadline (Unix nanoseconds) of the read in progress, 0 between reads, so that
	// a request whose connection failed under that read (net/http cancels the request's context
	// before the read returns) is known to have timed out while the read still returns (timedOut).
	armed   atomic.Int64
	expired atomic.Bool
}

// Read reads the client's body, waiting at most idle for its next bytes.
func (b *idleBody) Read(p []byte) (int, error) {
	if b.expired.Load() {
		return 0, errBodyIdle
	}
	if !b.off {
		deadline := time.Now().Add(b.idle)
		if b.ctl.SetReadDeadline(deadline) != nil {
			b.off = true
		} else {
			b.armed.Store(deadline.UnixNano())
		}
	}
	n, err := b.rc.Read(p)
	if b.off {
		return n, err
	}
	b.armed.Store(0)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.expired.Store(true)
		return n, errBodyIdle
	default:
		// The body's end (or the client's): the deadline is lifted, since net/http now reads the
		// idle connection in the background to notice a client that leaves, and that read must
		// not fail while the answer is still being written.
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Close closes the client's body.
func (b *idleBody) Close() error { return b.rc.Close() }

// timedOut reports whether a read of the body waited past the body timeout: it failed with the
// deadline, or is failing (its deadline has passed while it is still in progress).
func (b *idleBody) timedOut() bool {
	if b.expired.Load() {
		return true
	}
	d := b.armed.Load()
	return d != 0 && time.Now().UnixNano() >= d
}

// bound makes r's body an idleBody of info waiting at most idle between reads; a request
// without a body is left as it is.
func (info *dialInfo) bound(w http.ResponseWriter, r *http.Request, idle time.Duration) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	info.body.rc, info.body.ctl, info.body.idle = r.Body, *http.NewResponseController(w), idle
	r.Body = &info.body
}

// bodyTimedOut answers a request whose body stopped arriving before any answer went out: 408
// with BodyTimeoutCode, and over HTTP/1 the connection is closed after it (what is left of the
// body is never read, so the connection cannot carry another request).
func (p *proxy) bodyTimedOut(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	enforce.ErrorPage(w, r, http.StatusRequestTimeout, BodyTimeoutCode, fmt.Sprintf(
		"No byte of the request body arrived for %v (--public-body-timeout): the request was ended.", p.s.bodyTimeout()))
}
