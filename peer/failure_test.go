package peer

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
)

// proxy is a TCP proxy between two replicas that a test can freeze (it stops carrying bytes
// but keeps the connections open, as a peer whose process hangs) or kill (every connection
// reset, as when the kernel closes the sockets of a process killed with SIGKILL).
type proxy struct {
	ln     net.Listener
	target string
	frozen chan struct{}
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  []*net.TCPConn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, frozen: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.kill()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c.(*net.TCPConn), up.(*net.TCPConn))
			p.mu.Unlock()
			go p.carry(up, c)
			go p.carry(c, up)
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// carry copies src to dst until either ends or the proxy freezes.
func (p *proxy) carry(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			<-p.done
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *proxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

// kill resets every connection: a close with SO_LINGER 0 sends RST.
func (p *proxy) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.SetLinger(0)
		c.Close()
	}
}

// streamUntilError keeps a stream busy both ways (echo) until it fails, and returns the error.
func streamUntilError(c net.Conn) error {
	errc := make(chan error, 2)
	go func() {
		chunk := make([]byte, 8<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		_, err := io.Copy(io.Discard, c)
		if err == nil {
			err = io.EOF
		}
		errc <- err
	}()
	return <-errc
}

// TestPeerGoneMidStream: when the holding replica goes away mid-stream, by closing (its link's
// GOAWAY and connections closed) or by being killed (its sockets reset), the dialler's streams
// end with an error (not a clean end of stream) at once, the link is down, and the next dial
// fails at once; the holder's side ends its agents' streams.
func TestPeerGoneMidStream(t *testing.T) {
	for _, how := range []string{"closed", "killed"} {
		t.Run(how, func(t *testing.T) {
			ca := newTestCA(t)
			a, b := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{})
			addr := b.addr
			var px *proxy
			if how == "killed" {
				px = newProxy(t, b.addr)
				addr = px.addr()
			}
			var streams []net.Conn
			for range 4 {
				c, err := a.link.Dial(testCtx(t), b.id, addr, req("tn_echo"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				streams = append(streams, c)
			}
			errs := make(chan error, len(streams))
			for _, c := range streams {
				go func() { errs <- streamUntilError(c) }()
			}
			eventually(t, "bytes to flow", func() bool { return a.stats(b.id).BytesIn > 1<<20 })
			if how == "killed" {
				px.kill()
			} else {
				b.link.Close()
			}
			within(t, "the streams' end", func() {
				for range streams {
					if err := <-errs; err == nil || errors.Is(err, io.EOF) {
						t.Errorf("a stream ended with %v, want an error", err)
					}
				}
			})
			eventually(t, "A to see the link down", func() bool { return !a.link.Up(b.id) })
			if _, err := a.link.Dial(testCtx(t), b.id, addr, req("tn_echo")); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("dial after: %v", err)
			}
			if how == "killed" {
				eventually(t, "B to end the agents' streams", func() bool {
					s := b.stats(a.id)
					return s.Inbound == 0 && s.StreamsIn == 0
				})
			}
		})
	}
}

// TestStalledPeerIsCut: a peer that stops answering (its connection open, nothing carried) is
// declared down after the heartbeat timeout and its streams fail; a stream to another peer
// carries on meanwhile, and the stalled peer drops the link too.
func TestStalledPeerIsCut(t *testing.T) {
	ca := newTestCA(t)
	log := &logBuffer{}
	a := newNode(t, ca, "rep_a", nodeOpts{log: log})
	b, c := newNode(t, ca, "rep_b", nodeOpts{}), newNode(t, ca, "rep_c", nodeOpts{})
	px := newProxy(t, b.addr)
	toB, err := a.link.Dial(testCtx(t), b.id, px.addr(), req("tn_echo"))
	if err != nil {
		t.Fatal(err)
	}
	defer toB.Close()
	toC := a.dial(t, c, "tn_echo")
	errB := make(chan error, 1)
	go func() { errB <- streamUntilError(toB) }()
	eventually(t, "bytes to flow to B", func() bool { return a.stats(b.id).BytesIn > 1<<20 })
	px.freeze()
	within(t, "the stream to B to fail", func() {
		if err := <-errB; err == nil || errors.Is(err, io.EOF) {
			t.Errorf("the stream to B ended with %v", err)
		}
	})
	if a.link.Up(b.id) || !a.link.Up(c.id) {
		t.Fatalf("up: B %v, C %v", a.link.Up(b.id), a.link.Up(c.id))
	}
	eventually(t, "A to log why", func() bool { return log.has("nothing heard from the peer") })
	if err := echoCheck(toC, 1<<20, 3); err != nil {
		t.Fatalf("the stream to C: %v", err)
	}
	eventually(t, "B to drop A's link", func() bool {
		s := b.stats(a.id)
		return s.Inbound == 0 && s.StreamsIn == 0
	})
	if _, err := a.link.Dial(testCtx(t), b.id, px.addr(), req("tn_echo")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dial to the stalled peer: %v", err)
	}
}

// TestSetPeers: the link keeps a link up to every peer SetPeers names, without a Dial; dials a
// peer that comes back on its own (after its backoff); and closes the idle link of a peer no
// longer named.
func TestSetPeers(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{})
	a.link.SetPeers(map[string]string{b.id: b.addr, a.id: a.addr})
	eventually(t, "the link to B", func() bool { return a.link.Up(b.id) })
	if s := a.link.Stats(); len(s) != 1 || s[0].Replica != b.id {
		t.Fatalf("stats: %+v (A's own id must be ignored)", s)
	}
	b.link.Close()
	eventually(t, "the link to B down", func() bool { return !a.link.Up(b.id) })

	// B comes back on the same address.
	ident, err := NewIdentity(ca.cert, ca.key, b.id)
	if err != nil {
		t.Fatal(err)
	}
	b2log := &logBuffer{}
	b2, err := newLink(Config{Identity: ident, Accept: b.agents.accept,
		Logger: slog.New(slog.NewTextHandler(b2log, nil))}, fastTiming, Window)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b2.Serve(ln) }()
	eventually(t, "the link to B again", func() bool { return a.link.Up(b.id) })
	c, err := a.link.Dial(testCtx(t), b.id, b.addr, req("tn_echo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := echoCheck(c, 1000, 4); err != nil {
		t.Fatal(err)
	}

	// Not named any more: the link is closed once its stream is.
	a.link.SetPeers(map[string]string{})
	if !a.link.Up(b.id) {
		t.Fatal("the link to B was closed under its stream")
	}
	c.Close()
	eventually(t, "the idle link to B closed", func() bool { return !a.link.Up(b.id) })
	eventually(t, "B to see it closed", func() bool {
		for _, s := range b2.Stats() {
			if s.Replica == a.id {
				return s.Inbound == 0
			}
		}
		return false
	})
	eventually(t, "B to log the link closed", func() bool { return b2log.has("peer link closed by the peer") })
	if b2log.has("level=WARN") {
		t.Errorf("B's log of a retired link:\n%s", b2log)
	}
	if s := a.stats(b.id); !strings.HasPrefix(s.Addr, "127.0.0.1:") || s.ForwardedOut != 1 {
		t.Fatalf("stats: %+v", s)
	}
}

// A dial that finds the link marked down by its own end (watch marks it so without a reason
// when the session simply ended) fails as unavailable, naming the link going down, instead of
// reading a reason that is not there.
func TestDialWhileLinkGoesDownWithoutReason(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{})
	c := a.dial(t, b, "tn_echo")
	defer c.Close()
	a.link.mu.Lock()
	o := a.link.peers[b.id].out
	a.link.mu.Unlock()
	if o == nil {
		t.Fatal("no link to B after a dial")
	}
	o.down.Store(true) // as watch does at a session's end, before any reason is known
	_, err := a.link.Dial(testCtx(t), b.id, b.addr, req("tn_echo"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "going down") {
		t.Fatalf("dial over a link going down: %v, want ErrUnavailable naming it", err)
	}
}
