package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestForwardBetweenTwoReplicas: a stream from A reaches the agent B holds with the request's
// fields intact, carries bytes both ways with the half-close, and both ends count it.
func TestForwardBetweenTwoReplicas(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{})
	want := Request{TunnelID: "tn_echo", ClientAddr: "[2001:db8::1]:52000", Proto: "tls", EdgeType: "2", Passthrough: true}
	c, err := a.link.Dial(testCtx(t), b.id, b.addr, want)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.agents.requests(); len(got) != 1 || got[0] != want {
		t.Fatalf("B's Accept got %+v, want [%+v]", got, want)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	sa := a.stats(b.id)
	if !sa.Up || sa.StreamsOut != 1 || sa.ForwardedOut != 1 || sa.BytesOut != 5 || sa.BytesIn != 5 || sa.Addr != b.addr {
		t.Fatalf("A's stats of B: %+v", sa)
	}
	c.Close()
	if s := a.stats(b.id); s.StreamsOut != 0 {
		t.Fatalf("A's stats of B after the close: %+v", s)
	}
	eventually(t, "B to count the stream done", func() bool {
		s := b.stats(a.id)
		return s.Inbound == 1 && s.StreamsIn == 0 && s.ForwardedIn == 1 && s.BytesIn == 5 && s.BytesOut == 5
	})
	if !a.link.Up(b.id) || a.link.Up(a.id) || b.link.Up(a.id) {
		t.Fatalf("Up: A→B %v, A→A %v, B→A %v; want only A→B", a.link.Up(b.id), a.link.Up(a.id), b.link.Up(a.id))
	}
}

// TestThreeReplicas: three replicas forwarding to each other at once share one connection per
// ordered pair, whatever the number of streams.
func TestThreeReplicas(t *testing.T) {
	ca := newTestCA(t)
	nodes := []*node{newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{}), newNode(t, ca, "rep_c", nodeOpts{})}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i, from := range nodes {
		for j, to := range nodes {
			if i == j {
				continue
			}
			for k := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := from.link.Dial(testCtx(t), to.id, to.addr, req("tn_echo"))
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					if err := echoCheck(c, 32<<10, uint64(100*i+10*j+k)); err != nil {
						errs <- fmt.Errorf("%s→%s: %w", from.id, to.id, err)
					}
				}()
			}
		}
	}
	within(t, "the streams", wg.Wait)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, n := range nodes {
		if got := n.ln.n.Load(); got != 2 {
			t.Errorf("%s accepted %d connections, want 2 (one from each other replica)", n.id, got)
		}
		for _, o := range nodes {
			if o != n && (!n.link.Up(o.id) || n.stats(o.id).ForwardedOut != 8 || n.stats(o.id).Inbound != 1) {
				t.Errorf("%s's stats of %s: %+v", n.id, o.id, n.stats(o.id))
			}
		}
	}
}

// TestManyStreamsIntegrity: many concurrent streams on one link, small and large (many times
// the window), each writing and reading at once, all come back intact with their half-close.
func TestManyStreamsIntegrity(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{timing: bulkTiming}), newNode(t, ca, "rep_b", nodeOpts{timing: bulkTiming})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 34 {
		size := 64 << 10
		if i < 2 {
			size = 6 << 20
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.link.Dial(testCtx(t), b.id, b.addr, req("tn_echo"))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if err := echoCheck(c, size, uint64(i)); err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
			}
		}()
	}
	// Downloads at the same time: the agent sends and closes; the stream ends with its bytes.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.link.Dial(testCtx(t), b.id, b.addr, req("tn_source"))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, sourceData) {
				errs <- fmt.Errorf("download: %d bytes, %v", len(got), err)
			}
		}()
	}
	within(t, "the streams", wg.Wait)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := b.ln.n.Load(); n != 1 {
		t.Errorf("B accepted %d connections, want 1", n)
	}
}

// TestSlowStreamDoesNotStallOthers: a stream whose agent never reads, and one whose public
// client never reads, hold at most a window each; another stream on the same link carries
// megabytes meanwhile.
func TestSlowStreamDoesNotStallOthers(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{timing: bulkTiming}), newNode(t, ca, "rep_b", nodeOpts{timing: bulkTiming})

	stalled := a.dial(t, b, "tn_stall")
	var written atomic.Int64
	writeDone := make(chan error, 1)
	go func() {
		chunk := make([]byte, 16<<10)
		for range 256 { // 4 MiB, far more than the window
			if _, err := stalled.Write(chunk); err != nil {
				writeDone <- err
				return
			}
			written.Add(int64(len(chunk)))
		}
		writeDone <- nil
	}()
	eventually(t, "the stalled stream to fill its window", func() bool { return written.Load() >= Window })

	unread := a.dial(t, b, "tn_source") // the agent sends 4 MiB that nobody reads

	c := a.dial(t, b, "tn_echo")
	if err := echoCheck(c, 4<<20, 7); err != nil {
		t.Fatalf("the other stream: %v", err)
	}
	select {
	case err := <-writeDone:
		t.Fatalf("the write to the stalled agent returned (%v) after %d bytes", err, written.Load())
	default:
	}
	// Flow control held: the link took a window, and what the holder's copy had read.
	if n := written.Load(); n > Window+64<<10 {
		t.Fatalf("the stalled stream took %d bytes, more than its %d-byte window and a copy buffer", n, Window)
	}
	stalled.Close()
	unread.Close()
	within(t, "the stalled write to end on Close", func() {
		if err := <-writeDone; err == nil {
			t.Error("the stalled write ended without an error")
		}
	})
}

// TestAcceptRefusals: the holder's refusals reach the dialler as distinct errors, and the link
// stays up for the next stream.
func TestAcceptRefusals(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{})
	for _, tc := range []struct {
		tunnel      string
		want, other error
		text        string
	}{
		{"tn_gone", ErrNoTunnel, ErrAgentDial, "tn_gone is not online here"},
		{"tn_fail", ErrAgentDial, ErrNoTunnel, "the agent's session ended"},
	} {
		c, err := a.link.Dial(testCtx(t), b.id, b.addr, req(tc.tunnel))
		if c != nil || !errors.Is(err, tc.want) || errors.Is(err, tc.other) || errors.Is(err, ErrUnavailable) ||
			!strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), b.id) {
			t.Errorf("%s: %v, %v; want %v with %q", tc.tunnel, c, err, tc.want, tc.text)
		}
	}
	if err := echoCheck(a.dial(t, b, "tn_echo"), 1000, 1); err != nil {
		t.Fatal(err)
	}
	if s := a.stats(b.id); s.RefusedOut != 2 || s.ForwardedOut != 1 || s.StreamsOut != 1 {
		t.Fatalf("A's stats of B: %+v", s)
	}
	eventually(t, "B's counts", func() bool { s := b.stats(a.id); return s.RefusedIn == 2 && s.ForwardedIn == 1 })
}

// TestDialNothingListening: a dial to an address where nothing listens fails at once with
// ErrUnavailable, and the next dial within the backoff fails without a new attempt.
func TestDialNothingListening(t *testing.T) {
	ca := newTestCA(t)
	a := newNode(t, ca, "rep_a", nodeOpts{timing: func() timing { tm := fastTiming; tm.backoffMin = time.Hour; return tm }()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = a.link.Dial(testCtx(t), "rep_b", addr, req("tn_echo"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial to a closed port: %v", err)
	}
	// A listener that takes connections and closes them: the next dial must not reach it.
	var reached atomic.Int64
	other := listen(t, func(net.Conn) { reached.Add(1) })
	_, err = a.link.Dial(testCtx(t), "rep_b", other.Addr().String(), req("tn_echo"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "next attempt in") {
		t.Fatalf("second dial: %v", err)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the second dial, within the backoff, connected %d times", n)
	}
	if a.link.Up("rep_b") {
		t.Fatal("rep_b is up")
	}
	if s := a.stats("rep_b"); s.Up || s.RefusedOut != 0 || s.StreamsOut != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestDialValidatesRequest: a request the holder would refuse is not sent.
func TestDialValidatesRequest(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_b", nodeOpts{})
	r := req("tn_echo")
	r.ClientAddr = "not an address"
	if _, err := a.link.Dial(testCtx(t), b.id, b.addr, r); err == nil || !strings.Contains(err.Error(), "client address") {
		t.Fatalf("dial: %v", err)
	}
	if n := b.ln.n.Load(); n != 0 {
		t.Fatalf("B accepted %d connections", n)
	}
}

// TestStreamLimit: the dialler opens at most MaxStreams streams on a link and refuses the next
// at once; closing one makes room.
func TestStreamLimit(t *testing.T) {
	ca := newTestCA(t)
	a, b := newNode(t, ca, "rep_a", nodeOpts{maxStreams: 2}), newNode(t, ca, "rep_b", nodeOpts{})
	c1 := a.dial(t, b, "tn_echo")
	a.dial(t, b, "tn_echo")
	if _, err := a.link.Dial(testCtx(t), b.id, b.addr, req("tn_echo")); !errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), "its limit") {
		t.Fatalf("third stream: %v", err)
	}
	c1.Close()
	if err := echoCheck(a.dial(t, b, "tn_echo"), 100, 2); err != nil {
		t.Fatal(err)
	}
}

// TestDialContext: a dial whose context ends while the holder has not answered returns at once
// with the context's error.
func TestDialContext(t *testing.T) {
	ca := newTestCA(t)
	release := make(chan struct{})
	defer close(release)
	a := newNode(t, ca, "rep_a", nodeOpts{})
	b := newNode(t, ca, "rep_b", nodeOpts{accept: func(ctx context.Context, r Request) (net.Conn, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, ErrNoTunnel
	}})
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := a.link.Dial(ctx, b.id, b.addr, req("tn_echo"))
		errc <- err
	}()
	eventually(t, "B to hold the request", func() bool { return b.stats(a.id).StreamsIn == 1 })
	cancel()
	within(t, "the dial", func() {
		if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("dial: %v", err)
		}
	})
}
