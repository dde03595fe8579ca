package tunnel

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2/frame"
)

// TestHeartbeatCreditBatched: every ping on the agent's heartbeat stream is echoed, and the
// window credit of its reads goes back in batches of creditBatch, not as one window-increment
// frame per 4-byte ping (muxado's way, a third of an idle session's frames).
func TestHeartbeatCreditBatched(t *testing.T) {
	g := startGateway(t)
	a := dialRaw(t, g)
	const hb = 1
	if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, hb, typed(heartbeatType, nil))); err != nil {
		t.Fatal(err)
	}
	a.auth(g.token)
	// ping sends n pings, one frame each, and waits until all of them have been echoed.
	sent := 0
	ping := func(n int) {
		t.Helper()
		var frames [][]byte
		for i := range n {
			frames = append(frames, rawFrame(frame.TypeData, 0, hb, []byte{0xbe, 0xa7, byte(i >> 8), byte(i)}))
		}
		if err := a.send(frames...); err != nil {
			t.Fatal(err)
		}
		sent += 4 * n
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			a.mu.Lock()
			got := len(a.data[hb])
			a.mu.Unlock()
			if got == sent {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d bytes of pings echoed", got, sent)
			}
		}
	}
	ping(3000)
	a.mu.Lock()
	// The session reads the stream's 4-byte type before the framer takes the stream over, and
	// muxado's writer credits those 4 bytes on its own time: before the takeover that is one
	// increment of 4 (the framer batches it after). It is not a ping's credit: set it aside.
	n0, c0 := 0, uint32(0)
	if a.wndincs[hb] == 1 && a.credit[hb] == 4 {
		n0, c0 = 1, 4
	}
	if n, c := a.wndincs[hb]-n0, a.credit[hb]-c0; n != 0 || c != 0 {
		t.Errorf("after 3,000 pings (12,000 bytes): %d window increments granting %d bytes, want none below %d", n, c, creditBatch)
	}
	if first := a.data[hb][:4]; !bytes.Equal(first, []byte{0xbe, 0xa7, 0, 0}) {
		t.Errorf("first echo %x, want the first ping", first)
	}
	a.mu.Unlock()
	ping(creditBatch / 4) // past the batch: the credit owed goes back in one frame
	a.mu.Lock()
	if n, c := a.wndincs[hb]-n0, a.credit[hb]-c0; n != 1 || c < creditBatch || c > uint32(sent) {
		t.Errorf("after %d bytes of pings: %d window increments granting %d bytes, want one granting %d to %d",
			sent, n, c, creditBatch, sent)
	}
	a.mu.Unlock()
	select {
	case <-a.ended:
		t.Fatal("the session ended")
	default:
	}
}

// TestEchoHandsOver: pings that reach muxado before the framer takes the heartbeat stream over
// are echoed by the session's echo goroutine, which then ends without closing the stream; the
// framer answers every later ping, and the session keeps no goroutine for its heartbeat.
func TestEchoHandsOver(t *testing.T) {
	g := startGateway(t, func(g *Gateway) { g.echoHandover = 200 * time.Millisecond })
	a := dialRaw(t, g)
	const hb = 1
	// The stream's SYN and a ping in one write: muxado buffers the ping before the session has
	// accepted the stream.
	if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, hb, typed(heartbeatType, nil)),
		rawFrame(frame.TypeData, 0, hb, []byte{1, 2, 3, 4})); err != nil {
		t.Fatal(err)
	}
	a.auth(g.token)
	echoed := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			a.mu.Lock()
			got, fin := len(a.data[hb]), a.fins[hb]
			a.mu.Unlock()
			if fin {
				t.Fatal("edgeplane closed the heartbeat stream")
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d bytes of pings echoed", got, want)
			}
		}
	}
	echoed(4)
	for deadline := time.Now().Add(30 * time.Second); echoing(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the echo goroutine is still running 30 s after the handover")
		}
	}
	for i := range 10 {
		if err := a.send(rawFrame(frame.TypeData, 0, hb, []byte{5, 6, 7, byte(i)})); err != nil {
			t.Fatal(err)
		}
		echoed(8 + 4*i)
	}
	select {
	case <-a.ended:
		t.Fatal("the session ended")
	default:
	}
}

// echoing reports whether a session's echo goroutine is running in this process.
func echoing() bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("tunnel.(*session).echo("))
}
