package agents

import (
	"net"
	"sync"
	"testing"
	"time"
)

// delayRelay is a TCP relay on a loopback port that forwards each connection to target and
// delays the bytes of each direction by half a round trip, as a wide-area link between an
// agent and edgeplane would (netem is not available in the test's container). Each direction
// holds at most relayQueue chunks of up to 64 KiB in flight; past that it stops reading, and
// TCP's own flow control holds the sender, as a full link does.
type delayRelay struct {
	addr    string
	oneWay  time.Duration
	ln      net.Listener
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	pumping sync.WaitGroup
}

// relayQueue bounds the chunks in flight in one direction of one connection: 1,024 of 64 KiB,
// 64 MiB, beyond any window an agent or edgeplane grants.
const relayQueue = 1024

// newDelayRelay starts a relay to target with round trip rtt; it ends with the test.
func newDelayRelay(t *testing.T, target string, rtt time.Duration) *delayRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &delayRelay{addr: ln.Addr().String(), oneWay: rtt / 2, ln: ln, conns: map[net.Conn]struct{}{}}
	r.pumping.Add(1)
	go r.accept(target)
	t.Cleanup(r.close)
	return r
}

func (r *delayRelay) accept(target string) {
	defer r.pumping.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !r.track(c, up) {
			return
		}
		r.pumping.Add(2)
		go r.pipe(c, up)
		go r.pipe(up, c)
	}
}

// track records a relayed pair so close can end it; false when the relay is closed.
func (r *delayRelay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

type relayChunk struct {
	due time.Time
	b   []byte
}

// pipe carries from to to, each chunk oneWay after it was read; from's end (or an error) half
// closes to once every earlier chunk is written.
func (r *delayRelay) pipe(from, to net.Conn) {
	defer r.pumping.Done()
	q := make(chan relayChunk, relayQueue)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := from.Read(b)
			if n > 0 {
				q <- relayChunk{due: time.Now().Add(r.oneWay), b: b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.due))
		if _, err := to.Write(c.b); err != nil {
			from.Close()
			for range q { // let the reader end
			}
			return
		}
	}
	if tc, ok := to.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// close ends the relay and every connection it carries, and waits for its goroutines.
func (r *delayRelay) close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.pumping.Wait()
}
