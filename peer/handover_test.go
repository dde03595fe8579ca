package peer

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestLinkFollowsAddressHandover: a peer whose address another replica still answers at (its
// predecessor, during a handover) is dialled again soon, not after a growing backoff (ten
// seconds here), so the link comes up as soon as the peer itself answers there; and the
// function given to SetOnUp is told, so that the directory routes to the peer at once. One
// socket is handed from one link to the other, as a handover does, so no dial is refused.
func TestLinkFollowsAddressHandover(t *testing.T) {
	ca := newTestCA(t)
	slow := fastTiming
	slow.backoffMin, slow.backoffMax = 10*time.Second, 20*time.Second
	a := newNode(t, ca, "rep_a", nodeOpts{timing: slow})
	ups := make(chan string, 4)
	a.link.SetOnUp(func(id string) { ups <- id })

	sock, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	oldLn, newLn := newHandedListener(sock), newHandedListener(sock)
	var current atomic.Pointer[handedListener]
	current.Store(oldLn)
	var accepted atomic.Int64
	go func() {
		for {
			c, err := sock.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			current.Load().conns <- c
		}
	}()
	link := func(id string, ln net.Listener) {
		ident, err := NewIdentity(ca.cert, ca.key, id)
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLink(Config{Identity: ident}, fastTiming, Window)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() { _ = l.Serve(ln) }()
	}
	link("rep_old", oldLn)
	link("rep_new", newLn)

	a.link.SetPeers(map[string]string{"rep_new": sock.Addr().String()})
	eventually(t, "A's dials reach the old replica twice", func() bool { return accepted.Load() >= 2 })
	if a.link.Up("rep_new") {
		t.Fatal("A's link to rep_new is up while rep_old answers at its address")
	}
	current.Store(newLn) // the successor takes the socket over
	select {
	case id := <-ups:
		if id != "rep_new" {
			t.Fatalf("SetOnUp's function was told %q, want rep_new", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("A's link to rep_new is not up 5 s after rep_new answers at its address (up %v)", a.link.Up("rep_new"))
	}
	if !a.link.Up("rep_new") {
		t.Fatal("SetOnUp's function was told, but the link is not up")
	}
}

// handedListener is one process's share of a socket: the connections the test hands it.
type handedListener struct {
	sock  net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  atomic.Bool
}

func newHandedListener(sock net.Listener) *handedListener {
	return &handedListener{sock: sock, conns: make(chan net.Conn, 16), done: make(chan struct{})}
}

func (l *handedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handedListener) Close() error {
	if l.once.CompareAndSwap(false, true) {
		close(l.done)
	}
	return nil
}

func (l *handedListener) Addr() net.Addr { return l.sock.Addr() }
