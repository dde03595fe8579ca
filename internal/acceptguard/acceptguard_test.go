package acceptguard

import (
	"net"
	"strings"
	"testing"
)

// panicking stands for a tunnel whose Accept dereferences a nil pointer, as ngrok-go v1.12.1's
// does after its Connect race.
type panicking struct{ net.Listener }

func (panicking) Accept() (net.Conn, error) {
	var p *struct{ n int }
	_ = p.n
	return nil, nil
}

func TestPanicBecomesError(t *testing.T) {
	c, err := Listener{Listener: panicking{}}.Accept()
	if c != nil || err == nil || !strings.Contains(err.Error(), "panicked in Accept") {
		t.Fatalf("Accept = %v, %v; want nil and the panic as an error", c, err)
	}
}

func TestConnectionsPassThrough(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := Listener{Listener: ln}.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	c.Close()
	ln.Close()
	if _, err := (Listener{Listener: ln}).Accept(); err == nil || strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Accept on a closed listener = %v; want the listener's own error", err)
	}
}
