package peer

import (
	"net"
	"testing"
	"time"
)

// TestLinkFollowsAddressHandover: a peer whose address another replica still answers at (its
// predecessor, during a handover) is dialled again soon, not after a growing backoff (ten
// seconds here), so the link comes up as soon as the peer itself answers there; and the
// function given to SetOnUp is told, so that the directory routes to the peer at once.
func TestLinkFollowsAddressHandover(t *testing.T) {
	ca := newTestCA(t)
	slow := fastTiming
	slow.backoffMin, slow.backoffMax = 10*time.Second, 20*time.Second
	a := newNode(t, ca, "rep_a", nodeOpts{timing: slow})
	old := newNode(t, ca, "rep_old", nodeOpts{})
	ups := make(chan string, 4)
	a.link.SetOnUp(func(id string) { ups <- id })

	a.link.SetPeers(map[string]string{"rep_new": old.addr})
	eventually(t, "A's dials reach the old replica twice", func() bool { return old.ln.n.Load() >= 2 })
	if a.link.Up("rep_new") {
		t.Fatal("A's link to rep_new is up while rep_old answers at its address")
	}

	// The successor takes the address over.
	addr := old.addr
	old.link.Close()
	ident, err := NewIdentity(ca.cert, ca.key, "rep_new")
	if err != nil {
		t.Fatal(err)
	}
	successor, err := newLink(Config{Identity: ident}, fastTiming, Window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { successor.Close() })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = successor.Serve(ln) }()
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
