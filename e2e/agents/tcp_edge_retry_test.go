package agents

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// TestTCPEdgeWaitsForItsPort: account A's TCP edge whose port another program holds when the
// edge is created does not listen, and says so (a warning, edgeplane_tcp_edge_ports_unavailable
// at 1); once that program lets go, the server opens the port on its own and A's agent gets
// the edge's connections (the gauge back at 0, a line saying it listens). Account B's edge,
// on a free port, answers with B's agent throughout.
func TestTCPEdgeWaitsForItsPort(t *testing.T) {
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "25500-25999")
	wb := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := wb.credential()
	// edge serves a TCP edge on a reserved address of account aw with a labeled tunnel;
	// hold, when not nil, is given the address's port first (held by another program).
	edge := func(aw *world, token, prefix string, hold func(addr string) bool) string {
		label := strings.TrimSuffix(prefix, ":")
		tun, err := w.mustConnect(token).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", label)))
		if err != nil {
			t.Fatalf("listen %s: %v", prefix, err)
		}
		t.Cleanup(func() { _ = tun.Close() })
		echoConnsAs(tun, prefix)
		group := aw.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": label}})
		var ra struct{ Addr string }
		for try := 0; ; try++ {
			if st := aw.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
				t.Fatalf("reserve an address for %s: %d", prefix, st)
			}
			if hold(ra.Addr) {
				break
			}
			if try == 10 {
				t.Fatalf("no reserved address of a free port for %s", prefix)
			}
		}
		aw.mustCreate("/edges/tcp", map[string]any{"hostports": []string{ra.Addr}, "backend": map[string]any{"backend_id": group}})
		return ra.Addr
	}
	var holder net.Listener
	edgeA := edge(w, tokenA, "edge-a:", func(addr string) bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		holder = ln
		echoConnsAs(ln, "held:")
		return true
	})
	defer holder.Close()
	edgeB := edge(wb, tokenB, "edge-b:", func(addr string) bool {
		probe, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		probe.Close()
		return true
	})
	answer := func(addr string) string {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "dial: " + err.Error()
		}
		return pingConn(t, c)
	}
	eventually(t, 20*time.Second, "B's edge answering", func() bool { return answer(edgeB) == "edge-b:ping" })
	eventually(t, 20*time.Second, "A's held port counted unavailable", func() bool {
		return w.metrics().value(`edgeplane_tcp_edge_ports_unavailable`) == 1
	})
	if !strings.Contains(w.proc.Stderr.String(), `msg="TCP edge cannot listen; retrying until it can" addr=`+edgeA) {
		t.Errorf("no warning that A's edge cannot listen on %s", edgeA)
	}
	if got := answer(edgeA); got != "held:ping" {
		t.Fatalf("A's port while held: %q, want the holder's answer", got)
	}
	holder.Close()
	eventually(t, 20*time.Second, "A's edge answering once the holder let go", func() bool { return answer(edgeA) == "edge-a:ping" })
	w.metrics().want(`edgeplane_tcp_edge_ports_unavailable`, 0)
	if !strings.Contains(w.proc.Stderr.String(), `msg="TCP edge listens" addr=`+edgeA) {
		t.Errorf("no line saying A's edge listens on %s", edgeA)
	}
	for i := 0; i < 5; i++ {
		if got, want := answer(edgeA), "edge-a:ping"; got != want {
			t.Fatalf("connection %d to A's edge: %q, want %q", i, got, want)
		}
		if got, want := answer(edgeB), "edge-b:ping"; got != want {
			t.Fatalf("connection %d to B's edge: %q, want %q", i, got, want)
		}
	}
}
