package tunnel

import (
	"errors"
	"strings"
	"sync"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// Auto-tuned windows on proxy streams. Every agent assumes a 256 KiB window for its peer and
// announces none, so a download (the agent writes, edgeplane reads) can have only 256 KiB in
// flight before edgeplane's credit comes back: between two busy processes, that round trip
// bounds a bulk transfer (docs/performance.md). muxado adds a WNDINC to the sender's window
// without a cap in the Go clients, so edgeplane may grant more. It does so only while the public
// client drains the stream quickly and the agent is waiting on credit, doubling the stream's
// window from agentWindow up to maxProxyWindow, and only out of a process-wide budget of the
// bytes beyond agentWindow that edgeplane may come to hold (WindowBudget), of which each account
// may hold only its share (winbudget.go): a stream whose reader lags never grows, a grown one
// shrinks again as soon as its reader lags, and every stream keeps at least agentWindow whatever
// the others took. ngrok-rust's muxado (the Rust and Node SDKs) caps its window at its own size
// and drops credit past it, which would leave edgeplane counting credit the agent threw away and
// the stream stalled: only clients known to keep such credit (growableAgent) are granted it.
//
// Raising muxado's receive buffer to maxProxyWindow raises its send window as much (muxado
// sizes both from one setting), so with the feature on edgeplane's own writes on proxy streams
// are held to the agent's real window by a limiter outside muxado (limitedStream), fed by the
// agent's WNDINC frames the framer reads; and the stream guard holds the agent to the credit
// edgeplane granted on every stream edgeplane opened, since muxado's buffer no longer does.

const (
	// maxProxyWindow is the most window one proxy stream grows to: where one muxado stream
	// over TLS stops gaining (BenchmarkStreamWindow), and below frp's 6 MiB.
	maxProxyWindow = 4 << 20
	// DefaultWindowBudget is --agent-window-budget-mib's default: one account alone may hold
	// half (four streams at maxProxyWindow), and what it covers adds at most about 72 MiB to the
	// process above the collector's floor whatever the number of sessions (muxado's buffers grow
	// by doubling, the collector keeps an eighth more; docs/decisions.md has the arithmetic).
	DefaultWindowBudget = 32 << 20
)

// growableAgent reports whether the agent of this user agent uses window credit beyond its own
// window: the clients on Go's muxado, ngrok-go v1 and v2 ("ngrok-go/1.12.1", "ngrok-go/2.1.1")
// and the 2.x agent binary ("ngrok/2"), each seen to grow to maxProxyWindow in a download. The
// Node SDK ("ngrok-javascript/… ngrok-rust/…") accepts such credit without error but caps its
// window at its own 256 KiB, so a grown window would only hold budget it never uses; it and
// every client not checked stay at agentWindow.
func growableAgent(userAgent string) bool {
	return strings.HasPrefix(userAgent, "ngrok-go/") || userAgent == "ngrok/2" || strings.HasPrefix(userAgent, "ngrok/2.")
}

// proxyWin is the guard's account of one stream edgeplane opened, with wide windows on. The
// receive side's counters are under the guard's mu; the send side has its own lock.
type proxyWin struct {
	recv    uint64 // bytes the agent sent
	read    uint64 // bytes edgeplane's side read (muxado's credit)
	granted uint64 // agentWindow plus all credit sent: recv may never pass it
	w       uint64 // the window edgeplane keeps granted ahead of read
	// A round is w bytes read: roundAt is read where the current one began. reads counts its
	// reads and drained those that left little unread (the public client keeps up); starved
	// records that the agent had used nearly all its credit (the window, not the agent, is the
	// limit). warm is set after the first round, whose reads say nothing of the client (the
	// buffer starts empty).
	roundAt        uint64
	reads, drained int
	starved, warm  bool
	// full records that a period of one round trip carried at least two thirds of the window
	// (bdp.go): the window is the limit even though the bytes in flight hide it.
	full bool
	// The round-trip probe and the current period of bytes received (bdp.go): unacked is what
	// edgeplane wrote that the agent has not credited back, probeAt when the probe's bytes were
	// written; periodStarved records that the agent ran out of credit within the period.
	unacked       int64
	probeAt       time.Time
	periodAt      time.Time
	periodRecv    uint64
	periodStarved bool
	charged       int64 // bytes reserved from the budget
	// held counts the rounds that found the stream held by its window (those that double it),
	// heldW is the largest window such a round found too small and chargedMost the most the
	// stream reserved. They decide nothing: a stream held by the CPU rather than its window
	// rightly never grows, and they let a test tell it from a stream the tuner failed to grow.
	held        int
	heldW       uint64
	chargedMost int64
	// peakUnread is the most the stream's muxado buffer ever held unread (recv - read). The
	// buffer keeps the capacity it grew to until the stream closes, so the stream stays charged
	// for it; the public listeners close a stream so charged when its answer ends rather than
	// keep it idle for the connection's next request (limitedStream.HoldsWindowBudget).
	peakUnread uint64
	finIn      bool
	finOut     bool
	send       sendWindow
}

// sendWindow is the agent's window for edgeplane's writes on one stream: agentWindow at the
// start, plus the agent's credit.
type sendWindow struct {
	mu    sync.Mutex
	cond  sync.Cond
	avail int64
	err   error
}

func (s *sendWindow) add(n int64) {
	s.mu.Lock()
	s.avail += n
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *sendWindow) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

// take waits for window and takes up to n bytes of it.
func (s *sendWindow) take(n int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.avail <= 0 && s.err == nil {
		s.cond.Wait()
	}
	if s.err != nil {
		return 0, s.err
	}
	got := min(int64(n), s.avail)
	s.avail -= got
	return int(got), nil
}

// errStreamEnded wakes a writer waiting for window on a stream that ended.
var errStreamEnded = errors.New("edgeplane: the proxy stream ended")

// openedWide records a stream edgeplane opened (its SYN, of n bytes), when the session's windows
// are wide; mu is held.
func (g *streamGuard) openedWide(id frame.StreamId, n int) {
	if g.wins == nil {
		g.wins = make(map[frame.StreamId]*proxyWin)
	}
	e := &proxyWin{granted: agentWindow, w: agentWindow}
	e.send.cond.L = &e.send.mu
	e.send.avail = int64(agentWindow - n)
	g.wroteData(e, n)
	g.wins[id] = e
}

// dropWide forgets a stream edgeplane opened and returns its budget; mu is held.
func (g *streamGuard) dropWide(id frame.StreamId, err error) {
	e, ok := g.wins[id]
	if !ok {
		return
	}
	delete(g.wins, id)
	g.budget.release(g.account, e.charged)
	e.send.fail(err)
}

// endWide forgets every stream as the session ends, returning their budget.
func (g *streamGuard) endWide() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.wins {
		g.dropWide(id, errStreamEnded)
	}
	g.ended = true
}

// readWide checks a frame the agent sent on a stream edgeplane opened; an error ends the session.
func (g *streamGuard) readWide(f frame.Frame) error {
	id := f.StreamId()
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.wins[id]
	if !ok {
		return nil // not edgeplane's any more: muxado discards and resets
	}
	switch f.Type() {
	case frame.TypeData:
		e.recv += uint64(f.Length())
		if e.recv > e.granted {
			return g.fail(muxado.FlowControlError, "stream %d overran the %d-byte window edgeplane granted", id, e.granted)
		}
		e.peakUnread = max(e.peakUnread, e.recv-e.read)
		g.received(e, uint64(f.Length()))
		if f.Flags().IsSet(frame.FlagDataFin) {
			e.finIn = true
			if e.finOut {
				g.dropWide(id, errStreamEnded)
			}
		}
	case frame.TypeWndInc:
		inc := f.(*frame.WndInc).WindowIncrement()
		g.credited(e, inc)
		e.send.add(int64(inc))
	case frame.TypeRst:
		g.dropWide(id, errStreamEnded)
	}
	return nil
}

// wroteWide accounts for a frame edgeplane is about to write on a stream it opened and returns
// the frame to write in its place (nil: credit held back).
func (g *streamGuard) wroteWide(f frame.Frame) frame.Frame {
	id := f.StreamId()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch fr := f.(type) {
	case *frame.Data:
		e, ok := g.wins[id]
		if fr.Syn() && !ok && !g.ended {
			g.openedWide(id, int(fr.Length()))
			e, ok = g.wins[id], true
		} else if ok {
			g.wroteData(e, int(fr.Length()))
		}
		if ok && fr.Fin() {
			e.finOut = true
			if e.finIn {
				g.dropWide(id, errStreamEnded)
			}
		}
	case *frame.Rst:
		g.dropWide(id, errStreamEnded)
	case *frame.WndInc:
		e, ok := g.wins[id]
		if !ok {
			return f
		}
		return g.tune(id, e, uint64(fr.WindowIncrement()))
	}
	return f
}

// tune accounts for n bytes read on stream id (muxado's credit for them), adjusts its window and
// returns the increment to send, or nil while less than proxyCreditBatch is owed; mu is held.
func (g *streamGuard) tune(id frame.StreamId, e *proxyWin, n uint64) frame.Frame {
	e.read += n
	unread := e.recv - e.read
	inflight := e.granted - e.recv // credit the agent has not used yet
	if g.grow {
		g.round(e, unread, inflight)
	}
	if e.charged > 0 {
		// An account above its share (more accounts came to hold budget) stops granting the
		// excess, so the stream's hold shrinks as its client reads and settle returns it.
		if over := g.budget.over(g.account); over > 0 {
			e.w = min(e.w, agentWindow+uint64(max(e.charged-over, 0)))
		}
	}
	if e.read+e.w >= e.granted+proxyCreditBatch {
		// Granting brings what the stream may come to hold up to w: reserve its excess over
		// agentWindow first, and grant only what the budget covers.
		if need := int64(e.w) - agentWindow; need > e.charged {
			e.charged += g.budget.reserve(g.account, need-e.charged)
			e.w = agentWindow + uint64(e.charged)
			e.chargedMost = max(e.chargedMost, e.charged)
		}
	}
	if e.read+e.w < e.granted+proxyCreditBatch {
		// Hold the credit; what the agent may still send shrinks as edgeplane reads, and so
		// does the budget the stream needs.
		g.settle(e)
		return nil
	}
	inc := e.read + e.w - e.granted
	out := new(frame.WndInc)
	if err := out.Pack(id, uint32(inc)); err != nil {
		return nil
	}
	e.granted += inc
	g.settle(e)
	return out
}

// round adjusts a stream's window from what the reads of a round showed: it doubles (up to
// maxProxyWindow) after a round in which at least half the public client's reads caught up
// with the agent and the agent ran out of credit, or in which the client caught up at least once
// and a round trip carried two thirds of the window (bdp.go: across latency the bytes in flight
// hide the agent running out); it halves (down to agentWindow) after one in which the client
// never caught up, so a client that reads slowly never holds more than agentWindow for long, and
// one that reads slowly from the start never more than agentWindow at all; mu is held.
func (g *streamGuard) round(e *proxyWin, unread, inflight uint64) {
	e.reads++
	if unread <= e.w/4 {
		e.drained++
	}
	e.starved = e.starved || inflight <= e.w/8
	e.periodStarved = e.periodStarved || inflight <= e.w/8
	if e.read-e.roundAt < e.w {
		return
	}
	switch {
	case !e.warm:
	case 2*e.drained >= e.reads && e.starved, e.drained > 0 && e.full:
		e.held++
		e.heldW = max(e.heldW, e.w)
		e.w = min(2*e.w, maxProxyWindow)
	case e.drained == 0:
		e.w = max(agentWindow, e.w/2)
	}
	e.warm, e.starved, e.full, e.roundAt = true, false, false, e.read
	e.reads, e.drained = 0, 0
}

// settle returns the budget a stream holds beyond what it may still come to hold (its granted
// credit not yet read) and beyond what its buffer has held (the capacity muxado's buffer keeps
// until the stream closes), less agentWindow; mu is held.
func (g *streamGuard) settle(e *proxyWin) {
	need := max(int64(max(e.granted-e.read, e.peakUnread))-agentWindow, 0)
	if e.charged > need {
		g.budget.release(g.account, e.charged-need)
		e.charged = need
	}
}

// sendWindowOf returns the send window of a stream edgeplane opened, nil when windows are not
// wide or the stream has ended.
func (g *streamGuard) sendWindowOf(id frame.StreamId) *sendWindow {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.wins[id]; ok {
		return &e.send
	}
	return nil
}

// growWindows sets whether the session's proxy streams may grow past agentWindow.
func (g *streamGuard) growWindows(on bool) {
	g.mu.Lock()
	g.grow = on && g.wide
	g.mu.Unlock()
}

// shareAs sets the account whose share of the budget the session's streams grow out of (at
// Auth, before the agent can bind anything, so before edgeplane opens any proxy stream).
func (g *streamGuard) shareAs(account string) {
	g.mu.Lock()
	g.account = account
	g.mu.Unlock()
}
