//go:build linux

package ingress

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenReusePort binds addr as another program of the same user could: with SO_REUSEPORT,
// which Linux lets share a port with every other socket of the user that set it too.
func listenReusePort(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

// answering serves each connection with name and closes it: a test tells by the answer who
// took a connection.
func answering(name string) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		_, _ = io.WriteString(c, name)
	}
}

// answerOf dials port and returns what answered it.
func answerOf(t *testing.T, port int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 20*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return "read: " + err.Error()
	}
	return string(b)
}

// freeTCPPort opens a listener of srv on a port nobody holds.
func freeTCPPort(t *testing.T, srv *Server, account, name string) (int, io.Closer) {
	t.Helper()
	for try := 0; ; try++ {
		probe, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := probe.Addr().(*net.TCPAddr).Port
		probe.Close()
		l, err := srv.ListenTCP(port, account, answering(name))
		if err == nil {
			return port, l
		}
		if try == 10 {
			t.Fatalf("no free port to hold: %v", err)
		}
	}
}

// mustNotShare fails the test unless a same-user socket with SO_REUSEPORT is refused port.
func mustNotShare(t *testing.T, port int, when string) {
	t.Helper()
	if ln, err := listenReusePort("127.0.0.1:" + strconv.Itoa(port)); !errors.Is(err, syscall.EADDRINUSE) {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("%s: another socket of the user with SO_REUSEPORT on port %d: %v, want EADDRINUSE", when, port, err)
	}
}

// TestListenTCPRefusesAnotherProcessesPort: a TCP endpoint's port held by another program of the
// same user, even one that set SO_REUSEPORT (a second edgeplane on the host), is refused; and
// a port account A's endpoint holds cannot be shared by such a program, nor taken by account
// B's listener, so the kernel never splits A's connections with anybody.
func TestListenTCPRefusesAnotherProcessesPort(t *testing.T) {
	intruder, err := listenReusePort("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	taken := intruder.Addr().(*net.TCPAddr).Port
	a := New(Config{TCPHost: "127.0.0.1"})
	defer a.Close()
	if _, err := a.ListenTCP(taken, "account-a", answering("a")); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("A's listener on port %d that another program holds with SO_REUSEPORT: %v, want EADDRINUSE", taken, err)
	}

	port, held := freeTCPPort(t, a, "account-a", "a")
	defer held.Close()
	mustNotShare(t, port, "A's endpoint open")
	b := New(Config{TCPHost: "127.0.0.1"})
	defer b.Close()
	if _, err := b.ListenTCP(port, "account-b", answering("b")); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("B's listener on A's port %d: %v, want EADDRINUSE", port, err)
	}
	for i := 0; i < 20; i++ {
		if got := answerOf(t, port); got != "a" {
			t.Fatalf("connection %d to A's port %d: %q, want a", i, port, got)
		}
	}
}

// inheritedPorts is the successor's side of a handover in one process: the predecessor's
// listeners, each a descriptor of its own on the same socket (as a forked successor has).
type inheritedPorts struct {
	mu  sync.Mutex
	lns map[int]net.Listener
}

func (p *inheritedPorts) Take(port int) net.Listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	ln := p.lns[port]
	delete(p.lns, port)
	return ln
}

// passOn gives srv's TCP listeners to a successor, as a handover does.
func passOn(t *testing.T, srv *Server) *inheritedPorts {
	t.Helper()
	p := &inheritedPorts{lns: map[int]net.Listener{}}
	for port, raw := range srv.TCPListeners() {
		rc, err := raw.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		nfd, derr := -1, error(nil)
		if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
			t.Fatalf("dup: %v %v", err, derr)
		}
		f := os.NewFile(uintptr(nfd), "tcp")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		p.lns[port] = ln
	}
	return p
}

// TestHandoverPassesTCPSockets: across a handover the successor takes its predecessor's TCP
// sockets rather than binding beside them. A same-user program with SO_REUSEPORT gets no
// share of the port before, during or after the handover; while both processes hold the
// socket each connection reaches one of them (account A's, either way), and once the
// predecessor stops accepting every connection reaches the successor, none refused, even
// those that arrive before the successor takes the socket (they wait in its backlog).
func TestHandoverPassesTCPSockets(t *testing.T) {
	old := New(Config{TCPHost: "127.0.0.1"})
	defer old.Close()
	portA, _ := freeTCPPort(t, old, "account-a", "old-a")
	portB, _ := freeTCPPort(t, old, "account-b", "old-b")
	mustNotShare(t, portA, "before the handover")

	pool := passOn(t, old)
	succ := New(Config{TCPHost: "127.0.0.1", Inherited: pool})
	defer succ.Close()
	mustNotShare(t, portA, "the successor started")
	if _, err := succ.ListenTCP(portA, "account-a", answering("new-a")); err != nil {
		t.Fatalf("the successor taking port %d: %v", portA, err)
	}
	mustNotShare(t, portA, "both processes on the socket")
	for i := 0; i < 10; i++ {
		if got := answerOf(t, portA); got != "old-a" && got != "new-a" {
			t.Fatalf("connection %d to A's port during the handover: %q", i, got)
		}
	}

	// The predecessor drains: it stops accepting, the socket stays open in the successor.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old.Drain(ctx)
	mustNotShare(t, portA, "the predecessor draining")
	mustNotShare(t, portB, "B's port not yet taken")
	// B's endpoint has not bound in the successor yet: a connection made now waits in the
	// socket's backlog, and the successor answers it once it takes the socket.
	early, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(portB), 20*time.Second)
	if err != nil {
		t.Fatalf("a connection to B's port between the predecessor's drain and the successor's bind: %v", err)
	}
	defer early.Close()
	if _, err := succ.ListenTCP(portB, "account-b", answering("new-b")); err != nil {
		t.Fatalf("the successor taking port %d: %v", portB, err)
	}
	_ = early.SetDeadline(time.Now().Add(20 * time.Second))
	if g, err := io.ReadAll(early); string(g) != "new-b" {
		t.Fatalf("the connection to B's port made before the successor took it: %q (%v), want new-b", g, err)
	}
	old.Close()
	mustNotShare(t, portA, "after the handover")
	for i := 0; i < 20; i++ {
		if g := answerOf(t, portA); g != "new-a" {
			t.Fatalf("connection %d to A's port after the handover: %q, want new-a", i, g)
		}
		if g := answerOf(t, portB); g != "new-b" {
			t.Fatalf("connection %d to B's port after the handover: %q, want new-b", i, g)
		}
	}
}

// TestInheritedTCPOnAnotherHost: an inherited socket that does not listen on the TCP listen
// host (it changed across the handover) is closed, and the port bound anew on the right host.
func TestInheritedTCPOnAnotherHost(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	port := other.Addr().(*net.TCPAddr).Port
	pool := &inheritedPorts{lns: map[int]net.Listener{port: other}}
	srv := New(Config{TCPHost: "127.0.0.1", Inherited: pool})
	defer srv.Close()
	l, err := srv.ListenTCP(port, "account-a", answering("a"))
	if err != nil {
		t.Fatalf("port %d on the listen host: %v", port, err)
	}
	defer l.Close()
	if got := srv.TCPListeners()[port].Addr().String(); got != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("listening on %s, want 127.0.0.1:%d", got, port)
	}
	if c, err := net.DialTimeout("tcp", other.Addr().String(), 20*time.Second); err == nil {
		c.Close()
		t.Fatalf("the inherited socket on 127.0.0.2 is still open")
	}
}
