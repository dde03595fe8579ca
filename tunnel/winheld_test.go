package tunnel

import (
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2/frame"
)

// Growth is the right answer only for a stream held by its window: one whose reader keeps up
// while its agent waits for credit. On a machine whose CPU is the limit (the whole suite beside
// other work on two cores), a download is held by the CPU instead, and then not growing is the
// tuner's right answer, not a fault. So the tests that assert growth ask the tuner whether it
// found the stream held by its window (tuneRecord) and assert growth for what it found; a
// download it never found so is measured again, up to heldAttempts times, and then the test
// fails saying the machine never let it measure: it never passes without having measured.

// heldAttempts bounds the downloads a growth test measures before it concludes that the
// machine never let a stream be held by its window.
const heldAttempts = 5

// tuneRecord is what the tuner recorded of a stream edgeplane opened: the rounds that found it
// held by its window, the largest window such a round found too small, the most it reserved
// from the budget, and the credit granted so far.
type tuneRecord struct {
	held        int
	heldW       uint64
	chargedMost int64
	granted     uint64
}

// record returns the tuner's record of stream id, which must still be open.
func (ws *wideSession) record(t testing.TB, id frame.StreamId) tuneRecord {
	t.Helper()
	ws.guard.mu.Lock()
	defer ws.guard.mu.Unlock()
	e, ok := ws.guard.wins[id]
	if !ok {
		t.Fatalf("stream %d's window is gone before its record was read", id)
	}
	return tuneRecord{held: e.held, heldW: e.heldW, chargedMost: e.chargedMost, granted: e.granted}
}

// grownPast is the window the agent must have been granted more than, after the tuner found
// its stream held by a window of rec.heldW: that window doubled (capped at maxProxyWindow,
// which a stream reaches from half of it), and the credit that doubles it gives the agent
// more than the old window at once, since the agent cannot have sent past the old one.
// Single-account tests only: a share of the budget may cap the doubling.
func (rec tuneRecord) grownPast() int64 {
	return int64(min(rec.heldW, maxProxyWindow/2))
}

// agentPeak waits until the agent has read all the credit rec shows edgeplane granted on id
// (the last increment can reach it after edgeplane read the download's end), and returns the
// most window the agent had on it.
func (ws *wideSession) agentPeak(t testing.TB, id frame.StreamId, rec tuneRecord) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // the project's least deadline for a condition
	for {
		ws.meter.mu.Lock()
		credited := agentWindow + ws.meter.credit[id]
		ws.meter.mu.Unlock()
		if credited >= int64(rec.granted) {
			return ws.meter.peakOf(id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent read %d bytes of window on stream %d, edgeplane granted %d", credited, id, rec.granted)
		}
		time.Sleep(time.Millisecond)
	}
}

// neverHeld records that attempt measured a download (what) the tuner never found held by its
// window: it logs and lets the test measure again, and fails the test at the last attempt.
func neverHeld(t testing.TB, attempt int, what string) {
	t.Helper()
	if attempt < heldAttempts {
		t.Logf("%s, attempt %d: the tuner never found the stream held by its window (the CPU was its limit); measuring again", what, attempt)
		return
	}
	t.Fatalf("%s: in %d downloads the tuner never found the stream held by its window: the machine's CPU, not the window, limited every one, so the machine never let the test measure growth (or the tuner no longer recognizes a stream held by its window)", what, heldAttempts)
}

// tookBudget waits until budget is in use, and reports whether it was before done was closed.
func tookBudget(budget *WindowBudget, done <-chan struct{}) bool {
	for budget.Used() == 0 {
		select {
		case <-done:
			return budget.Used() > 0
		case <-time.After(time.Millisecond):
		}
	}
	return true
}

// waitRead waits until edgeplane's side has read n bytes of stream id.
func (ws *wideSession) waitRead(t testing.TB, id frame.StreamId, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // the project's least deadline for a condition
	for {
		ws.guard.mu.Lock()
		e, ok := ws.guard.wins[id]
		read := uint64(0)
		if ok {
			read = e.read
		}
		ws.guard.mu.Unlock()
		if read >= n {
			return
		}
		if !ok || time.Now().After(deadline) {
			t.Fatalf("edgeplane read %d bytes of stream %d, want %d", read, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}
