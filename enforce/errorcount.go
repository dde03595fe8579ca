package enforce

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// ErrorCounter counts, for each ngrok error code, the public requests edgeplane answered itself
// with that code (ErrorPage, and the SAML logout's SOAP answers). One belongs to each set of
// public listeners (ingress.Server): two in one process (a test starting two servers, a
// handover's predecessor and successor) count only their own answers. The listeners give it
// to ErrorPage through the connection's ConnInfo, not through the response's ngrok-error-code
// header: an agent's upstream may send that header too, and its values are neither edgeplane's
// answers nor a closed set fit for a metric's labels. The zero value is ready to use.
//
// The map is never changed once published: an answer finds its counter without a lock or an
// allocation (one map read, one atomic add), and the first answer with a code new to the counter
// copies the map under mu with the code added. Every caller of ErrorPage passes a constant code,
// so the map stays small (a few dozen codes) and the metric labelled with it has a closed set of
// values.
type ErrorCounter struct {
	counts atomic.Pointer[map[int]*atomic.Uint64]
	mu     sync.Mutex
}

// count counts one answer with the code; a nil counter counts nothing.
func (e *ErrorCounter) count(code int) {
	if e == nil {
		return
	}
	if m := e.counts.Load(); m != nil {
		if n := (*m)[code]; n != nil {
			n.Add(1)
			return
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var next map[int]*atomic.Uint64
	if old := e.counts.Load(); old != nil {
		if n := (*old)[code]; n != nil { // another answer added it meanwhile
			n.Add(1)
			return
		}
		next = maps.Clone(*old)
	} else {
		next = map[int]*atomic.Uint64{}
	}
	n := new(atomic.Uint64)
	n.Add(1)
	next[code] = n
	e.counts.Store(&next)
}

// Counts returns how many public requests were answered with each ngrok error code, keyed by the
// code as the ngrok-error-code header gives it ("ERR_NGROK_3200"). A code never answered with is
// absent. The counts only grow; they are the data plane's edgeplane_public_errors_total, read
// when metrics are scraped.
func (e *ErrorCounter) Counts() map[string]uint64 {
	m := e.counts.Load()
	if m == nil {
		return map[string]uint64{}
	}
	out := make(map[string]uint64, len(*m))
	for code, n := range *m {
		out[errorCode(code)] = n.Load()
	}
	return out
}

// countAnswer counts an answer with code to the request r, on the counter of the listeners that
// accepted r's connection; a request no listener recorded (a test's) is counted nowhere.
func countAnswer(r *http.Request, code int) {
	if r == nil {
		return
	}
	if c := connOf(r); c != nil {
		c.Errors.count(code)
	}
}

// errorCode is the text of an ngrok error code: ERR_NGROK_ and the number.
func errorCode(code int) string { return "ERR_NGROK_" + strconv.Itoa(code) }
