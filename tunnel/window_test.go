package tunnel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// agentWindowMeter is an agent side's framer (muxado's own, as ngrok-go uses it) that follows
// the window edgeplane has granted it on each stream: agentWindow, plus the credit read, less
// the bytes written; peak is the most it ever had, credit all the credit it read.
type agentWindowMeter struct {
	frame.Framer
	mu     sync.Mutex
	ahead  map[frame.StreamId]int64
	peak   map[frame.StreamId]int64
	credit map[frame.StreamId]int64
	resets int
}

func newAgentWindowMeter() *agentWindowMeter {
	return &agentWindowMeter{ahead: map[frame.StreamId]int64{}, peak: map[frame.StreamId]int64{}, credit: map[frame.StreamId]int64{}}
}

func (m *agentWindowMeter) framer(r io.Reader, w io.Writer) frame.Framer {
	m.Framer = frame.NewFramer(r, w)
	return m
}

func (m *agentWindowMeter) window(id frame.StreamId) int64 {
	if v, ok := m.ahead[id]; ok {
		return v
	}
	return agentWindow
}

func (m *agentWindowMeter) ReadFrame() (frame.Frame, error) {
	f, err := m.Framer.ReadFrame()
	if w, ok := f.(*frame.WndInc); ok && err == nil {
		m.mu.Lock()
		v := m.window(w.StreamId()) + int64(w.WindowIncrement())
		m.ahead[w.StreamId()] = v
		m.peak[w.StreamId()] = max(m.peak[w.StreamId()], v)
		m.credit[w.StreamId()] += int64(w.WindowIncrement())
		m.mu.Unlock()
	}
	return f, err
}

func (m *agentWindowMeter) WriteFrame(f frame.Frame) error {
	m.mu.Lock()
	switch fr := f.(type) {
	case *frame.Data:
		m.ahead[fr.StreamId()] = m.window(fr.StreamId()) - int64(fr.Length())
	case *frame.Rst:
		m.resets++
	}
	m.mu.Unlock()
	return m.Framer.WriteFrame(f)
}

func (m *agentWindowMeter) peakOf(id frame.StreamId) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.peak[id], agentWindow)
}

// wideSession is a session pair over TLS: edgeplane's side with wide windows out of budget,
// growing when grow is set, and an agent side on muxado with its default 256 KiB window.
type wideSession struct {
	guard    *streamGuard
	srv, cli muxado.Session
	meter    *agentWindowMeter
}

func newWideSession(t *testing.T, budget *WindowBudget, grow bool) *wideSession {
	return newWideSessionAs(t, "a", budget, grow, nil)
}

// newWideSessionLink is newWideSession with edgeplane's end of the connection wrapped by link.
func newWideSessionLink(t *testing.T, budget *WindowBudget, grow bool, link func(net.Conn) net.Conn) *wideSession {
	return newWideSessionAs(t, "a", budget, grow, link)
}

// newWideSessionAs is newWideSessionLink for an agent of account.
func newWideSessionAs(t testing.TB, account string, budget *WindowBudget, grow bool, link func(net.Conn) net.Conn) *wideSession {
	sc, cc := tlsPair(t, link)
	ws := &wideSession{guard: newStreamGuard(), meter: newAgentWindowMeter()}
	ws.guard.wide, ws.guard.budget = true, budget
	ws.guard.shareAs(account)
	ws.guard.growWindows(grow)
	ws.srv = muxado.Server(sc, &muxado.Config{NewFramer: ws.guard.framer, MaxWindowSize: maxProxyWindow})
	ws.cli = muxado.Client(cc, &muxado.Config{NewFramer: ws.meter.framer})
	t.Cleanup(func() { ws.srv.Close(); ws.cli.Close(); ws.guard.endWide() })
	return ws
}

// open opens a stream from edgeplane's side as Dial does (writes held to the agent's window)
// and accepts it on the agent's.
func (ws *wideSession) open(t testing.TB) (net io.ReadWriteCloser, agent muxado.Stream, id frame.StreamId) {
	t.Helper()
	st, err := ws.srv.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte{0}); err != nil { // the SYN, as the stream's type is
		t.Fatal(err)
	}
	id = frame.StreamId(st.Id())
	w := ws.guard.sendWindowOf(id)
	if w == nil {
		t.Fatal("no window recorded for the stream edgeplane opened")
	}
	peer, err := ws.cli.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(peer, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return &limitedStream{Stream: st, w: w, g: ws.guard, id: id}, peer, id
}

// download has the agent write size random bytes on peer (32 KiB at a time, as a body copied
// through) and returns their digest.
func download(peer io.WriteCloser, size int) <-chan [32]byte {
	return downloadPaced(peer, burst{size: size})
}

// burst is a part of a download: size bytes, pausing pause after each every bytes; before, if
// set, is called before the part starts.
type burst struct {
	size, every int
	pause       time.Duration
	before      func()
}

// downloadPaced is download in parts, each paced as its burst says.
func downloadPaced(peer io.WriteCloser, parts ...burst) <-chan [32]byte {
	sum := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		buf := make([]byte, 32<<10)
		for _, p := range parts {
			if p.before != nil {
				p.before()
			}
			for sent := 0; sent < p.size; sent += len(buf) {
				_, _ = rand.Read(buf)
				h.Write(buf)
				if _, err := peer.Write(buf); err != nil {
					break
				}
				if p.every > 0 && (sent+len(buf))%p.every == 0 {
					time.Sleep(p.pause)
				}
			}
		}
		peer.Close()
		var s [32]byte
		copy(s[:], h.Sum(nil))
		sum <- s
	}()
	return sum
}

// readAll reads st to its end, pausing pause after each read of 32 KiB, and returns the digest.
func readAll(t *testing.T, st io.Reader, pause time.Duration) [32]byte {
	t.Helper()
	h := sha256.New()
	buf := make([]byte, 32<<10)
	for {
		n, err := st.Read(buf)
		h.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// TestProxyWindowGrowsWhileTheReaderKeepsUp: a download whose reader keeps up, and which the
// tuner therefore finds held by its window, gets credit past the agent's 256 KiB window, up to
// maxProxyWindow, out of the budget, and every byte arrives; the budget is whole again once the
// stream ends. An agent that is not known to keep such credit (growWindows false: the Rust
// clients) never gets more than its window. Growth is asserted for each window the tuner found
// too small (winheld_test.go): a download the CPU held instead is measured again, and a machine
// that never lets one be held by its window fails the test rather than passing it unmeasured.
func TestProxyWindowGrowsWhileTheReaderKeepsUp(t *testing.T) {
	for _, grow := range []bool{true, false} {
		for attempt := 1; ; attempt++ {
			budget := NewWindowBudget(DefaultWindowBudget)
			ws := newWideSession(t, budget, grow)
			st, peer, id := ws.open(t)
			want := download(peer, 24<<20)
			if got := readAll(t, st, 0); got != <-want {
				t.Fatalf("grow=%v: the download's digest differs", grow)
			}
			rec := ws.record(t, id)
			st.Close()
			peak := ws.agentPeak(t, id, rec)
			switch {
			case grow && rec.held > 0 && peak <= rec.grownPast():
				t.Errorf("a reader keeping up: the tuner found the stream held by a window of %d, yet the agent's window peaked at %d", rec.heldW, peak)
			case grow && peak > maxProxyWindow:
				t.Errorf("the agent's window peaked at %d, past the cap of %d", peak, maxProxyWindow)
			case !grow && (peak > agentWindow || rec.held > 0):
				t.Errorf("an agent not known to keep extra credit was granted %d, past %d", peak, agentWindow)
			}
			waitBudget(t, budget, 0)
			if !grow || rec.held > 0 || t.Failed() {
				break
			}
			neverHeld(t, attempt, "a reader keeping up")
		}
	}
}

// readSlowly reads n bytes of a download into h from st (stream id of ws) as a public client
// slower than the agent does: before each read of at most 32 KiB it waits until half the agent's
// window has arrived unread, so every read leaves much unread whatever the machine's speed; the
// download must hold more than n bytes. A fixed pause between reads does not: on a loaded
// machine the agent's writes through TLS and muxado can take longer than the pauses, and the
// reader then keeps up.
func readSlowly(t *testing.T, st io.Reader, ws *wideSession, id frame.StreamId, h io.Writer, n int) {
	t.Helper()
	buf := make([]byte, 32<<10)
	for got := 0; got < n; {
		for deadline := time.Now().Add(20 * time.Second); ; {
			ws.guard.mu.Lock()
			e, ok := ws.guard.wins[id]
			arrived := 0
			if ok {
				arrived = int(e.recv)
			}
			ws.guard.mu.Unlock()
			if !ok {
				t.Fatalf("after %d bytes read, the stream's window is gone", got)
			}
			if arrived-got >= agentWindow/2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d bytes read, %d arrived unread and no more within 20 s", got, arrived-got)
			}
			time.Sleep(time.Millisecond)
		}
		m, err := st.Read(buf[:min(len(buf), n-got)])
		h.Write(buf[:m])
		got += m
		if err != nil {
			t.Fatalf("after %d bytes read: %v", got, err)
		}
	}
}

// TestProxyWindowSlowReaderHoldsTheBase: a public client reading slowly from the start never
// makes edgeplane grant (or hold) more than the agent's 256 KiB on its stream, and takes
// nothing from the budget. The agent sends a megabyte more than the client reads slowly, so the
// client never catches up with the end of the download while it is measured (at the end any
// client catches up, having nothing more to wait for).
func TestProxyWindowSlowReaderHoldsTheBase(t *testing.T) {
	budget := NewWindowBudget(DefaultWindowBudget)
	ws := newWideSession(t, budget, true)
	st, peer, id := ws.open(t)
	const slow, rest = 3 << 20, 1 << 20
	want := download(peer, slow+rest)
	var maxUsed int64
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			maxUsed = max(maxUsed, budget.Used())
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	h := sha256.New()
	readSlowly(t, st, ws, id, h, slow)
	close(stop)
	<-polled
	if peak := ws.meter.peakOf(id); peak > agentWindow {
		t.Errorf("a slow reader: the agent's window peaked at %d, past %d", peak, agentWindow)
	}
	if maxUsed != 0 {
		t.Errorf("a slow reader's stream took %d bytes of the budget", maxUsed)
	}
	if _, err := io.Copy(h, st); err != nil {
		t.Fatal(err)
	}
	if got := <-want; !bytes.Equal(h.Sum(nil), got[:]) {
		t.Fatal("the download's digest differs")
	}
}

// TestProxyWindowBudgetSharedByAccounts: two agents (accounts A and B) download through one
// budget that covers a single grown window. A's fast download takes it; B's download still gets
// the agent's full 256 KiB window back and completes, and the budget is never overdrawn. A takes
// budget only once the tuner finds its stream held by its window: a download of A's that the CPU
// held instead is measured again (winheld_test.go), so the test never passes without B having
// run beside A's grown window.
func TestProxyWindowBudgetSharedByAccounts(t *testing.T) {
	const limit = maxProxyWindow - agentWindow
	for attempt := 1; ; attempt++ {
		budget := NewWindowBudget(limit)
		a := newWideSessionAs(t, "A", budget, true, nil)
		b := newWideSessionAs(t, "B", budget, true, nil)
		stA, peerA, idA := a.open(t)
		wantA := download(peerA, 32<<20)
		var sumA [32]byte
		var recA tuneRecord
		doneA := make(chan struct{})
		go func() { defer close(doneA); sumA = readAll(t, stA, 0); recA = a.record(t, idA) }()
		// B starts once A has taken budget.
		if !tookBudget(budget, doneA) {
			stA.Close()
			if recA.held > 0 {
				t.Fatalf("the tuner found A's stream held by its window %d times, yet it took no budget (at most %d)", recA.held, recA.chargedMost)
			}
			neverHeld(t, attempt, "account A's download")
			continue
		}
		stB, peerB, idB := b.open(t)
		wantB := download(peerB, 4<<20)
		var over bool
		stop := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				over = over || budget.Used() > limit
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		if got := readAll(t, stB, 0); got != <-wantB {
			t.Fatal("B's download's digest differs")
		}
		<-doneA
		close(stop)
		<-polled
		if sumA != <-wantA {
			t.Fatal("A's download's digest differs")
		}
		if over {
			t.Errorf("the budget of %d bytes was overdrawn", limit)
		}
		// Once B's client read everything, edgeplane grants B its whole base window again (less
		// the credit it gathers before sending), whatever A holds.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
			b.meter.mu.Lock()
			peakB := b.meter.peak[idB]
			b.meter.mu.Unlock()
			if peakB >= agentWindow-proxyCreditBatch {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B's window peaked at %d, below the base %d", peakB, agentWindow)
			}
		}
		stA.Close()
		stB.Close()
		waitBudget(t, budget, 0)
		return
	}
}

// TestProxyWindowUploadHeldToTheAgentsWindow: with muxado's buffers at maxProxyWindow,
// edgeplane's own writes on a proxy stream still wait for the agent's credit, so an agent
// reading slowly (its buffer is 256 KiB) never sees more than its window and never resets the
// stream for overrunning it.
func TestProxyWindowUploadHeldToTheAgentsWindow(t *testing.T) {
	ws := newWideSession(t, NewWindowBudget(DefaultWindowBudget), true)
	st, peer, _ := ws.open(t)
	body := make([]byte, 2<<20)
	_, _ = rand.Read(body)
	errc := make(chan error, 1)
	go func() {
		_, err := st.Write(body)
		errc <- err
	}()
	got := make([]byte, 0, len(body))
	buf := make([]byte, 16<<10)
	for len(got) < len(body) {
		n, err := peer.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("the agent's read failed after %d bytes: %v", len(got), err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("the upload arrived altered")
	}
	// The stream is still whole: the agent answers on it and edgeplane reads the answer.
	if _, err := peer.Write([]byte("done")); err != nil {
		t.Fatalf("the agent's answer: %v", err)
	}
	answer := make([]byte, 4)
	if _, err := io.ReadFull(st, answer); err != nil || string(answer) != "done" {
		t.Fatalf("edgeplane read %q, %v after the upload", answer, err)
	}
	ws.meter.mu.Lock()
	resets := ws.meter.resets
	ws.meter.mu.Unlock()
	if resets != 0 {
		t.Fatalf("the agent reset %d streams for overrunning its window", resets)
	}
}

// TestProxyWindowAgentOverrunEndsSession: an agent that sends more than edgeplane granted on a
// stream edgeplane opened (here one that assumes a 1 MiB window) ends the session with a
// flow-control error, since muxado's larger buffer no longer refuses it.
func TestProxyWindowAgentOverrunEndsSession(t *testing.T) {
	sc, cc := tlsPair(t, nil)
	guard := newStreamGuard()
	guard.wide, guard.budget = true, NewWindowBudget(DefaultWindowBudget)
	srv := muxado.Server(sc, &muxado.Config{NewFramer: guard.framer, MaxWindowSize: maxProxyWindow})
	cli := muxado.Client(cc, &muxado.Config{MaxWindowSize: 1 << 20})
	defer srv.Close()
	defer cli.Close()
	st, err := srv.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	peer, err := cli.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = peer.Write(make([]byte, 512<<10)) }()
	select {
	case <-waitDead(srv):
	case <-time.After(20 * time.Second): // the project's least deadline for a condition
		t.Fatal("the session outlived an agent overrunning its window")
	}
	if e := guard.tripped.Load(); e == nil || e.code != muxado.FlowControlError {
		t.Fatalf("ended with %v, want a flow-control error", e)
	}
}

// waitDead closes the returned channel when the session has ended.
func waitDead(s muxado.Session) <-chan struct{} {
	c := make(chan struct{})
	go func() { _, _, _ = s.Wait(); close(c) }()
	return c
}

// TestGrowableAgents: the user agents of the clients checked to use credit beyond their window
// grow; the Node SDK's (ngrok-rust) and unknown ones do not.
func TestGrowableAgents(t *testing.T) {
	for ua, want := range map[string]bool{
		"ngrok-go/1.12.1": true, "ngrok-go/2.1.1": true, "ngrok/2": true, "ngrok/2.3.41": true,
		"ngrok-javascript/1.7.0 ngrok-rust/0.18.0": false, "ngrok-rust/0.18.0": false,
		"ngrok/3.18.4": false, "": false, "ngrok-gopher": false,
	} {
		if got := growableAgent(ua); got != want {
			t.Errorf("growableAgent(%q) = %v, want %v", ua, got, want)
		}
	}
}
