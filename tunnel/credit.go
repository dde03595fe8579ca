package tunnel

import "golang.ngrok.com/muxado/v2/frame"

// Window credit on the streams edgeplane opens (proxy streams): muxado returns the window of
// every read at once, one WNDINC frame per read. A kept-alive proxy stream carrying small
// requests then costs a frame per response each way it is least wanted: edgeplane's writer
// wakes, seals a TLS record and makes a write system call, and the agent, whose CPU shares the
// machine with everything else on a small server, reads and opens that record and wakes its
// stream's writer for credit it did not need. The guard gathers such credit per stream and sends
// it once it reaches proxyCreditBatch. The agent is never held back by it: what is held is less
// than proxyCreditBatch, so the agent may always send at least agentWindow − proxyCreditBatch
// bytes beyond what edgeplane has not read, and a read of proxyCreditBatch or more (a bulk
// transfer's) sends its credit as before. Only credit is delayed, never data, and muxado's
// receive buffer stays bounded by agentWindow as before.

const (
	// proxyCreditBatch is the credit gathered on one stream before it is sent: a sixteenth of
	// the window, below the 32 KiB reads of a body copied through, so bulk transfers return
	// credit as often as before.
	proxyCreditBatch = 16 << 10
	// maxHeldCredits bounds the streams whose credit is held at once. Past it, a stream's credit
	// is sent as muxado sends it, so a session's table stays small whatever the agent does. A
	// stream's entry goes when either side half-closes it or either side resets it: credit is
	// worth nothing once the agent has sent its FIN, and edgeplane half-closes a proxy stream as
	// it is done with it. One that neither side ends (an agent that never answers edgeplane's
	// FIN after sending more data) keeps its entry, and its slot, until the session ends.
	maxHeldCredits = 256
)

// holdCredit takes the window increment muxado is about to write on a stream edgeplane opened,
// and returns the frame to write in its place: nil while the credit gathered on the stream is
// below proxyCreditBatch, else one increment of all of it.
func (g *streamGuard) holdCredit(fr *frame.WndInc) frame.Frame {
	id := fr.StreamId()
	g.mu.Lock()
	defer g.mu.Unlock()
	owed, held := g.credits[id]
	owed += fr.WindowIncrement()
	if owed < proxyCreditBatch && (held || len(g.credits) < maxHeldCredits) {
		if g.credits == nil {
			g.credits = make(map[frame.StreamId]uint32)
		}
		g.credits[id] = owed
		return nil
	}
	if !held {
		return fr
	}
	delete(g.credits, id)
	out := new(frame.WndInc)
	if err := out.Pack(id, owed); err != nil {
		return fr // cannot happen: owed is below twice the window
	}
	return out
}

// dropCredit forgets the credit held on a stream edgeplane opened, at a FIN or a reset either
// way.
func (g *streamGuard) dropCredit(id frame.StreamId) {
	g.mu.Lock()
	delete(g.credits, id)
	g.mu.Unlock()
}
