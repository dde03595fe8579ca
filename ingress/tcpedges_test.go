//go:build linux

package ingress

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
)

// tcpEdgeSpec is one account's TCP edge on a port of 127.0.0.1, carried to a static backend.
type tcpEdgeSpec struct {
	account string
	port    int
	backend string // host:port of the static backend
}

// tcpEdgePlan builds the plan of the given TCP edges, each account's part as the planner
// builds it.
func tcpEdgePlan(s *Server, edges ...tcpEdgeSpec) *plan.Plan {
	snaps := map[string]*plan.Snapshot{}
	for _, e := range edges {
		snap := snaps[e.account]
		if snap == nil {
			snap = &plan.Snapshot{Account: e.account, Backends: map[string]ep.Document{}}
			snaps[e.account] = snap
		}
		id := e.account + "_" + strconv.Itoa(e.port)
		snap.Backends["bkdsb_"+id] = &ep.StaticBackend{Meta: ep.Meta{ID: "bkdsb_" + id}, Address: e.backend}
		snap.TCPEdges = append(snap.TCPEdges, &ep.TCPEdge{
			Edge:    ep.Edge{Meta: ep.Meta{ID: "edgtcp_" + id}, Hostports: []string{"tcp.example.test:" + strconv.Itoa(e.port)}},
			Backend: &ep.EndpointBackend{Enabled: true, Backend: ep.NewRef("bkdsb_" + id)}})
	}
	parts := map[string]*plan.Account{}
	for account, snap := range snaps {
		parts[account] = plan.NewLive().Build(snap, s.EdgeHandler())
	}
	return plan.Merge(parts)
}

// listenAnswering listens on a port of 127.0.0.1 and writes name on each connection, closing
// it; the listener is closed when the test ends, if not before.
func listenAnswering(t *testing.T, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	serve := answering(name)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln
}

// answeringBackend is a static backend that writes name on each connection.
func answeringBackend(t *testing.T, name string) string {
	return listenAnswering(t, name).Addr().String()
}

// holdPort is another program's socket on a port of 127.0.0.1, answering "held".
func holdPort(t *testing.T) (int, net.Listener) {
	ln := listenAnswering(t, "held")
	return ln.Addr().(*net.TCPAddr).Port, ln
}

// freePort returns a port of 127.0.0.1 nobody held a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// portFree reports whether a plain listener can bind port now (it is closed at once).
func portFree(port int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// eventually polls cond for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newTCPEdgeServer is a server whose routing plan is what apply last gave it; apply then syncs
// the TCP edges' listeners, as the planner does on each swap.
func newTCPEdgeServer(t *testing.T) (s *Server, apply func(*plan.Plan)) {
	return newTCPEdgeServerWith(t, Config{})
}

// newTCPEdgeServerWith is newTCPEdgeServer with cfg (its TCP host and outbound settings set).
func newTCPEdgeServerWith(t *testing.T, cfg Config) (s *Server, apply func(*plan.Plan)) {
	cfg.TCPHost, cfg.OutboundAllowPrivate = "127.0.0.1", true
	s = New(cfg)
	t.Cleanup(func() { s.Close() })
	var cur atomic.Pointer[plan.Plan]
	s.SetPlan(cur.Load)
	return s, func(pl *plan.Plan) {
		cur.Store(pl)
		s.SyncTCPEdges(pl)
	}
}

// wantOf returns what the server's latest plan wants of port, nil when nothing.
func wantOf(s *Server, port int) *tcpEdgePort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tcpEdges.want[port]
}

// TestTCPEdgeRetriesHeldPort: account A's TCP edge whose port another socket holds when the
// plan is applied starts answering, with A's backend, once that socket closes, with no plan
// change in between; until then the port counts as unavailable. Account B's edge on another
// port answers with B's backend throughout.
func TestTCPEdgeRetriesHeldPort(t *testing.T) {
	s, apply := newTCPEdgeServer(t)
	pa, holder := holdPort(t)
	pb := freePort(t)
	apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_a", pa, answeringBackend(t, "from a")},
		tcpEdgeSpec{"acct_b", pb, answeringBackend(t, "from b")}))
	if got := answerOf(t, pb); got != "from b" {
		t.Fatalf("B's edge on port %d: %q, want from b", pb, got)
	}
	if n := s.TCPEdgePortsUnavailable(); n != 1 {
		t.Fatalf("%d TCP edge ports unavailable with A's held, want 1", n)
	}
	if got := answerOf(t, pa); got != "held" {
		t.Fatalf("A's port %d while held: %q, want the holder's answer", pa, got)
	}
	holder.Close()
	eventually(t, "A's edge answering once the holder let go", func() bool { return answerOf(t, pa) == "from a" })
	if n := s.TCPEdgePortsUnavailable(); n != 0 {
		t.Errorf("%d TCP edge ports unavailable once A's listens, want 0", n)
	}
	if got := answerOf(t, pb); got != "from b" {
		t.Errorf("B's edge on port %d afterwards: %q, want from b", pb, got)
	}
}

// TestTCPEdgeDroppedWhileFailingNeverOpens: a TCP edge port that fails to open and then leaves
// the plan (A's edge deleted) is never opened afterwards, and one the plan gives to another
// account meanwhile (A's reservation now B's) opens for B only, with B's backend: their
// retries end with the plan that wanted them. B's edge, retried beside them, opens once its
// holder closes, which shows the retries ran; even a retry of the old plan running just as
// the plan changed (called here directly) opens nothing.
func TestTCPEdgeDroppedWhileFailingNeverOpens(t *testing.T) {
	s, apply := newTCPEdgeServer(t)
	s.tcpEdges.retryMin, s.tcpEdges.retryMax = 5*time.Millisecond, 20*time.Millisecond
	fromA, fromB := answeringBackend(t, "from a"), answeringBackend(t, "from b")
	deleted, holdDeleted := holdPort(t)
	moved, holdMoved := holdPort(t)
	kept, holdKept := holdPort(t)
	apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_a", deleted, fromA}, tcpEdgeSpec{"acct_a", moved, fromA},
		tcpEdgeSpec{"acct_b", kept, fromB}))
	if n := s.TCPEdgePortsUnavailable(); n != 3 {
		t.Fatalf("%d TCP edge ports unavailable, want 3", n)
	}
	staleDeleted, staleMoved := wantOf(s, deleted), wantOf(s, moved)
	apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_b", moved, fromB}, tcpEdgeSpec{"acct_b", kept, fromB}))
	if n := s.TCPEdgePortsUnavailable(); n != 2 {
		t.Fatalf("%d TCP edge ports unavailable after A's edge went, want 2 (B's)", n)
	}
	s.mu.Lock()
	left := staleDeleted.retry != nil || staleMoved.retry != nil
	s.mu.Unlock()
	if left {
		t.Errorf("A's retries still pending once the plan dropped them")
	}
	for _, ln := range []net.Listener{holdDeleted, holdMoved, holdKept} {
		ln.Close()
	}
	eventually(t, "B's edges answering once their holders let go", func() bool {
		return answerOf(t, kept) == "from b" && answerOf(t, moved) == "from b"
	})
	// A retry of the old plan that was already running when the plan changed.
	s.openTCPEdge(staleDeleted)
	s.openTCPEdge(staleMoved)
	if !portFree(deleted) {
		t.Errorf("the port %d of A's deleted edge was opened again", deleted)
	}
	for i := 0; i < 5; i++ {
		if got := answerOf(t, moved); got != "from b" {
			t.Fatalf("the port %d now B's, connection %d: %q, want from b", moved, i, got)
		}
	}
	if n := s.TCPEdgePortsUnavailable(); n != 0 {
		t.Errorf("%d TCP edge ports unavailable, want 0", n)
	}
}

// TestTCPEdgeNothingOpensAfterDrain: once the server drains (a handover's old process), a
// failing TCP edge port is no longer retried and a TCP edge new to the plan is not opened:
// the successor must be able to bind them. A's edge was failing, B's is new after the drain.
func TestTCPEdgeNothingOpensAfterDrain(t *testing.T) {
	s, apply := newTCPEdgeServer(t)
	s.tcpEdges.retryMin, s.tcpEdges.retryMax = 5*time.Millisecond, 20*time.Millisecond
	fromA, fromB := answeringBackend(t, "from a"), answeringBackend(t, "from b")
	pa, holder := holdPort(t)
	apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_a", pa, fromA}))
	pending := wantOf(s, pa)
	if pending == nil || s.TCPEdgePortsUnavailable() != 1 {
		t.Fatalf("A's held port %d is not failing", pa)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.Drain(ctx)
	holder.Close()
	pb := freePort(t)
	apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_a", pa, fromA}, tcpEdgeSpec{"acct_b", pb, fromB}))
	s.openTCPEdge(pending) // its retry, had it not been stopped
	if !portFree(pb) {
		t.Errorf("B's edge new after the drain opened port %d", pb)
	}
	if !portFree(pa) {
		t.Errorf("A's failing port %d was opened after the drain", pa)
	}
}

// syncBuffer is a buffer the server's log handler writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// beforeBind runs a function, once armed, when the server is about to bind a TCP port: it is
// the server's InheritedPorts (asked for an inherited socket just before each bind), holding
// none.
type beforeBind struct {
	mu sync.Mutex
	f  func(port int)
}

func (b *beforeBind) arm(f func(port int)) {
	b.mu.Lock()
	b.f = f
	b.mu.Unlock()
}

func (b *beforeBind) Take(port int) net.Listener {
	b.mu.Lock()
	f := b.f
	b.f = nil
	b.mu.Unlock()
	if f != nil {
		f(port)
	}
	return nil
}

// TestTCPEdgeRetryRacingAPlanChange: a retry of A's failing port that is binding just as the
// plan drops the port (the holder let go, A's edge deleted, B's kept) does not keep what it
// bound: the port is free afterwards and counts as nothing, and B's edge answers with B's
// backend.
func TestTCPEdgeRetryRacingAPlanChange(t *testing.T) {
	hook := &beforeBind{}
	logs := &syncBuffer{}
	s, apply := newTCPEdgeServerWith(t, Config{Inherited: hook,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	s.tcpEdges.retryMin, s.tcpEdges.retryMax = 5*time.Millisecond, 20*time.Millisecond
	fromA, fromB := answeringBackend(t, "from a"), answeringBackend(t, "from b")
	pa, holder := holdPort(t)
	pb := freePort(t)
	apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_a", pa, fromA}, tcpEdgeSpec{"acct_b", pb, fromB}))
	if n := s.TCPEdgePortsUnavailable(); n != 1 {
		t.Fatalf("%d TCP edge ports unavailable, want 1 (A's held one)", n)
	}
	raced := make(chan int, 1)
	hook.arm(func(port int) { // in A's retry, before its bind
		holder.Close()
		apply(tcpEdgePlan(s, tcpEdgeSpec{"acct_b", pb, fromB}))
		raced <- port
	})
	select {
	case port := <-raced:
		if port != pa {
			t.Fatalf("the retry bound port %d, want A's %d", port, pa)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("A's port was not retried within 20 s")
	}
	closed := `msg="TCP edge port no longer wanted once bound: closed" addr=tcp.example.test:` + strconv.Itoa(pa)
	eventually(t, "A's racing retry closing what it bound", func() bool { return strings.Contains(logs.String(), closed) })
	if !portFree(pa) {
		t.Errorf("A's port %d is held after its racing retry", pa)
	}
	if n := s.TCPEdgePortsUnavailable(); n != 0 {
		t.Errorf("%d TCP edge ports unavailable, want 0", n)
	}
	if got := answerOf(t, pb); got != "from b" {
		t.Errorf("B's edge on port %d: %q, want from b", pb, got)
	}
}
