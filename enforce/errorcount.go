package enforce

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
)

// errorCounts counts, for each ngrok error code ErrorPage has answered a public request with in
// this process, the answers. The map is never changed once published: ErrorPage finds its
// counter without a lock or an allocation (one map read, one atomic add), and the first answer
// with a code new to the process copies the map under errorCountsMu with the code added. Every
// caller of ErrorPage passes a constant code, so the map stays small (a few dozen codes) and the
// metric labelled with it has a closed set of values.
var (
	errorCounts   atomic.Pointer[map[int]*atomic.Uint64]
	errorCountsMu sync.Mutex
)

// countError counts one answer with the code.
func countError(code int) {
	if m := errorCounts.Load(); m != nil {
		if n := (*m)[code]; n != nil {
			n.Add(1)
			return
		}
	}
	errorCountsMu.Lock()
	defer errorCountsMu.Unlock()
	var next map[int]*atomic.Uint64
	if old := errorCounts.Load(); old != nil {
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
	errorCounts.Store(&next)
}

// ErrorCounts returns how many public requests ErrorPage has answered in this process with each
// ngrok error code, keyed by the code as the ngrok-error-code header gives it ("ERR_NGROK_3200").
// A code never answered with is absent. The counts only grow; they are the data plane's
// edgeplane_public_errors_total, read when metrics are scraped.
func ErrorCounts() map[string]uint64 {
	m := errorCounts.Load()
	if m == nil {
		return map[string]uint64{}
	}
	out := make(map[string]uint64, len(*m))
	for code, n := range *m {
		out[errorCode(code)] = n.Load()
	}
	return out
}

// errorCode is the text of an ngrok error code: ERR_NGROK_ and the number.
func errorCode(code int) string { return "ERR_NGROK_" + strconv.Itoa(code) }
