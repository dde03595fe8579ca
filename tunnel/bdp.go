package tunnel

import "time"

// Latency-aware growth. Across a round trip of some milliseconds a stream carries at most one
// window per round trip, and the agent's unused credit as edgeplane counts it includes the bytes
// still on the way: a stream limited by its window looks the same as one whose upstream sends
// slowly, unless the round trip is known. edgeplane learns it from the agent's muxado, which
// sends a WNDINC as soon as it reads: the time from edgeplane writing on a stream all of whose
// earlier bytes the agent had credited back, to the agent's next credit on that stream, is at
// least one round trip (the agent cannot credit bytes it has not received), and the least of
// those times over the session is close to it (every proxy stream's request is read at once).
// With the round trip known, a stream whose reader keeps up and that received at least two
// thirds of its window per round trip is held by its window (as HTTP/2 implementations judge
// it from their pings), and grows; one that received under a quarter of its window per round
// trip while it never ran out of credit is held by its upstream (or idle), and halves, so a
// grown stream that slows gives its budget back.

// rttKeep is how long the least round trip seen stands before a larger one replaces it, so a
// session whose path got slower is not judged by an old one.
const rttKeep = 10 * time.Second

// minRTT is a session's estimate of its round trip to the agent; under the guard's mu.
type minRTT struct {
	d  time.Duration
	at time.Time
}

func (r *minRTT) note(d time.Duration, now time.Time) {
	if r.d == 0 || d < r.d || now.Sub(r.at) > rttKeep {
		r.d, r.at = d, now
	}
}

// wroteData starts a round-trip probe when edgeplane writes n bytes on a stream whose earlier
// bytes the agent has all credited back; mu is held.
func (g *streamGuard) wroteData(e *proxyWin, n int) {
	if n <= 0 {
		return
	}
	if e.unacked == 0 && e.probeAt.IsZero() {
		e.probeAt = time.Now()
	}
	e.unacked += int64(n)
}

// credited ends a probe with the agent's credit of n bytes; mu is held.
func (g *streamGuard) credited(e *proxyWin, n uint32) {
	e.unacked -= int64(n)
	if !e.probeAt.IsZero() {
		now := time.Now()
		g.rtt.note(max(now.Sub(e.probeAt), time.Microsecond), now)
		e.probeAt = time.Time{}
	}
}

// received measures the stream's bytes per round trip as n more arrive: each period of at least
// one round trip marks the stream full (held by its window) or halves its window (held by its
// upstream); mu is held.
func (g *streamGuard) received(e *proxyWin, n uint64) {
	rtt := g.rtt.d
	if !g.grow || rtt == 0 {
		return
	}
	now := time.Now()
	before := e.recv - n
	if e.periodAt.IsZero() {
		e.periodAt, e.periodRecv = now, before
		return
	}
	el := now.Sub(e.periodAt)
	if el < rtt {
		return
	}
	perRTT := float64(before-e.periodRecv) * float64(rtt) / float64(el)
	switch {
	case perRTT >= float64(2*e.w)/3:
		e.full = true
	case perRTT < float64(e.w)/4 && !e.periodStarved && e.w > agentWindow:
		e.w = max(agentWindow, e.w/2)
		e.full = false
	}
	e.periodAt, e.periodRecv, e.periodStarved = now, before, false
}
