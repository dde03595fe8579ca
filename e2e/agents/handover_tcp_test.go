package agents

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"
	"golang.ngrok.com/ngrok/config"
)

// echoConnsAs answers every connection of l with prefix and what it read up to its end, so a
// test can tell which account's agent answered.
func echoConnsAs(l net.Listener, prefix string) {
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: l}.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(io.LimitReader(c, 1<<16))
				_, _ = c.Write([]byte(prefix + string(b)))
			}()
		}
	}()
}

// TCP endpoints on a random port come back on the same port after a handover, each still
// answered by its own account's agent: the successor takes the bind the agent sends again with
// the address it was given, and no other account may bind that address.
func TestHandoverKeepsRandomTCPEndpoints(t *testing.T) {
	w := start(t, "--drain-timeout", "10s", "--tcp-port-range", "25100-25499", "--tcp-addr-host", "127.0.0.1")
	_, tokenA := w.credential()
	_, tokenB := w.asAccount("team-b").credential()
	ctx := context.Background()
	listen := func(token, prefix string) string {
		tun, err := w.mustConnect(token).Listen(ctx, config.TCPEndpoint())
		if err != nil {
			t.Fatalf("listen %s: %v", prefix, err)
		}
		t.Cleanup(func() { _ = tun.Close() })
		echoConnsAs(tun, prefix)
		return strings.TrimPrefix(tun.URL(), "tcp://")
	}
	addrA, addrB := listen(tokenA, "a:"), listen(tokenB, "b:")
	if addrA == addrB {
		t.Fatalf("both accounts were given %s", addrA)
	}
	answer := func(addr string) string {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "dial: " + err.Error()
		}
		return pingConn(t, c)
	}
	for _, c := range []struct{ addr, want string }{{addrA, "a:ping"}, {addrB, "b:ping"}} {
		eventually(t, 20*time.Second, c.addr+" answers "+c.want, func() bool { return answer(c.addr) == c.want })
	}

	newRestarter(w).handover(t)

	for _, c := range []struct{ addr, want string }{{addrA, "a:ping"}, {addrB, "b:ping"}} {
		eventually(t, 30*time.Second, "after the handover "+c.addr+" answers "+c.want, func() bool { return answer(c.addr) == c.want })
		for i := 0; i < 20; i++ {
			if got := answer(c.addr); got != c.want {
				t.Fatalf("connection %d to %s after the handover: %q, want %q", i, c.addr, got, c.want)
			}
		}
	}
	// Another account's agent cannot take a port by the URL it was given: ngrok-go v2 binds
	// with the URL.
	if ev := w.gov2Agent(tokenB, "-url", "tcp://"+addrA); ev.Event != "error" || ev.Code != "ERR_NGROK_307" {
		t.Errorf("account b's ngrok-go v2 agent binding %s: %+v; want ERR_NGROK_307", addrA, ev)
	}
	if got := answer(addrA); got != "a:ping" {
		t.Errorf("%s answers %q after account b's try, want a:ping", addrA, got)
	}
}
