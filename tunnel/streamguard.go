package tunnel

import (
	"fmt"
	"sync"
	"sync/atomic"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// An agent opens streams of its own (odd ids): its heartbeat, Auth, and one stream per request.
// muxado keeps every stream it has been told of in its stream map, with a receive buffer of up
// to the 256 KiB window, until both sides have half-closed it, either side has reset it, or
// edgeplane has closed it. Left to muxado (v2.0.2), a hostile agent can grow edgeplane's memory
// without end:
//
//   - When edgeplane's accept loop is behind (it reads one request's type, or Auth, before it
//     takes the next stream), muxado's accept queue (128 streams) fills; muxado then answers each
//     further SYN with RST AcceptQueueFull but leaves the stream in its map for good (its
//     session.handleSyn: "XXX close the stream!"), buffering whatever the agent sends on it.
//   - muxado buffers a whole DATA frame (up to 16 MiB) before it checks it against the window,
//     and holds a stream it reset for overrunning the window for 5 s more.
//
// The stream guard bounds both in edgeplane's own code, in the framer muxado reads every frame
// through (framer.go), so it sees a frame before muxado acts on it. It tracks the streams the
// agent opened that edgeplane has not finished with, and the bytes read on them that edgeplane
// has not yet returned as window, and ends the session (a GOAWAY saying why, then the
// connection) when the agent holds more streams or bytes than a legitimate agent ever does.
// Limits well below muxado's accept queue mean the queue cannot fill with open streams, so
// muxado's leaking path is not reached; should it be reached anyway (an agent that resets
// streams while the accept loop is stalled), the RST AcceptQueueFull muxado writes ends the
// session, and ending a session frees all of its streams.
//
// A stream leaves the guard's count when the agent resets it, when edgeplane resets it, or when
// edgeplane half-closes it: edgeplane half-closes an agent's stream only as it finishes with it
// (writeReply, then Close, which takes the stream out of muxado's map at once; data the agent
// sends afterwards is discarded by muxado and answered with a reset). Waiting for the agent's
// own FIN instead would count, for the life of the session, the streams of agents that never
// close a stream whose reply they have read. The streams edgeplane opens (even ids: proxy
// streams, StopTunnel, commands) are edgeplane's own and are not counted. One kind of stream
// stays counted until the session ends: one the agent opens and half-closes in the same frame
// (SYN and FIN), on which muxado lets edgeplane write nothing, not even its FIN. No agent opens
// such a stream (no reply could reach it), so an agent that opens many is ended.

// The guard's limits. An agent holds its heartbeat stream and the requests it has in progress,
// of which edgeplane serves maxRPCs (16) at once and refuses the rest as soon as it has read
// their type; its requests are JSON messages of at most maxMessage (256 KiB), mostly far less.
const (
	// agentWindow is the receive window of every stream: muxado's default (Config.MaxWindowSize),
	// which session.go leaves as is. No DATA frame may be larger and no stream may hold more
	// unreturned bytes: a muxado agent never sends beyond the window edgeplane granted.
	agentWindow = 256 << 10
	// maxAgentStreams is the most streams an authenticated agent may hold open at once: four
	// times maxRPCs, so a burst of requests that edgeplane partly refuses is not taken for an
	// attack, and half of muxado's accept queue.
	maxAgentStreams = 64
	// maxAgentHeld is the most bytes an authenticated agent may have sent on its open streams
	// that edgeplane has not yet read: maxRPCs requests of the largest size at once.
	maxAgentHeld = maxRPCs * maxMessage
	// preAuthStreams and preAuthHeld are the limits before Auth has succeeded, when an agent has
	// opened its heartbeat stream and its Auth and nothing else.
	preAuthStreams = 4
	preAuthHeld    = 2 * agentWindow
	// reservedBit is the top bit of a stream id, which the protocol reserves and muxado never
	// sets.
	reservedBit = 1 << 31
)

// guardError is why the guard ended a session: the code and text of the GOAWAY the agent is
// sent.
type guardError struct {
	code muxado.ErrorCode
	msg  string
}

// Error is the GOAWAY's text, which the session's log also gives.
func (e *guardError) Error() string { return e.msg }

// agentStream is what the guard keeps of one stream the agent opened.
type agentStream struct {
	held  int  // bytes read on the stream and not yet returned to the agent as window
	finIn bool // the agent has half-closed the stream
}

// streamGuard watches the frames of one session (see above). read is called by muxado's reader
// goroutine and wrote by its writer goroutine, so its state is under mu.
type streamGuard struct {
	mu         sync.Mutex
	streams    map[frame.StreamId]agentStream
	held       int // the sum of the streams' held bytes
	maxStreams int
	maxHeld    int
	// tripped is set once the guard has ended the session; every later read fails with it,
	// and the GOAWAY muxado then writes carries its code and text.
	tripped atomic.Pointer[guardError]
	// beat is the agent's heartbeat stream once the session has taken it (0 before): atomic,
	// since isBeat reads it for every frame. owed is the window credit read on it and not yet
	// sent (see batchCredit), under mu.
	beat atomic.Uint32
	owed uint32
	// onPing is called for each ping the framer answers itself (the session's watchdog).
	onPing func()
	// credits is the window credit held back on streams edgeplane opened (credit.go), under
	// mu; nil until the first is held.
	credits map[frame.StreamId]uint32
	// wide is set when the session's muxado windows are maxProxyWindow (window.go): the streams
	// edgeplane opens are then accounted in wins, under mu, and grow out of budget when grow is
	// set (at Auth, for agents that keep credit beyond their window). ended is set as the
	// session ends, after which no stream is accounted.
	wide   bool
	grow   bool
	ended  bool
	budget *WindowBudget
	// account is the session's account, whose share of the budget its streams take (winbudget.go).
	account string
	wins    map[frame.StreamId]*proxyWin
	// rtt is the session's round trip to the agent as its credit shows it (bdp.go), under mu.
	rtt minRTT
}

// creditBatch is how much window credit the heartbeat stream's reads gather before it is sent.
// muxado credits every read, so each 4-byte ping cost a window-increment frame of its own (a
// wake-up of the session's writer, a TLS record and a write system call), about a quarter of an
// idle session's CPU. The agent's window is 256 KiB, so credit held back up to a quarter of it
// never stalls its pings: at one ping per interval, the credit goes out once per 16,384 pings.
const creditBatch = agentWindow / 4

// heartbeat tells the guard which stream is the agent's heartbeat stream: from then on the
// framer answers its pings itself (framer.go), calling onPing for each, and the window credit of
// its reads is sent in batches of creditBatch.
func (g *streamGuard) heartbeat(id frame.StreamId, onPing func()) {
	g.mu.Lock()
	g.onPing = onPing
	g.mu.Unlock()
	g.beat.Store(uint32(id))
}

// isBeat reports whether the framer answers fr itself: a DATA frame of the heartbeat stream
// (not its SYN or FIN, which muxado must see), or the agent's credit for echoes the framer wrote.
func (g *streamGuard) isBeat(fr frame.Frame) bool {
	beat := frame.StreamId(g.beat.Load())
	if beat == 0 || fr.StreamId() != beat {
		return false
	}
	switch fr := fr.(type) {
	case *frame.WndInc:
		return true
	case *frame.Data:
		return !fr.Syn() && !fr.Fin()
	}
	return false
}

// answeredBeat accounts for n bytes of pings the framer read and answered itself: they are no
// longer held, and their credit is owed to the agent. It returns the window increment to write
// once the credit owed reaches creditBatch, else nil.
func (g *streamGuard) answeredBeat(n int) (frame.Frame, func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	beat := frame.StreamId(g.beat.Load())
	if st, ok := g.streams[beat]; ok {
		inc := min(n, st.held)
		st.held -= inc
		g.held -= inc
		g.streams[beat] = st
	}
	return g.batchCredit(beat, uint32(n)), g.onPing
}

// batchCredit adds inc to the credit owed on the heartbeat stream id and returns the window
// increment to write, or nil while the credit owed is below creditBatch. mu is held.
func (g *streamGuard) batchCredit(id frame.StreamId, inc uint32) frame.Frame {
	g.owed += inc
	if g.owed < creditBatch {
		return nil
	}
	out := new(frame.WndInc)
	if err := out.Pack(id, g.owed); err != nil {
		return nil
	}
	g.owed = 0
	return out
}

// newStreamGuard returns a guard with the limits of an authenticated agent.
func newStreamGuard() *streamGuard {
	return &streamGuard{streams: map[frame.StreamId]agentStream{}, maxStreams: maxAgentStreams, maxHeld: maxAgentHeld}
}

// newPreAuthGuard returns a guard with the limits of an agent that has not authenticated;
// authenticated raises them.
func newPreAuthGuard() *streamGuard {
	g := newStreamGuard()
	g.maxStreams, g.maxHeld = preAuthStreams, preAuthHeld
	return g
}

// authenticated raises the guard's limits to an authenticated agent's. It must be called before
// the AuthResp is written: the agent opens its requests as soon as it has read it.
func (g *streamGuard) authenticated() {
	g.mu.Lock()
	g.maxStreams, g.maxHeld = maxAgentStreams, maxAgentHeld
	g.mu.Unlock()
}

// fail records why the session ends and returns the error that ends it.
func (g *streamGuard) fail(code muxado.ErrorCode, format string, args ...any) error {
	e := &guardError{code: code, msg: "edgeplane: " + fmt.Sprintf(format, args...)}
	if !g.tripped.CompareAndSwap(nil, e) {
		return g.tripped.Load()
	}
	return e
}

// read checks a frame muxado's framer has just read from the agent, before muxado acts on it (a
// DATA frame's payload is still unread). An error ends the session.
func (g *streamGuard) read(f frame.Frame) error {
	if e := g.tripped.Load(); e != nil {
		return e
	}
	id := f.StreamId()
	if id&reservedBit != 0 {
		return g.fail(muxado.ProtocolError, "frame on stream id 0x%x, which has the reserved bit set", uint32(id))
	}
	switch f.Type() {
	case frame.TypeData:
		n := int(f.Length())
		if limit := g.frameLimit(id); n > limit {
			return g.fail(muxado.FlowControlError, "a DATA frame of %d bytes on stream %d is larger than the %d-byte stream window", n, id, limit)
		}
		if id&1 == 0 {
			if g.wide {
				return g.readWide(f)
			}
			if f.Flags().IsSet(frame.FlagDataFin) {
				g.dropCredit(id)
			}
			return nil // edgeplane's own stream: muxado holds it to the window
		}
		return g.agentData(id, f.Flags(), n)
	case frame.TypeRst:
		if id&1 == 0 && g.wide {
			return g.readWide(f)
		}
		if id&1 == 1 {
			g.mu.Lock()
			g.forget(id)
			g.mu.Unlock()
		} else {
			g.dropCredit(id)
		}
	case frame.TypeWndInc:
		if id&1 == 0 && g.wide {
			return g.readWide(f)
		}
	case frame.TypeGoAway:
	default:
		// muxado would skip the frame, but no agent's muxado writes types other than the four:
		// such a frame is garbage, most likely a stream out of step with its frame boundaries.
		return g.fail(muxado.ProtocolError, "unknown frame type %d", f.Type())
	}
	return nil
}

// frameLimit is the largest DATA frame the agent may send on stream id: the window, which on
// the streams edgeplane opens may have grown (readWide holds each to its own credit).
func (g *streamGuard) frameLimit(id frame.StreamId) int {
	if id&1 == 0 && g.wide {
		return maxProxyWindow
	}
	return agentWindow
}

// agentData counts a DATA frame of n bytes on a stream of the agent's.
func (g *streamGuard) agentData(id frame.StreamId, flags frame.Flags, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, open := g.streams[id]
	switch syn := flags.IsSet(frame.FlagDataSyn); {
	case syn && open:
		return g.fail(muxado.ProtocolError, "SYN for stream %d, which is open", id)
	case syn && len(g.streams) >= g.maxStreams:
		return g.fail(muxado.EnhanceYourCalm, "the agent opened more than %d streams at once", g.maxStreams)
	case !syn && !open:
		// A stream edgeplane has finished with (or never had): muxado discards the payload
		// and resets the stream, holding nothing.
		return nil
	case open && st.finIn:
		return g.fail(muxado.ProtocolError, "DATA on stream %d after the agent half-closed it", id)
	}
	st.held += n
	g.held += n
	st.finIn = flags.IsSet(frame.FlagDataFin)
	g.streams[id] = st
	if st.held > agentWindow {
		return g.fail(muxado.FlowControlError, "stream %d overran its %d-byte window", id, agentWindow)
	}
	if g.held > g.maxHeld {
		return g.fail(muxado.EnhanceYourCalm, "the agent sent more than %d bytes that edgeplane has not read yet", g.maxHeld)
	}
	return nil
}

// forget stops counting a stream; mu is held.
func (g *streamGuard) forget(id frame.StreamId) {
	if st, ok := g.streams[id]; ok {
		g.held -= st.held
		delete(g.streams, id)
	}
}

// wrote accounts for a frame muxado is about to write to the agent. It returns the frame to write
// in place of f: nil for window credit held back (the heartbeat stream's, batchCredit, and that
// of the streams edgeplane opened, holdCredit), and a GOAWAY with an error when the frame shows
// muxado about to keep a stream it refused.
func (g *streamGuard) wrote(f frame.Frame) (frame.Frame, error) {
	id := f.StreamId()
	if id&1 == 0 {
		switch fr := f.(type) {
		case *frame.GoAway:
			return g.goAway(fr), nil
		case *frame.Data, *frame.Rst, *frame.WndInc:
			if g.wide {
				return g.wroteWide(f), nil
			}
		}
		switch fr := f.(type) {
		case *frame.WndInc:
			return g.holdCredit(fr), nil
		case *frame.Rst:
			g.dropCredit(id)
		case *frame.Data:
			if fr.Fin() {
				g.dropCredit(id)
			}
		}
		return f, nil // edgeplane's own streams
	}
	switch fr := f.(type) {
	case *frame.WndInc:
		g.mu.Lock()
		defer g.mu.Unlock()
		if st, ok := g.streams[id]; ok {
			inc := min(int(fr.WindowIncrement()), st.held)
			st.held -= inc
			g.held -= inc
			g.streams[id] = st
		}
		if uint32(id) == g.beat.Load() {
			// Counted as returned above: the agent, which has not seen the credit yet, holds
			// itself to less than the guard allows.
			return g.batchCredit(id, fr.WindowIncrement()), nil
		}
	case *frame.Data:
		if fr.Fin() {
			g.mu.Lock()
			g.forget(id)
			g.mu.Unlock()
		}
	case *frame.Rst:
		if muxado.ErrorCode(fr.ErrorCode()) == muxado.AcceptQueueFull {
			// muxado refuses the stream but keeps it, and what the agent sends on it, for the
			// life of the session: end the session instead, which frees it.
			err := g.fail(muxado.EnhanceYourCalm, "the agent opened streams faster than edgeplane takes them")
			ga := new(frame.GoAway)
			if perr := ga.Pack(id, 0, nil); perr != nil {
				return f, err
			}
			return g.goAway(ga), err
		}
		g.mu.Lock()
		g.forget(id)
		g.mu.Unlock()
	}
	return f, nil
}

// goAway returns the GOAWAY to write in place of muxado's: once the guard has ended the session,
// muxado's own GOAWAY carries an unknown error code (it knows only its own errors), so the guard
// writes one with its code and text and the same last stream id.
func (g *streamGuard) goAway(ga *frame.GoAway) frame.Frame {
	e := g.tripped.Load()
	if e == nil {
		return ga
	}
	out := new(frame.GoAway)
	if err := out.Pack(ga.LastStreamId(), frame.ErrorCode(e.code), []byte(e.msg)); err != nil {
		return ga
	}
	return out
}
