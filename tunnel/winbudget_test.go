package tunnel

import (
	"io"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2/frame"

	"github.com/edgeplane/edgeplane/internal/memtest"
)

// TestWindowBudgetShares: an account alone may hold half the budget, two accounts a third each,
// and one above its share after another started holding is told its excess; an account's
// entry goes when it holds nothing, and the peaks are kept.
func TestWindowBudgetShares(t *testing.T) {
	const limit = 12 << 20
	b := NewWindowBudget(limit)
	if got := b.reserve("A", limit); got != limit/2 {
		t.Fatalf("account A alone took %d, want half the budget (%d)", got, limit/2)
	}
	if got := b.reserve("A", 1); got != 0 {
		t.Fatalf("account A at its share took %d more", got)
	}
	if over := b.over("A"); over != 0 {
		t.Fatalf("account A alone at its share: %d over", over)
	}
	if got := b.reserve("B", limit); got != limit/3 {
		t.Fatalf("account B beside A took %d, want a third (%d)", got, limit/3)
	}
	if over := b.over("A"); over != limit/2-limit/3 {
		t.Fatalf("account A with B holding: %d over, want %d", over, limit/2-limit/3)
	}
	if got := b.reserve("C", limit); got != limit-limit/2-limit/3 {
		t.Fatalf("account C took %d, want what is left (%d)", got, limit-limit/2-limit/3)
	}
	if got := b.reserve("", 0); got != 0 {
		t.Fatalf("a reservation of nothing took %d", got)
	}
	b.release("A", limit/2)
	b.release("B", limit/3)
	if st := b.Stats(); st.Used != limit-limit/2-limit/3 || st.Accounts != 1 || st.Peak != limit || st.PeakAccount != limit/2 {
		t.Fatalf("after A and B returned theirs: %+v", st)
	}
	b.release("C", limit-limit/2-limit/3)
	if st := b.Stats(); st.Used != 0 || st.Accounts != 0 {
		t.Fatalf("after every account returned its bytes: %+v", st)
	}
	if got := NewWindowBudget(0).reserve("A", 1<<20); got != 0 {
		t.Fatalf("a budget of 0 gave %d", got)
	}
	var none *WindowBudget
	if none.reserve("A", 1) != 0 || none.over("A") != 0 {
		t.Fatal("a nil budget gave bytes")
	}
	none.release("A", 1)
}

// waitBudget waits for the budget's use to come down to want (credit still held when a stream
// ends is returned as the guard learns of the end).
func waitBudget(t *testing.T, b *WindowBudget, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // the project's least deadline for a condition
	for b.Used() != want {
		if time.Now().After(deadline) {
			t.Fatalf("budget in use: %d bytes, want %d", b.Used(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// downloadUntil has the agent write on peer as fast as edgeplane takes it until stop is closed.
func downloadUntil(peer io.WriteCloser, stop <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-stop:
			peer.Close()
			return
		default:
		}
		if _, err := peer.Write(buf); err != nil {
			return
		}
	}
}

// TestProxyWindowAccountShare: account B's three fast downloads want more than the whole budget;
// they take only B's share (half, alone), so account A's download, started while B's run, still
// grows its window out of the room left, up to its own share. With the budget first come first
// served, B's streams took all of it and A's window stayed at 256 KiB. A's window grows only if
// the tuner finds A's stream held by its window: a download of A's the CPU held instead is
// measured again (winheld_test.go), and B's downloads, which run until told to stop, have 30 s
// to grow.
func TestProxyWindowAccountShare(t *testing.T) {
	const limit = 2 << 20
	budget := NewWindowBudget(limit)
	b := newWideSessionAs(t, "B", budget, true, nil)
	pause, stop := fastDownloads(t, b, 3)
	defer func() { stop(); waitBudget(t, budget, 0) }()
	// Once B's streams grow, give them time to take more than their share if they could (with
	// the budget first come first served they take all of it), then B's clients stop reading,
	// which keeps what B's streams hold as it is.
	waitHeld(t, budget, b, "B", agentWindow)
	for more := time.Now().Add(3 * time.Second); time.Now().Before(more) && budget.heldBy("B") < limit-agentWindow/2; {
		time.Sleep(100 * time.Microsecond)
	}
	pause()
	heldB := budget.heldBy("B")

	for attempt := 1; ; attempt++ {
		a := newWideSessionAs(t, "A", budget, true, nil)
		stA, peerA, idA := a.open(t)
		want := download(peerA, 32<<20)
		if got := readAll(t, stA, 0); got != <-want {
			t.Fatal("account A's download's digest differs")
		}
		rec := a.record(t, idA)
		stA.Close()
		peak := a.agentPeak(t, idA, rec)
		t.Logf("attempt %d: account B held %d, account A at most %d (held by its window %d times), its window peaked at %d; budget %+v", attempt, heldB, rec.chargedMost, rec.held, peak, budget.Stats())
		if st := budget.Stats(); st.Peak > limit || st.PeakAccount > limit/2 {
			t.Errorf("the budget of %d held %d at most, one account %d (its share alone is %d)", limit, st.Peak, st.PeakAccount, limit/2)
		}
		if rec.held == 0 {
			neverHeld(t, attempt, "account A's download beside B's")
			continue
		}
		// The first window the tuner found too small doubled: with B holding all but what the
		// wait above leaves, A could not have had it.
		if rec.chargedMost < agentWindow {
			t.Errorf("account A's fast download beside B's held at most %d of the budget, want at least %d (its share is %d)", rec.chargedMost, agentWindow, limit/3)
		}
		if peak <= agentWindow {
			t.Errorf("account A's fast download beside B's: its window never grew past %d", peak)
		}
		return
	}
}

// TestProxyWindowAccountAboveItsShareShrinks: a stream of account B holding B's share alone
// (half the budget) in a steady download; once another account holds some, B's share is a
// third, and as B's client reads, its stream's hold comes down to that third and stays there,
// while the stream keeps getting credit. Without the cut B kept its half as long as its stream
// ran, leaving a third account less than its share.
func TestProxyWindowAccountAboveItsShareShrinks(t *testing.T) {
	const limit = 2 << 20
	budget := NewWindowBudget(limit)
	g, e := grownStream(t, budget, "B", limit)
	if e.charged != limit/2 {
		t.Fatalf("account B alone reserved %d, want %d", e.charged, limit/2)
	}
	if got := budget.reserve("C", 1); got != 1 { // another account's stream growing
		t.Fatalf("account C took %d", got)
	}
	// The agent sends 4 MiB in frames of 16 KiB, the client reading each as it comes.
	var credit uint64
	for range 256 {
		agentSends(t, g, 16<<10)
		credit += clientReads(t, g, 16<<10)
	}
	if held := budget.heldBy("B"); held > limit/3 {
		t.Errorf("account B holds %d after its client read 4 MiB beside another account, above its share of %d", held, limit/3)
	}
	if credit < 3<<20 {
		t.Errorf("the stream got %d bytes of credit for 4 MiB read: it stalled", credit)
	}
}

// TestProxyWindowChargedForItsBuffersPeak: a grown stream whose client stalled while the agent
// sent its whole window, and whose window then shrank (its account came above its share), stays
// charged for what its buffer held until it closes, however much its client reads after: muxado's
// buffer keeps that capacity. Once closed, it returns everything.
func TestProxyWindowChargedForItsBuffersPeak(t *testing.T) {
	const limit = 2 << 20
	budget := NewWindowBudget(limit)
	g, e := grownStream(t, budget, "B", limit)
	held := int64(e.w) // the agent sends all its credit; the client reads none of it
	for sent := int64(0); sent < held; sent += 16 << 10 {
		agentSends(t, g, 16<<10)
	}
	if got := budget.reserve("C", 1); got != 1 {
		t.Fatalf("account C took %d", got)
	}
	for read := int64(0); read < held; read += 16 << 10 { // the response ends: nothing more comes
		clientReads(t, g, 16<<10)
	}
	if got, want := budget.heldBy("B"), held-agentWindow; got != want {
		t.Errorf("account B's drained stream holds %d of the budget, want %d (its buffer held %d)", got, want, held)
	}
	rst := new(frame.Rst)
	if err := rst.Pack(grownID, 0); err != nil {
		t.Fatal(err)
	}
	g.wroteWide(rst)
	if got := budget.heldBy("B"); got != 0 {
		t.Errorf("account B's closed stream holds %d of the budget", got)
	}
}

// grownID is the stream grownStream opens.
const grownID = frame.StreamId(2)

// grownStream is a guard of account's session with one stream edgeplane opened, as a fast
// download left it: its window 256 KiB plus what the budget gave it of want, granted ahead of
// what edgeplane read, every byte the agent sent read.
func grownStream(t *testing.T, budget *WindowBudget, account string, want int64) (*streamGuard, *proxyWin) {
	t.Helper()
	g := newStreamGuard()
	g.wide, g.budget = true, budget
	g.shareAs(account)
	syn := new(frame.Data)
	if err := syn.Pack(grownID, []byte{0}, false, true); err != nil {
		t.Fatal(err)
	}
	g.wroteWide(syn)
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.wins[grownID]
	e.charged = budget.reserve(account, want)
	e.w = agentWindow + uint64(e.charged)
	e.granted = e.read + e.w
	return g, e
}

// agentSends has the agent send n bytes on grownID.
func agentSends(t *testing.T, g *streamGuard, n int) {
	t.Helper()
	data := new(frame.Data)
	if err := data.Pack(grownID, make([]byte, n), false, false); err != nil {
		t.Fatal(err)
	}
	if err := g.readWide(data); err != nil {
		t.Fatal(err)
	}
}

// clientReads has edgeplane's side read n bytes of grownID (muxado's credit for them) and
// returns the credit the guard sends the agent.
func clientReads(t *testing.T, g *streamGuard, n int) uint64 {
	t.Helper()
	wnd := new(frame.WndInc)
	if err := wnd.Pack(grownID, uint32(n)); err != nil {
		t.Fatal(err)
	}
	if out, ok := g.wroteWide(wnd).(*frame.WndInc); ok && out != nil {
		return uint64(out.WindowIncrement())
	}
	return 0
}

// fastDownloads opens n streams on ws, each carrying a download as fast as edgeplane reads it:
// after pause, edgeplane's side stops reading (the public clients stall); after stop, the
// downloads end.
func fastDownloads(t *testing.T, ws *wideSession, n int) (pause, stop func()) {
	paused, done := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		st, peer, _ := ws.open(t)
		go downloadUntil(peer, done)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Close()
			buf := make([]byte, 32<<10)
			for {
				select {
				case <-paused:
					<-done
					_, _ = io.Copy(io.Discard, st)
					return
				default:
				}
				if _, err := st.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(paused) }) }, func() { once.Do(func() { close(paused) }); close(done); wg.Wait() }
}

// waitHeld waits for account (of session ws) to hold at least n of the budget. Its downloads
// run until stopped, so waiting longer is measuring again: after 30 s, it fails saying whether
// the tuner ever found one of ws's streams held by its window (the machine may never have let
// it), since only such a stream takes budget.
func waitHeld(t *testing.T, b *WindowBudget, ws *wideSession, account string, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.heldBy(account) < n {
		if time.Now().After(deadline) {
			held := 0
			ws.guard.mu.Lock()
			for _, e := range ws.guard.wins {
				held += e.held
			}
			ws.guard.mu.Unlock()
			if held == 0 {
				t.Fatalf("in 30 s the tuner never found one of account %s's fast downloads held by its window: the machine's CPU, not the window, limited them, so the machine never let the test measure growth (or the tuner no longer recognizes a stream held by its window); %+v", account, b.Stats())
			}
			t.Fatalf("account %s's fast downloads, found held by their windows %d times, never held %d: %+v", account, held, n, b.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// BenchmarkDrainedStreamHeap reports the heap a drained proxy stream keeps while it stays open
// (as in the proxy's idle pool): its download grew the window (or not, fixed-256KiB), its client
// stalled long enough for the agent to fill the window, then read everything. muxado's buffer
// keeps the capacity it grew to, which is why a stream stays charged for its buffer's peak.
//
//	go test -run XXX -bench DrainedStreamHeap -benchtime 8x ./tunnel/
func BenchmarkDrainedStreamHeap(b *testing.B) {
	for _, grow := range []bool{false, true} {
		name := "fixed-256KiB"
		if grow {
			name = "autotuned"
		}
		b.Run(name, func(b *testing.B) {
			ws := newWideSessionAs(b, "a", NewWindowBudget(DefaultWindowBudget), grow, nil)
			var open []io.Closer
			base := memtest.LiveHeap()
			buf := make([]byte, 32<<10)
			for range b.N {
				st, peer, _ := ws.open(b)
				done := download(peer, 24<<20)
				for read := 0; read < 16<<20; {
					n, err := st.Read(buf)
					read += n
					if err != nil {
						b.Fatal(err)
					}
				}
				time.Sleep(300 * time.Millisecond) // the agent fills the window
				for {
					if _, err := st.Read(buf); err != nil {
						break
					}
				}
				<-done
				open = append(open, st)
			}
			held := memtest.LiveHeap()
			for _, st := range open {
				st.Close()
			}
			b.ReportMetric(float64(int64(held)-int64(base))/float64(b.N)/1024, "KiB-kept/stream")
		})
	}
}
