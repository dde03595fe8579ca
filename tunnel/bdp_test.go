package tunnel

import (
	"net"
	"testing"
	"time"
)

// delayedLink returns a link that delays what edgeplane's end of a connection reads by d: a round
// trip of d, as to an agent in another region.
func delayedLink(d time.Duration) func(net.Conn) net.Conn {
	return func(c net.Conn) net.Conn { return newDelayConn(c, d) }
}

// pollBudget records the most of budget in use until stop is closed.
func pollBudget(budget *WindowBudget, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var most int64
		for {
			most = max(most, budget.Used())
			select {
			case <-stop:
				out <- most
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return out
}

// TestProxyWindowGrowsAcrossLatency: across a 25 ms round trip a download whose reader keeps up
// is held by its window, with most of the window in flight rather than unused: the tuner finds
// it so from its bytes per round trip, the window grows past each window found too small, and
// the budget is whole again at the end. The round trip makes a window's worth per round trip
// little work for the CPU (1 MiB per 25 ms, as much as a race build on a loaded machine
// carries), but on a machine loaded enough the CPU is still the limit and the stream rightly
// does not grow: such a download is measured again (winheld_test.go).
func TestProxyWindowGrowsAcrossLatency(t *testing.T) {
	for attempt := 1; ; attempt++ {
		budget := NewWindowBudget(DefaultWindowBudget)
		ws := newWideSessionLink(t, budget, true, delayedLink(25*time.Millisecond))
		st, peer, id := ws.open(t)
		want := download(peer, 16<<20)
		if got := readAll(t, st, 0); got != <-want {
			t.Fatal("the download's digest differs")
		}
		rec := ws.record(t, id)
		st.Close()
		peak := ws.agentPeak(t, id, rec)
		if rec.held > 0 && peak <= rec.grownPast() {
			t.Errorf("a fast download across 25 ms: the tuner found it held by a window of %d, yet the agent's window peaked at %d", rec.heldW, peak)
		}
		t.Logf("attempt %d: held by its window %d times, at most at %d; the agent's window peaked at %d", attempt, rec.held, rec.heldW, peak)
		waitBudget(t, budget, 0)
		if rec.held > 0 || t.Failed() {
			return
		}
		neverHeld(t, attempt, "a fast download across 25 ms")
	}
}

// TestProxyWindowTrickleAcrossLatencyHoldsTheBase: across the same round trip, a download whose
// upstream trickles (64 KiB every 20 ms, a quarter of the window per round trip) is held by its
// upstream, not its window, though the agent never uses up its credit as edgeplane sees it: its
// window stays at 256 KiB and it takes nothing from the budget.
func TestProxyWindowTrickleAcrossLatencyHoldsTheBase(t *testing.T) {
	budget := NewWindowBudget(DefaultWindowBudget)
	ws := newWideSessionLink(t, budget, true, delayedLink(10*time.Millisecond))
	st, peer, id := ws.open(t)
	stop := make(chan struct{})
	most := pollBudget(budget, stop)
	want := downloadPaced(peer, burst{size: 2 << 20, every: 64 << 10, pause: 20 * time.Millisecond})
	if got := readAll(t, st, 0); got != <-want {
		t.Fatal("the download's digest differs")
	}
	close(stop)
	if peak := ws.meter.peakOf(id); peak > agentWindow {
		t.Errorf("a trickling upstream: the agent's window peaked at %d, past %d", peak, agentWindow)
	}
	if m := <-most; m != 0 {
		t.Errorf("a trickling upstream's stream took %d bytes of the budget", m)
	}
}

// TestProxyWindowShrinksWhenTheUpstreamSlows: a download that grew its window and then slows to
// 64 KiB every 5 ms (its reader still keeping up) gives the budget back while the stream is
// still open, all but what its buffer held at most. Its fast part grows the window only if the
// tuner finds it held by its window; one the CPU held instead proves nothing about giving back,
// and is measured again (winheld_test.go).
func TestProxyWindowShrinksWhenTheUpstreamSlows(t *testing.T) {
	for attempt := 1; ; attempt++ {
		budget := NewWindowBudget(DefaultWindowBudget)
		ws := newWideSession(t, budget, true)
		st, peer, id := ws.open(t)
		var fast tuneRecord
		want := downloadPaced(peer,
			burst{size: 24 << 20},
			burst{size: 6 << 20, every: 64 << 10, pause: 5 * time.Millisecond, before: func() {
				// The agent wrote the fast part; once edgeplane has read it, its record is the
				// fast part's.
				ws.waitRead(t, id, 24<<20)
				fast = ws.record(t, id)
			}})
		done := make(chan [32]byte, 1)
		go func() { done <- readAll(t, st, 0) }()
		if got := <-done; got != <-want {
			t.Fatal("the download's digest differs")
		}
		if fast.held == 0 {
			st.Close()
			waitBudget(t, budget, 0)
			neverHeld(t, attempt, "the fast part of a download")
			continue
		}
		if peak := ws.meter.peakOf(id); peak <= fast.grownPast() {
			t.Fatalf("the tuner found the fast part held by a window of %d, yet the agent's window peaked at %d", fast.heldW, peak)
		}
		// The agent closed its side; edgeplane's is still open: it holds no credit any more, only
		// what its buffer once held (muxado keeps that capacity until the stream closes).
		ws.guard.mu.Lock()
		kept := max(int64(ws.guard.wins[id].peakUnread)-agentWindow, 0)
		ws.guard.mu.Unlock()
		if used := budget.Used(); used != kept {
			t.Errorf("after the slow part the stream still holds %d bytes of the budget, want %d (its buffer's most beyond the base)", used, kept)
		}
		st.Close()
		waitBudget(t, budget, 0)
		return
	}
}
