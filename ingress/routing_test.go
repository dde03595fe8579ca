package ingress

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// gatedEndpoint is an agentEndpoint whose Dial waits for release: a connection still looking for
// its agent when a drain begins.
type gatedEndpoint struct {
	*agentEndpoint
	dialing chan struct{}
	release chan struct{}
}

func (e *gatedEndpoint) Dial(ctx context.Context, client, proto, edge string, passthrough bool) (net.Conn, error) {
	close(e.dialing)
	<-e.release
	return e.agentEndpoint.Dial(ctx, client, proto, edge, passthrough)
}

// echoUpstream answers each connection with prefix, and closes it unless hold: a held one stays
// open until the test ends, as a long TCP session does.
func echoUpstream(t *testing.T, prefix string, hold bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	t.Cleanup(func() { close(ended); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, prefix)
			if hold {
				go func() { <-ended; c.Close() }()
			} else {
				c.Close()
			}
		}
	}()
	return ln.Addr().String()
}

// TestAwaitRoutedWaitsForConnectionsLookingForTheirAgent: a drain waits (AwaitRouted) while a
// TCP connection of account A accepted before it is still dialing A's agent, and returns once
// the dial is done, though the connection goes on (its stream now holds its agent's session).
// Account B's connections are carried meanwhile, and do not hold the drain.
func TestAwaitRoutedWaitsForConnectionsLookingForTheirAgent(t *testing.T) {
	srv := New(Config{TCPHost: "127.0.0.1"})
	defer srv.Close()
	a := &gatedEndpoint{agentEndpoint: &agentEndpoint{account: "acct_a", upstream: echoUpstream(t, "a", true)},
		dialing: make(chan struct{}), release: make(chan struct{})}
	b := &agentEndpoint{account: "acct_b", upstream: echoUpstream(t, "b", false)}
	listen := func(account string, ep Endpoint) int {
		for try := 0; ; try++ {
			probe, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := probe.Addr().(*net.TCPAddr).Port
			probe.Close()
			addr := "127.0.0.1:" + strconv.Itoa(port)
			if _, err := srv.ListenTCP(port, account, func(c net.Conn) { srv.ServeTCPEndpoint(c, ep, addr) }); err == nil {
				return port
			} else if try == 10 {
				t.Fatal(err)
			}
		}
	}
	portA, portB := listen("acct_a", a), listen("acct_b", b)

	connA, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(portA), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close()
	select {
	case <-a.dialing:
	case <-time.After(20 * time.Second):
		t.Fatal("A's connection never dialed its agent")
	}
	if got := answerOf(t, portB); got != "b" {
		t.Fatalf("B's connection while A's is dialing: %q", got)
	}
	wantHeldUntil(t, srv, "A's connection", func() { close(a.release) })
	_ = connA.SetDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, 1)
	if _, err := io.ReadFull(connA, got); string(got) != "a" {
		t.Fatalf("A's connection: %q (%v), want a", got, err)
	}
}

// wantHeldUntil checks that srv.AwaitRouted waits while what is still dialing its agent, and
// returns, well before its own deadline, once release has let that dial finish.
func wantHeldUntil(t *testing.T, srv *Server, what string, release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { srv.AwaitRouted(ctx); close(done) }()
	select {
	case <-done:
		t.Fatalf("AwaitRouted returned while %s was still dialing its agent", what)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("AwaitRouted did not return once %s had its stream", what)
	}
	if ctx.Err() != nil {
		t.Fatal("AwaitRouted returned only at its deadline")
	}
}
