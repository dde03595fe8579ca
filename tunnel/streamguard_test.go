package tunnel

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// floodStreams is how many streams the hostile agents open, and floodPayload the bytes each
// sends after its type: without the guard, 100,000 streams of 1 KiB kept by muxado.
const (
	floodStreams = 100_000
	floodPayload = 1 << 10
	// heapBound is how much edgeplane's heap may have grown once the hostile session has ended.
	heapBound = 16 << 20
	// muxadoAcceptBacklog is muxado's accept queue (Config.AcceptBacklog's default).
	muxadoAcceptBacklog = 128
)

// heapNow is the live heap after a collection.
func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// flood opens count streams from id first on, each with a bind's type and floodPayload bytes,
// and never closes them. It returns how many it sent before edgeplane closed the connection.
func (a *rawAgent) flood(first uint32, count int) int {
	body := typed(typeBind, make([]byte, floodPayload))
	const batch = 64
	frames := make([][]byte, 0, batch)
	sent := 0
	for i := range count {
		frames = append(frames, rawFrame(frame.TypeData, frame.FlagDataSyn, first+2*uint32(i), body))
		if len(frames) == batch || i == count-1 {
			if err := a.send(frames...); err != nil {
				return sent
			}
			sent += len(frames)
			frames = frames[:0]
		}
	}
	return sent
}

// TestStreamGuardFlood: an agent that opens 100,000 streams and closes none, before Auth and
// after it, while edgeplane's accept loop is held up (before Auth by an Auth that never comes,
// after it by a stream that never sends its type): edgeplane ends the session with GOAWAY
// EnhanceYourCalm and its heap, once the session is gone, is within heapBound of before.
// Without the guard muxado keeps each stream beyond its accept queue, with its data, for the
// life of the session.
func TestStreamGuardFlood(t *testing.T) {
	g := startGateway(t)
	for _, c := range []struct {
		name    string
		authed  bool
		resets  int    // streams opened and reset before the flood, filling muxado's accept queue
		because string // what the GOAWAY's text names
	}{
		{"before auth", false, 0, "streams at once"},
		{"after auth", true, 0, "streams at once"},
		{"after auth, accept queue filled with reset streams", true, 2 * muxadoAcceptBacklog, "faster than edgeplane takes them"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := heapNow()
			a := dialRaw(t, g)
			first := uint32(5)
			if c.authed {
				a.auth(g.token)
				// A stream without its type: the accept loop waits on it.
				if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, 5, nil)); err != nil {
					t.Fatal(err)
				}
				first = 7
			} else if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, 3, typed(typeAuth, nil))); err != nil {
				t.Fatal(err) // an Auth whose message never comes
			}
			var resets [][]byte
			for i := range c.resets {
				id := first + 2*uint32(i)
				resets = append(resets, rawFrame(frame.TypeData, frame.FlagDataSyn, id, typed(typeBind, nil)),
					rawFrame(frame.TypeRst, 0, id, []byte{0, 0, 0, byte(muxado.StreamCancelled)}))
			}
			if err := a.send(resets...); err != nil {
				t.Fatal(err)
			}
			sent := a.flood(first+2*uint32(c.resets), floodStreams)
			during := heapNow()
			code, debug, ended := a.waitEnded()
			after := heapNow()
			t.Logf("%d of %d streams sent; heap %d KiB before, %+d KiB when the agent stopped, %+d KiB after the session; GOAWAY %d %q",
				sent, floodStreams, before>>10, (int64(during)-int64(before))>>10, (int64(after)-int64(before))>>10, code, debug)
			if !ended {
				t.Fatalf("the session was still open after the flood (heap %+d KiB)", (int64(during)-int64(before))>>10)
			}
			if code != muxado.EnhanceYourCalm || !strings.Contains(debug, c.because) {
				t.Errorf("GOAWAY %d %q, want %d (EnhanceYourCalm): %s", code, debug, muxado.EnhanceYourCalm, c.because)
			}
			if sent == floodStreams {
				t.Errorf("edgeplane read all %d streams before ending the session", sent)
			}
			if grew := int64(after) - int64(before); grew > heapBound {
				t.Errorf("heap grew by %d KiB, more than %d KiB", grew>>10, heapBound>>10)
			}
		})
	}
}

// TestStreamGuardWellBehavedAgent: ngrok's own Go SDK binding and unbinding many tunnels one
// after another, and a burst of binds at once, keeps its one session.
func TestStreamGuardWellBehavedAgent(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	var connects, disconnects atomic.Int32
	sess, err := ngrok.Connect(ctx, ngrok.WithServer(g.addr), ngrok.WithCA(g.pool), ngrok.WithAuthtoken(g.token),
		ngrok.WithConnectHandler(func(context.Context, ngrok.Session) { connects.Add(1) }),
		ngrok.WithDisconnectHandler(func(context.Context, ngrok.Session, error) { disconnects.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const rounds = 300
	for i := range rounds {
		tun, err := sess.Listen(ctx, config.HTTPEndpoint())
		if err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
		if err := tun.Close(); err != nil {
			t.Fatalf("unbind %d: %v", i, err)
		}
	}
	// More binds at once than edgeplane serves at once (maxRPCs): some may be refused, but the
	// session stays.
	var wg sync.WaitGroup
	var bound atomic.Int32
	for range 2 * maxRPCs {
		wg.Go(func() {
			if tun, err := sess.Listen(ctx, config.HTTPEndpoint()); err == nil {
				bound.Add(1)
				_ = tun.Close()
			}
		})
	}
	wg.Wait()
	tun, err := sess.Listen(ctx, config.HTTPEndpoint())
	if err != nil {
		t.Fatalf("bind after the burst: %v", err)
	}
	_ = tun.Close()
	t.Logf("%d binds and unbinds in sequence; %d of %d concurrent binds bound", rounds, bound.Load(), 2*maxRPCs)
	if c, d := connects.Load(), disconnects.Load(); c != 1 || d != 0 {
		t.Errorf("%d connects and %d disconnects, want 1 and 0", c, d)
	}
	if n := len(g.gw.snapshotSessions()); n != 1 {
		t.Errorf("%d sessions at the gateway, want 1", n)
	}
}

// TestStreamGuardMalformedFrames: each malformed frame ends the session that sent it with a
// GOAWAY saying why and no panic (a panic in muxado's reader would end it as InternalError),
// while an agent connected at the same time keeps its session and can still bind.
func TestStreamGuardMalformedFrames(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	var disconnects atomic.Int32
	good, err := ngrok.Connect(ctx, ngrok.WithServer(g.addr), ngrok.WithCA(g.pool), ngrok.WithAuthtoken(g.token),
		ngrok.WithDisconnectHandler(func(context.Context, ngrok.Session, error) { disconnects.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	stall := rawFrame(frame.TypeData, frame.FlagDataSyn, 3, nil) // holds up the accept loop
	big := make([]byte, 200<<10)
	cases := []struct {
		name   string
		frames [][]byte
		code   muxado.ErrorCode
	}{
		{"unknown frame type", [][]byte{rawFrame(7, 0, 3, make([]byte, 100))}, muxado.ProtocolError},
		{"DATA longer than the window", [][]byte{rawHeader(0xFFFFFF, frame.TypeData, frame.FlagDataSyn, 3), make([]byte, 4096)}, muxado.FlowControlError},
		{"window overrun in several frames", [][]byte{stall, rawFrame(frame.TypeData, frame.FlagDataSyn, 5, big),
			rawFrame(frame.TypeData, 0, 5, big)}, muxado.FlowControlError},
		{"RST of the wrong length", [][]byte{rawFrame(frame.TypeRst, 0, 3, []byte{0, 0, 1})}, muxado.FrameSizeError},
		{"WNDINC of the wrong length", [][]byte{rawFrame(frame.TypeWndInc, 0, 3, make([]byte, 9))}, muxado.FrameSizeError},
		{"SYN on an even stream id", [][]byte{rawFrame(frame.TypeData, frame.FlagDataSyn, 2, typed(typeAuth, nil))}, muxado.ProtocolError},
		{"stream id with the reserved bit", [][]byte{rawFrame(frame.TypeData, frame.FlagDataSyn, 1<<31|3, typed(typeAuth, nil))}, muxado.ProtocolError},
		{"DATA on stream 0", [][]byte{rawFrame(frame.TypeData, 0, 0, []byte("x"))}, muxado.ProtocolError},
		{"SYN twice for one stream", [][]byte{stall, rawFrame(frame.TypeData, frame.FlagDataSyn, 3, nil)}, muxado.ProtocolError},
		{"DATA after the agent's FIN", [][]byte{stall, rawFrame(frame.TypeData, frame.FlagDataSyn|frame.FlagDataFin, 5, typed(typeBind, nil)),
			rawFrame(frame.TypeData, 0, 5, big)}, muxado.ProtocolError},
		{"more unread bytes than before Auth", [][]byte{stall, rawFrame(frame.TypeData, frame.FlagDataSyn, 5, big),
			rawFrame(frame.TypeData, frame.FlagDataSyn, 7, big), rawFrame(frame.TypeData, frame.FlagDataSyn, 9, big)}, muxado.EnhanceYourCalm},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := dialRaw(t, g)
			_ = a.send(c.frames...) // edgeplane may close the connection before it has all of it
			code, debug, ended := a.waitEnded()
			if !ended {
				t.Fatal("the session was still open")
			}
			if code != c.code {
				t.Errorf("GOAWAY %d %q, want %d", code, debug, c.code)
			}
		})
	}
	tun, err := good.Listen(ctx, config.HTTPEndpoint())
	if err != nil {
		t.Fatalf("the well-behaved agent's bind: %v", err)
	}
	_ = tun.Close()
	if d := disconnects.Load(); d != 0 {
		t.Errorf("the well-behaved agent was disconnected %d times", d)
	}
}

// TestStreamGuardUnclosedRequests: an agent that never half-closes or resets its request
// streams, as a Rust agent leaves a stream whose reply it has read, keeps its session however
// many requests it makes: a stream leaves the guard's count when edgeplane finishes with it, not
// when the agent does, and edgeplane keeps nothing of it.
func TestStreamGuardUnclosedRequests(t *testing.T) {
	g := startGateway(t)
	a := dialRaw(t, g)
	a.auth(g.token)
	before := heapNow()
	const requests, batch = 3000, 8 // a batch stays below maxRPCs, so none is refused
	for i := 0; i < requests; i += batch {
		var frames [][]byte
		for j := range batch {
			frames = append(frames, rawFrame(frame.TypeData, frame.FlagDataSyn, 5+2*uint32(i+j), typed(typeSrvInfo, []byte("{}"))))
		}
		if err := a.send(frames...); err != nil {
			t.Fatalf("after %d requests: %v", i, err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			a.mu.Lock()
			answered := 0
			for j := range batch {
				if a.fins[5+2*uint32(i+j)] {
					answered++
				}
			}
			goAways := a.goAways
			a.mu.Unlock()
			if goAways > 0 {
				t.Fatalf("after %d requests the session was ended: %d %q", i, a.code, a.debug)
			}
			if answered == batch {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("requests %d..%d: %d of %d answered within 30 s", i, i+batch-1, answered, batch)
			}
		}
	}
	after := heapNow()
	a.mu.Lock()
	defer a.mu.Unlock()
	wrong := 0
	for i := range requests {
		if string(a.data[5+2*uint32(i)]) != `{"Region":""}` {
			wrong++
		}
	}
	t.Logf("%d requests never closed by the agent; heap %+d KiB", requests, (int64(after)-int64(before))>>10)
	if wrong != 0 || a.goAways != 0 {
		t.Errorf("%d of %d replies wrong, %d GOAWAYs", wrong, requests, a.goAways)
	}
	if grew := int64(after) - int64(before); grew > heapBound {
		t.Errorf("heap grew by %d KiB, more than %d KiB", grew>>10, heapBound>>10)
	}
}

// TestStreamGuardAtTheLimits: an authenticated agent holding as many streams and unread bytes as
// the guard allows keeps its session, and what it costs edgeplane is bounded: the figure is the
// most one hostile session can hold.
func TestStreamGuardAtTheLimits(t *testing.T) {
	g := startGateway(t)
	a := dialRaw(t, g)
	a.auth(g.token)
	before := heapNow()
	// The heartbeat stream first (its echo shows that edgeplane has read everything sent before
	// a ping), then a stream without its type, which holds up the accept loop.
	if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, 5, typed(heartbeatType, nil)),
		rawFrame(frame.TypeData, frame.FlagDataSyn, 7, nil)); err != nil {
		t.Fatal(err)
	}
	streams := maxAgentStreams - 2
	each := maxAgentHeld / streams / 1024 * 1024
	var frames [][]byte
	for i := range streams {
		frames = append(frames, rawFrame(frame.TypeData, frame.FlagDataSyn, 9+2*uint32(i), typed(typeBind, make([]byte, each-4))))
	}
	frames = append(frames, rawFrame(frame.TypeData, 0, 5, []byte("ping")))
	if err := a.send(frames...); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		a.mu.Lock()
		echo, goAways := string(a.data[5]), a.goAways
		a.mu.Unlock()
		if goAways > 0 {
			t.Fatalf("the session was ended: %d %q", a.code, a.debug)
		}
		if echo == "ping" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat echo within 30 s (got %q)", echo)
		}
	}
	held := heapNow()
	grew := int64(held) - int64(before)
	t.Logf("%d streams of %d KiB unread (%d KiB): heap %+d KiB while the session holds them", streams+2, each>>10,
		streams*each>>10, grew>>10)
	if limit := int64(2*maxAgentHeld + maxAgentStreams*4<<10); grew > limit {
		t.Errorf("heap grew by %d KiB, more than %d KiB", grew>>10, limit>>10)
	}
}

// TestStreamWithoutTypeEndsSession: an authenticated agent that opens a stream and never sends
// its 4-byte type no longer holds the session's accept loop (and every later request of its)
// for as long as it likes: the session ends once the gateway's stream type timeout passes, long
// before the agent's heartbeat window (5 minutes here) would; and a type cut short ends it too.
func TestStreamWithoutTypeEndsSession(t *testing.T) {
	g := startGateway(t, func(g *Gateway) { g.streamTypeTimeout = 300 * time.Millisecond })
	a := dialRaw(t, g)
	a.auth(g.token)
	if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, 5, nil)); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.waitEnded(); !ok {
		t.Fatal("the session is still open 30 s after a stream that sent no type")
	}

	// A type cut short (2 of its 4 bytes, then the stream's end) ends the session at once, long
	// before the timeout (a minute here), instead of being read as a type.
	g = startGateway(t, func(g *Gateway) { g.streamTypeTimeout = time.Minute })
	a = dialRaw(t, g)
	a.auth(g.token)
	if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn|frame.FlagDataFin, 5, []byte{0, 0})); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.waitEnded(); !ok {
		t.Fatal("the session is still open 30 s after a stream whose type was cut short")
	}
}
