package ingress

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestListenTCPRefusesAnotherProcessesPort: a TCP endpoint's port held by another server of the
// same user, itself opened with SO_REUSEPORT (a second edgeplane on the host), is refused, so
// the kernel never splits account A's connections with account B's listener; only a server
// sharing its predecessor's ports (a handover's successor, within SharePortsUntil) opens it
// beside the holder.
func TestListenTCPRefusesAnotherProcessesPort(t *testing.T) {
	first := New(Config{TCPHost: "127.0.0.1"})
	defer first.Close()
	var port int
	var held interface{ Close() error }
	for try := 0; ; try++ {
		probe, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = probe.Addr().(*net.TCPAddr).Port
		probe.Close()
		if held, err = first.ListenTCP(port, "account-a", func(c net.Conn) { c.Close() }); err == nil {
			break
		}
		if try == 10 {
			t.Fatalf("no free port to hold: %v", err)
		}
	}
	defer held.Close()

	second := New(Config{TCPHost: "127.0.0.1"})
	defer second.Close()
	_, err := second.ListenTCP(port, "account-b", func(c net.Conn) { c.Close() })
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("B's listener on A's port %d: %v, want EADDRINUSE", port, err)
	}

	successor := New(Config{TCPHost: "127.0.0.1", SharePortsUntil: time.Now().Add(time.Minute)})
	defer successor.Close()
	shared, err := successor.ListenTCP(port, "account-a", func(c net.Conn) { c.Close() })
	if err != nil {
		t.Fatalf("a handover's successor opening its predecessor's port %d: %v", port, err)
	}
	shared.Close()

	late := New(Config{TCPHost: "127.0.0.1", SharePortsUntil: time.Now().Add(-time.Second)})
	defer late.Close()
	if _, err := late.ListenTCP(port, "account-b", func(c net.Conn) { c.Close() }); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("past SharePortsUntil, port %d: %v, want EADDRINUSE", port, err)
	}
}
