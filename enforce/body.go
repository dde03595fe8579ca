package enforce

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// BodyReadTimeout bounds how long a module waits for a request body it reads whole before
// anything reaches the upstream (webhook verification, the SAML endpoints' forms). Such a body
// is small and sent at once by a machine (a provider's delivery, a browser posting the IdP's
// form), and providers give up on a delivery well within it; without a bound, a client sending
// one byte now and then would hold its connection and the handler for as long as it liked.
const BodyReadTimeout = 30 * time.Second

// boundBodyTime bounds r's body's reads on w's connection to d from now (0: BodyReadTimeout),
// for a module that reads the body (or its first part) before anything goes upstream. The module
// reads through the returned body and calls its lift once it has what it needs. A body refused
// before the module has it (too slow, too large) keeps the module's bound: net/http reads what
// is left of it after the handler to keep the connection, and must not wait on a client that
// stopped sending. Where the connection cannot take a deadline (a writer that does not reach
// it), the body's size bound alone applies.
func boundBodyTime(w http.ResponseWriter, r *http.Request, d time.Duration) *timedBody {
	if d <= 0 {
		d = BodyReadTimeout
	}
	b := &timedBody{ReadCloser: r.Body, rc: http.NewResponseController(w)}
	if b.ReadCloser == nil {
		b.ReadCloser = http.NoBody // a server's request always has one; a handler's test may not
	}
	if c := ConnOf(r.Context()); c != nil {
		b.idle = c.BodyIdle
	}
	b.bounded = b.rc.SetReadDeadline(time.Now().Add(d)) == nil
	return b
}

// timedBody is a request body a module reads under its own whole-read bound (boundBodyTime). It
// notes whether a read reached the body's end, which decides what lift leaves behind.
type timedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	idle    time.Duration // the listener's bound between reads (ConnInfo.BodyIdle); 0: none
	bounded bool          // the connection took the module's deadline
	ended   bool          // a read returned io.EOF
}

// Read reads the body, noting its end.
func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.ended = true
	}
	return n, err
}

// lift ends the module's bound once it has read what it needs. What is left of the body, if
// any, goes back under the listener's bound between reads, the one the module's replaced: the
// rest is read either by the proxy, which re-arms that bound on each read, or, when the module
// refuses the request, by net/http before and after the answer, and a client that stops sending
// it must not hold its connection for ever. Once the body has ended, or where the listener
// keeps no such bound, the deadline is cleared instead: net/http then reads the idle connection
// in the background to notice a client that leaves, and that read must not fail while the
// answer is still being written (it would cancel the request).
func (b *timedBody) lift() {
	if !b.bounded {
		return
	}
	if b.ended || b.idle <= 0 {
		_ = b.rc.SetReadDeadline(time.Time{})
		return
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
}

// timedOut reports whether err ended a body read because its time bound passed.
func timedOut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// parsePostedForm reads a POSTed form of at most maxACSBody bytes within the body's time bound,
// answering the refusal itself (413 too large, 408 too slow, 400 not a form) and reporting false
// when it did. what names the message in the refusal ("The identity provider's answer").
func parsePostedForm(w http.ResponseWriter, r *http.Request, within time.Duration, what string) bool {
	body := boundBodyTime(w, r, within)
	r.Body = http.MaxBytesReader(w, body, maxACSBody)
	err := r.ParseForm()
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		body.lift()
		return true
	case errors.As(err, &tooBig):
		SignInFailed(w, r, http.StatusRequestEntityTooLarge, what+" is too large.")
	case timedOut(err):
		SignInFailed(w, r, http.StatusRequestTimeout, what+" did not arrive in time.")
	default:
		SignInFailed(w, r, http.StatusBadRequest, what+" is not a form.")
	}
	return false
}
