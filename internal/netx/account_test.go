package netx

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testnet"
)

// accountListener serves l.ListenAccount on a real socket: each connection is carried by Pipe
// (idle as given) to a connection of its own "agent", which accepts it and never reads or
// answers. It returns the address and a channel that yields one value per pipe that ended.
func accountListener(t *testing.T, l *Limiter, account string, idle time.Duration) (string, chan struct{}) {
	t.Helper()
	agent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	go func() {
		for {
			c, err := agent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held, never read from nor written to
		}
	}()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.ListenAccount(raw, account)
	t.Cleanup(func() { ln.Close() })
	ended := make(chan struct{}, 64)
	go func() {
		_ = Serve(ln, func(c net.Conn) {
			up, err := net.Dial("tcp", agent.Addr().String())
			if err != nil {
				c.Close()
				return
			}
			Pipe(c, up, idle)
			ended <- struct{}{}
		})
	}()
	return raw.Addr().String(), ended
}

// TestAccountListenerLimit: with PerAccount 2 and Max 2, account B's listener holds two
// connections its agent never answers, every slot; B's third is closed as soon as it is
// accepted, instead of waiting for a slot (or closing someone else's). With a slot more, A's
// listener admits a client beside them. Once a B client closes, B is admitted again.
func TestAccountListenerLimit(t *testing.T) {
	for _, max := range []int{2, 3} {
		l := NewLimiter(Limits{Max: max, PerAccount: 2, Evict: true})
		bAddr, _ := accountListener(t, l, "B", 0)
		aAddr, _ := accountListener(t, l, "A", 0)
		b1, _ := dial(t, bAddr)
		dial(t, bAddr)
		waitFor(t, "B's two connections to count", func() bool { return l.AccountConns("B") == 2 })
		b3, r3 := dial(t, bAddr)
		if !closedByServer(b3, r3) {
			t.Fatalf("max %d: B's third connection, over its account's limit, was not closed", max)
		}
		if st := l.Stats(); st.AccountRefused != 1 || st.Evicted != 0 || st.Open != 2 {
			t.Fatalf("max %d: stats %+v, want 1 refused for its account, none evicted, 2 open", max, st)
		}
		if max == 3 {
			dial(t, aAddr)
			waitFor(t, "A's connection to count", func() bool { return l.AccountConns("A") == 1 })
		}
		b1.Close()
		waitFor(t, "B's closed client to leave its count", func() bool { return l.AccountConns("B") == 1 })
		dial(t, bAddr)
		waitFor(t, "B admitted again", func() bool { return l.AccountConns("B") == 2 })
	}
}

// TestClaim: connections routed to an account count against it (Claim) up to PerAccount; a
// connection moves between accounts, and leaves its account when it goes idle between
// requests or closes.
func TestClaim(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{PerAccount: 1})
	ln := l.Listen(f)
	c1, _ := accept(t, f, ln, from("10.0.0.1"))
	c2, _ := accept(t, f, ln, from("10.0.0.2"))
	if !Claim(c1, "A") || !Claim(c1, "A") {
		t.Fatal("A's first connection refused")
	}
	if Claim(c2, "A") {
		t.Fatal("a second connection for A admitted beyond PerAccount 1")
	}
	if !Claim(c2, "B") || Claim(c1, "B") {
		t.Fatal("B: its first connection refused, or A's connection moved into B beyond its limit")
	}
	if l.AccountConns("A") != 1 || l.AccountConns("B") != 1 || l.Stats().AccountRefused != 2 {
		t.Fatalf("A %d, B %d, stats %+v", l.AccountConns("A"), l.AccountConns("B"), l.Stats())
	}
	ConnState(c1, http.StateIdle)
	if l.AccountConns("A") != 0 {
		t.Fatal("an idle connection still counts against its account")
	}
	c2.Close()
	if l.AccountConns("B") != 0 || !Claim(c1, "B") {
		t.Fatal("a closed connection still counts against its account")
	}
	if Claim(c2, "A") && l.AccountConns("A") != 0 {
		t.Fatal("a closed connection was counted again")
	}
	if !Claim(&fakeConn{}, "A") {
		t.Fatal("a connection no limiter accepted was refused")
	}
}

// TestClaimRequest: a request in progress counts its connection against its account once,
// however many requests share the connection (HTTP/2 streams); the connection leaves the count
// when the last one's handler returns, and a release after the connection went idle or closed
// changes nothing.
func TestClaimRequest(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{PerAccount: 1})
	ln := l.Listen(f)
	c1, _ := accept(t, f, ln, from("10.0.0.1"))
	c2, _ := accept(t, f, ln, from("10.0.0.2"))
	ctx1, ctx2 := ConnContext(context.Background(), c1), ConnContext(context.Background(), c2)
	r1, ok1 := ClaimRequest(ctx1, "A")
	r2, ok2 := ClaimRequest(ctx1, "A")
	if !ok1 || !ok2 || l.AccountConns("A") != 1 {
		t.Fatalf("two requests of one connection: %v %v, A counts %d (want 1)", ok1, ok2, l.AccountConns("A"))
	}
	if _, ok := ClaimRequest(ctx2, "A"); ok {
		t.Fatal("another connection's request admitted beyond PerAccount 1")
	}
	r1()
	if l.AccountConns("A") != 1 {
		t.Fatal("the connection left the count with a request still in progress")
	}
	r2()
	if l.AccountConns("A") != 0 {
		t.Fatal("the connection still counts once its requests ended")
	}
	r3, ok := ClaimRequest(ctx2, "A")
	if !ok {
		t.Fatal("refused once the account's count was free")
	}
	ConnState(c2, http.StateIdle)
	r3()
	c2.Close()
	if l.AccountConns("A") != 0 {
		t.Fatalf("A counts %d after a late release", l.AccountConns("A"))
	}
	if release, ok := ClaimRequest(context.Background(), "A"); !ok || release == nil {
		t.Fatal("a request without a limited connection was refused")
	}
}

// TestHalfClosedPipeGivesWay: a client that finishes sending (FIN) to an agent that never
// answers leaves its account's count at once and may be closed to make room: with Max 2 and
// PerAccount 1, B's client half-closes, B is admitted again, and A's newcomer then takes the
// half-closed connection's slot, which ends its pipe.
func TestHalfClosedPipeGivesWay(t *testing.T) {
	l := NewLimiter(Limits{Max: 2, PerAccount: 1, Evict: true})
	bAddr, ended := accountListener(t, l, "B", 0)
	aAddr, _ := accountListener(t, l, "A", 0)
	b1, r1 := dial(t, bAddr)
	waitFor(t, "B's connection to count", func() bool { return l.AccountConns("B") == 1 })
	if err := b1.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the half-closed connection to rest", func() bool { return l.AccountConns("B") == 0 && l.Stats().Idle == 1 })
	dial(t, bAddr)
	waitFor(t, "B admitted again", func() bool { return l.AccountConns("B") == 1 })
	a, _ := dial(t, aAddr)
	waitFor(t, "A admitted", func() bool { return l.AccountConns("A") == 1 })
	if !closedByServer(b1, r1) {
		t.Fatal("the half-closed connection kept its slot")
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the pipe of the connection closed to make room did not end")
	}
	if st := l.Stats(); st.Evicted != 1 || st.Open != 2 {
		t.Fatalf("stats %+v, want 1 evicted, 2 open", st)
	}
	_ = a
}

// TestPipeIdle: a pipe that moves no byte either way for its idle time ends, closing both
// sides; one whose answer keeps flowing, though its client sends nothing, does not.
func TestPipeIdle(t *testing.T) {
	t.Run("quiet both ways", func(t *testing.T) {
		l := NewLimiter(Limits{})
		addr, ended := accountListener(t, l, "B", 200*time.Millisecond)
		c, r := dial(t, addr)
		if !closedByServer(c, r) {
			t.Fatal("the quiet connection was not closed")
		}
		<-ended
	})
	t.Run("one way", func(t *testing.T) {
		const idle, beats = time.Second, 60
		server, client := testnet.TCPPair(t)
		agent, up := testnet.TCPPair(t)
		done := make(chan struct{})
		go func() { Pipe(server, up, idle); close(done) }()
		go func() {
			for range beats {
				if _, err := agent.Write([]byte{'.'}); err != nil {
					return
				}
				time.Sleep(idle / 20)
			}
		}()
		_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
		got, err := io.ReadFull(bufio.NewReader(client), make([]byte, beats))
		if err != nil || got != beats {
			t.Fatalf("read %d of %d bytes of a flowing answer: %v", got, beats, err)
		}
		if !closedByServer(client, bufio.NewReader(client)) {
			t.Fatal("the pipe did not end once the answer stopped")
		}
		<-done
	})
}

// TestSetAccount: once a listener's account is moved (its port passed to another account),
// the connections it accepts count against the new account; those accepted before keep
// theirs. A listener of no account is left without one.
func TestSetAccount(t *testing.T) {
	l := NewLimiter(Limits{Max: 8, PerAccount: 4})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.ListenAccount(raw, "B")
	t.Cleanup(func() { ln.Close() })
	go func() {
		_ = Serve(ln, func(c net.Conn) { _, _ = io.Copy(io.Discard, c); c.Close() })
	}()
	dial(t, raw.Addr().String())
	waitFor(t, "the first connection counted against B", func() bool { return l.AccountConns("B") == 1 })
	SetAccount(ln, "A")
	dial(t, raw.Addr().String())
	waitFor(t, "the second connection counted against A", func() bool { return l.AccountConns("A") == 1 })
	if n := l.AccountConns("B"); n != 1 {
		t.Fatalf("B counts %d connections after the move, want its first only", n)
	}
	plain := l.Listen(raw)
	SetAccount(plain, "A")
	if got := plain.(*listener).accountOf(); got != "" {
		t.Fatalf("a listener of no account was given %q", got)
	}
}
