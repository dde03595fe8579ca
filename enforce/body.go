package enforce

import (
	"errors"
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

// boundBodyTime bounds the reads of the request body on w's connection to d from now (0:
// BodyReadTimeout), and returns the function that lifts the bound again, to be called once the
// body has been read whole. A body refused unread keeps its bound: net/http reads what is left
// of it after the handler to keep the connection, and must not wait on a client that stopped
// sending. Where the connection cannot take a deadline (a writer that does not reach it), the
// body's size bound alone applies.
func boundBodyTime(w http.ResponseWriter, d time.Duration) (lift func()) {
	if d <= 0 {
		d = BodyReadTimeout
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}) }
}

// timedOut reports whether err ended a body read because its time bound passed.
func timedOut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// parsePostedForm reads a POSTed form of at most maxACSBody bytes within the body's time bound,
// answering the refusal itself (413 too large, 408 too slow, 400 not a form) and reporting false
// when it did. what names the message in the refusal ("The identity provider's answer").
func parsePostedForm(w http.ResponseWriter, r *http.Request, within time.Duration, what string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxACSBody)
	lift := boundBodyTime(w, within)
	err := r.ParseForm()
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		lift()
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
