package tunnel

import (
	"io"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// creditCounter is the agent side's framer (muxado's own, as ngrok-go uses it) counting the
// window increments it reads, by stream, and the credit they grant.
type creditCounter struct {
	frame.Framer
	mu     sync.Mutex
	frames map[frame.StreamId]int
	credit map[frame.StreamId]uint32
}

func (c *creditCounter) ReadFrame() (frame.Frame, error) {
	f, err := c.Framer.ReadFrame()
	if w, ok := f.(*frame.WndInc); ok && err == nil {
		c.mu.Lock()
		c.frames[w.StreamId()]++
		c.credit[w.StreamId()] += w.WindowIncrement()
		c.mu.Unlock()
	}
	return f, err
}

func (c *creditCounter) counts(id frame.StreamId) (int, uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames[id], c.credit[id]
}

// TestProxyStreamCreditBatched: on a stream edgeplane opens, an agent answering with many small
// writes (responses on a kept-alive proxy stream) gets its window back in a few increments of
// proxyCreditBatch instead of one per read; an agent sending more than its window in one go
// (a bulk response) is never held back; and the credit held for a stream the agent has ended
// is dropped. With muxado's own crediting, the first part reads one increment per response.
func TestProxyStreamCreditBatched(t *testing.T) {
	sc, cc := tlsPair(t, nil)
	guard := newStreamGuard()
	srv := muxado.Server(sc, &muxado.Config{NewFramer: guard.framer})
	counter := &creditCounter{frames: map[frame.StreamId]int{}, credit: map[frame.StreamId]uint32{}}
	cli := muxado.Client(cc, &muxado.Config{NewFramer: func(r io.Reader, w io.Writer) frame.Framer {
		counter.Framer = frame.NewFramer(r, w)
		return counter
	}})
	defer srv.Close()
	defer cli.Close()

	// edgeplane opens a stream (a proxy stream); the agent answers 400 small responses, each
	// read by edgeplane before the next is sent.
	const responses, size = 400, 200
	st, err := srv.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	agent, err := cli.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 18)
	if _, err := io.ReadFull(agent, head); err != nil {
		t.Fatal(err)
	}
	resp, got := make([]byte, size), make([]byte, size)
	for i := range responses {
		if _, err := agent.Write(resp); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if _, err := io.ReadFull(st, got); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
	}
	id := frame.StreamId(st.Id())
	// The last increment written may still be on its way: wait until the credit is what the
	// batches account for.
	want := uint32(responses*size) / proxyCreditBatch * proxyCreditBatch
	var frames int
	var credit uint32
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if frames, credit = counter.counts(id); credit >= want {
			break
		}
	}
	t.Logf("%d responses of %d bytes: %d window increments granting %d bytes", responses, size, frames, credit)
	if max := responses * size / proxyCreditBatch; frames > max || credit < want {
		t.Errorf("%d increments granting %d bytes, want at most %d granting at least %d", frames, credit, max, want)
	}

	// A response of four windows' bytes in one write reaches edgeplane whole: the credit held
	// never holds the agent back.
	big := make([]byte, 4*agentWindow)
	errc := make(chan error, 1)
	go func() { _, err := agent.Write(big); errc <- err }()
	if _, err := io.ReadFull(st, big); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's large write never completed")
	}

	// The agent ends the stream: the credit held for it is dropped.
	agent.Close()
	if _, err := io.ReadAll(st); err != nil {
		t.Fatal(err)
	}
	st.Close()
	guard.mu.Lock()
	held := len(guard.credits)
	guard.mu.Unlock()
	if held != 0 {
		t.Errorf("credit still held for %d streams after the agent ended its stream", held)
	}
}
