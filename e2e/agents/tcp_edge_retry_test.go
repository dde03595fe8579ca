package agents

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// tcpEdgeOn serves a TCP edge on a reserved address of account aw with a labeled tunnel of
// an agent connected with token, answering prefix and what it read; take is given the
// address first and says whether it suits (a port another program does not hold, say).
func tcpEdgeOn(t *testing.T, aw *world, token, prefix string, take func(addr string) bool) string {
	t.Helper()
	group := labeledGroup(t, aw, token, prefix)
	var ra struct{ Addr string }
	for try := 0; ; try++ {
		if st := aw.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
			t.Fatalf("reserve an address for %s: %d", prefix, st)
		}
		if take(ra.Addr) {
			break
		}
		if try == 10 {
			t.Fatalf("no reserved address of a free port for %s", prefix)
		}
	}
	aw.mustCreate("/edges/tcp", map[string]any{"hostports": []string{ra.Addr}, "backend": map[string]any{"backend_id": group}})
	return ra.Addr
}

// labeledGroup serves a labeled tunnel of an agent connected with token, answering prefix and
// what it read, and returns the id of account aw's tunnel group backend of its label.
func labeledGroup(t *testing.T, aw *world, token, prefix string) string {
	t.Helper()
	label := strings.TrimSuffix(prefix, ":")
	tun, err := aw.mustConnect(token).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", label)))
	if err != nil {
		t.Fatalf("listen %s: %v", prefix, err)
	}
	t.Cleanup(func() { _ = tun.Close() })
	echoConnsAs(tun, prefix)
	return aw.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": label}})
}

// portFree reports whether no program holds the port of addr now.
func portFree(addr string) bool {
	probe, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	probe.Close()
	return true
}

// answerPing sends ping to addr and returns the answer, or the dial's error.
func answerPing(t *testing.T, addr string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	return pingConn(t, c)
}

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
	var holder net.Listener
	edgeA := tcpEdgeOn(t, w, tokenA, "edge-a:", func(addr string) bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		holder = ln
		echoConnsAs(ln, "held:")
		return true
	})
	defer holder.Close()
	edgeB := tcpEdgeOn(t, wb, tokenB, "edge-b:", portFree)
	answer := func(addr string) string { return answerPing(t, addr) }
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

// TestTCPEdgeCreatedDuringHandover: account A's TCP edge created once the handover's new
// process has started (its port is not among those passed on, and the old process may take it
// before it drains) listens after the handover, with A's agent, without any later change of
// the plan; account B's edge, created before, answers with B's agent before and after. Which
// process binds the port first is up to the timing: when it is the old one, the new one's
// bind fails and only its retry opens the port (TestTCPEdgeHeldThroughHandover makes that
// case certain).
func TestTCPEdgeCreatedDuringHandover(t *testing.T) {
	w := start(t, "--drain-timeout", "10s", "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "25500-25999")
	wb := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := wb.credential()
	edgeB := tcpEdgeOn(t, wb, tokenB, "edge-b:", portFree)
	eventually(t, 20*time.Second, "B's edge answering", func() bool { return answerPing(t, edgeB) == "edge-b:ping" })
	groupA := labeledGroup(t, w, tokenA, "edge-a:")
	var addrA struct{ Addr string }
	for try := 0; ; try++ {
		if st := w.call("POST", "/reserved_addrs", map[string]any{}, &addrA); st != 201 {
			t.Fatalf("reserve an address for A: %d", st)
		}
		if portFree(addrA.Addr) {
			break
		}
		if try == 10 {
			t.Fatalf("no reserved address of a free port for A")
		}
	}
	started := strings.Count(w.proc.Stderr.String(), `msg="handover: inherited TCP ports"`)
	created := make(chan int, 1)
	go func() { // A's edge, once the new process has its list of ports
		deadline := time.Now().Add(30 * time.Second)
		for strings.Count(w.proc.Stderr.String(), `msg="handover: inherited TCP ports"`) == started {
			if time.Now().After(deadline) {
				created <- 0
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		created <- w.call("POST", "/edges/tcp", map[string]any{"hostports": []string{addrA.Addr}, "backend": map[string]any{"backend_id": groupA}}, nil)
	}()
	newRestarter(w).handover(t)
	if st := <-created; st != 201 {
		t.Fatalf("A's edge created during the handover: %d, want 201", st)
	}
	eventually(t, 20*time.Second, "A's edge answering after the handover", func() bool { return answerPing(t, addrA.Addr) == "edge-a:ping" })
	if strings.Contains(w.proc.Stderr.String(), `msg="TCP edge cannot listen; retrying until it can" addr=`+addrA.Addr) {
		t.Logf("one process found A's port %s held by the other and retried it", addrA.Addr)
	}
	for i := 0; i < 5; i++ {
		if got, want := answerPing(t, addrA.Addr), "edge-a:ping"; got != want {
			t.Fatalf("connection %d to A's edge: %q, want %q", i, got, want)
		}
		if got, want := answerPing(t, edgeB), "edge-b:ping"; got != want {
			t.Fatalf("connection %d to B's edge: %q, want %q", i, got, want)
		}
	}
}

// TestTCPEdgeHeldThroughHandover: account A's TCP edge whose port another program holds when a
// handover starts (so neither process has it to pass on) listens on the new process once that
// program lets go, which it does only after the new process failed to bind it: the new
// process retries it on its own, with no change of the plan. B's edge answers throughout.
func TestTCPEdgeHeldThroughHandover(t *testing.T) {
	w := start(t, "--drain-timeout", "10s", "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "25500-25999")
	wb := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := wb.credential()
	edgeB := tcpEdgeOn(t, wb, tokenB, "edge-b:", portFree)
	var holder net.Listener
	edgeA := tcpEdgeOn(t, w, tokenA, "edge-a:", func(addr string) bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		holder = ln
		echoConnsAs(ln, "held:")
		return true
	})
	defer holder.Close()
	eventually(t, 20*time.Second, "B's edge answering", func() bool { return answerPing(t, edgeB) == "edge-b:ping" })
	eventually(t, 20*time.Second, "A's held port counted unavailable", func() bool {
		return w.metrics().value(`edgeplane_tcp_edge_ports_unavailable`) == 1
	})
	failed := `msg="TCP edge cannot listen; retrying until it can" addr=` + edgeA
	before := strings.Count(w.proc.Stderr.String(), failed)
	released := make(chan bool, 1)
	go func() { // the holder lets go once the new process's first bind of A's port failed
		deadline := time.Now().Add(30 * time.Second)
		for strings.Count(w.proc.Stderr.String(), failed) == before {
			if time.Now().After(deadline) {
				released <- false
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		holder.Close()
		released <- true
	}()
	newRestarter(w).handover(t)
	if !<-released {
		t.Fatalf("the new process did not say it cannot listen on A's held port %s", edgeA)
	}
	eventually(t, 20*time.Second, "A's edge answering on the new process", func() bool { return answerPing(t, edgeA) == "edge-a:ping" })
	w.metrics().want(`edgeplane_tcp_edge_ports_unavailable`, 0)
	for i := 0; i < 5; i++ {
		if got, want := answerPing(t, edgeA), "edge-a:ping"; got != want {
			t.Fatalf("connection %d to A's edge: %q, want %q", i, got, want)
		}
		if got, want := answerPing(t, edgeB), "edge-b:ping"; got != want {
			t.Fatalf("connection %d to B's edge: %q, want %q", i, got, want)
		}
	}
}
