//go:build linux

package ingress

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/netx"
)

// TestTCPListenerSetAccount: a TCP endpoint's listener whose address passed to another account
// counts the connections it accepts from then on against the new account, on the same socket
// (one a handover passed on stays the one listening); those accepted before keep their count.
func TestTCPListenerSetAccount(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := raw.Addr().(*net.TCPAddr).Port
	lim := netx.NewLimiter(netx.Limits{Max: 8, PerAccount: 4})
	srv := New(Config{TCPHost: "127.0.0.1", Limiter: lim, Inherited: &inheritedPorts{lns: map[int]net.Listener{port: raw}}})
	defer srv.Close()
	l, err := srv.ListenTCP(port, "account-b", func(c net.Conn) { _, _ = io.Copy(io.Discard, c); c.Close() })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	socket := srv.TCPListeners()[port]
	dialHeld := func() {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s", what)
			}
		}
	}
	dialHeld()
	wait("the first connection counted against account-b", func() bool { return lim.AccountConns("account-b") == 1 })
	l.SetAccount("account-a")
	dialHeld()
	wait("the second connection counted against account-a", func() bool { return lim.AccountConns("account-a") == 1 })
	if n := lim.AccountConns("account-b"); n != 1 {
		t.Fatalf("account-b counts %d connections after the move, want its first only", n)
	}
	if srv.TCPListeners()[port] != socket {
		t.Fatal("the move changed the port's socket")
	}
}
