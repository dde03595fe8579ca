package peer

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pki"
)

// testCA is an edgeplane CA made for one test, as serve makes and loads it.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	ca   *pki.CA // the same CA as pki has it, to issue endpoint-style certificates
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("edgeplane test CA")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: ca.Cert, key: key, ca: ca}
}

// fastTiming is the link's timing for tests: headers within 300 ms and a shorter backoff. The
// heartbeat is the real one: shorter, a link busy on a loaded machine running the race
// detector can go quiet long enough to be taken for a dead one.
var fastTiming = timing{handshake: 5 * time.Second, header: 300 * time.Millisecond, answer: 5 * time.Second,
	interval: heartbeatInterval, heartbeat: heartbeatTimeout, backoffMin: 50 * time.Millisecond,
	backoffMax: 200 * time.Millisecond}

// bulkTiming is fastTiming with a heartbeat timeout no test run reaches, for the tests of what
// a link carries (integrity, fairness between streams) rather than of how it fails: on a loaded
// two-core machine their megabytes of transfers, slowed many times over, once left a link
// quiet for the real 3 s, and a link taken for dead fails every stream the test checks.
var bulkTiming = func() timing { t := fastTiming; t.heartbeat = time.Minute; return t }()

// node is one replica's link, listening on loopback, with its agents.
type node struct {
	id     string
	addr   string
	link   *Link
	ln     *countingListener
	agents *agents
}

type nodeOpts struct {
	timing     timing
	window     uint32
	maxStreams int
	// accept replaces the agents' Accept.
	accept func(ctx context.Context, r Request) (net.Conn, error)
	// log receives the link's log, when set.
	log *logBuffer
}

func newNode(t testing.TB, ca *testCA, id string, o nodeOpts) *node {
	t.Helper()
	if o.timing == (timing{}) {
		o.timing = fastTiming
	}
	if o.window == 0 {
		o.window = Window
	}
	ident, err := NewIdentity(ca.cert, ca.key, id)
	if err != nil {
		t.Fatal(err)
	}
	ag := newAgents(t)
	accept := ag.accept
	if o.accept != nil {
		accept = o.accept
	}
	cfg := Config{Identity: ident, Accept: accept, MaxStreams: o.maxStreams}
	if o.log == nil {
		o.log = &logBuffer{}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", id, o.log)
		}
	})
	l, err := newLink(cfg, o.timing, o.window)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	n := &node{id: id, addr: ln.Addr().String(), link: l, ln: cl, agents: ag}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = l.Serve(cl)
	}()
	t.Cleanup(func() {
		l.Close()
		<-served
	})
	return n
}

// dial forwards a stream from n to tunnel of replica to.
func (n *node) dial(t testing.TB, to *node, tunnel string) net.Conn {
	t.Helper()
	c, err := n.link.Dial(testCtx(t), to.id, to.addr, req(tunnel))
	if err != nil {
		t.Fatalf("dial %s from %s: %v", tunnel, n.id, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stats returns what n's link reports of peer id (zero if it reports nothing).
func (n *node) stats(id string) PeerStats {
	for _, s := range n.link.Stats() {
		if s.Replica == id {
			return s
		}
	}
	return PeerStats{}
}

func req(tunnel string) Request {
	return Request{TunnelID: tunnel, ClientAddr: "203.0.113.7:41000", Proto: "https", EdgeType: "3"}
}

// testCtx is a context that ends a hung test with a clear failure rather than the test binary's
// timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds, failing the test after 20 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// within runs f and fails the test if it has not returned after 20 s: what it waits on must
// end by itself, never hang.
func within(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s hung", what)
	}
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// agents stands in for a replica's agents: Accept opens a real TCP connection to a test
// server for the tunnel named, as the gateway opens a muxado stream to the agent.
//
//   - tn_echo: echoes everything, and half-closes when the stream half-closes;
//   - tn_source: sends sourceSize bytes of sourceData, then closes;
//   - tn_sink: reads everything, then answers "k" and closes;
//   - tn_stall: never reads (a net.Pipe nobody reads), as an agent whose app is stuck;
//   - tn_gone: no such tunnel here (ErrNoTunnel); tn_fail: the agent cannot be reached.
type agents struct {
	echo, source, sink net.Listener
	mu                 sync.Mutex
	reqs               []Request
	stalled            []net.Conn // the far ends of tn_stall's pipes, closed at the end
	conns              []net.Conn
}

const sourceSize = 4 << 20

// sourceData is the bytes tn_source sends: deterministic, so a reader can check them.
var sourceData = func() []byte {
	b := make([]byte, sourceSize)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(b)
	return b
}()

func newAgents(t testing.TB) *agents {
	a := &agents{echo: listen(t, func(c net.Conn) {
		_, _ = io.Copy(c, c)
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	}), source: listen(t, func(c net.Conn) {
		_, _ = c.Write(sourceData)
	}), sink: listen(t, func(c net.Conn) {
		if _, err := io.Copy(io.Discard, c); err == nil {
			_, _ = c.Write([]byte("k"))
		}
	})}
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, c := range append(a.stalled, a.conns...) {
			c.Close()
		}
	})
	return a
}

// listen runs a TCP server on loopback that hands each connection to serve and closes it after.
func listen(t testing.TB, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln
}

func (a *agents) accept(ctx context.Context, r Request) (net.Conn, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, r)
	a.mu.Unlock()
	var ln net.Listener
	switch r.TunnelID {
	case "tn_echo":
		ln = a.echo
	case "tn_source":
		ln = a.source
	case "tn_sink":
		ln = a.sink
	case "tn_stall":
		near, far := net.Pipe()
		a.mu.Lock()
		a.stalled = append(a.stalled, far)
		a.mu.Unlock()
		return near, nil
	case "tn_fail":
		return nil, errors.New("the agent's session ended")
	default:
		return nil, fmt.Errorf("%w: %s is not online here", ErrNoTunnel, r.TunnelID)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
	if err == nil {
		a.mu.Lock()
		a.conns = append(a.conns, c)
		a.mu.Unlock()
	}
	return c, err
}

func (a *agents) requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.reqs...)
}

// echoCheck writes size random bytes to c in chunks of random sizes while reading the echo,
// half-closes, and checks that the echo is the same bytes and ends with the half-close.
func echoCheck(c net.Conn, size int, seed uint64) error {
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	werr := make(chan error, 1)
	go func() {
		rest := data
		for len(rest) > 0 {
			n := min(len(rest), 1+r.IntN(64<<10))
			if _, err := c.Write(rest[:n]); err != nil {
				werr <- err
				return
			}
			rest = rest[n:]
		}
		werr <- c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		return fmt.Errorf("read after %d bytes: %w", n, err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if want := sha256.Sum256(data); n != int64(size) || !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("echo of %d bytes came back as %d different bytes", size, n)
	}
	return nil
}

// logBuffer collects a link's log lines for a test to look for a reason in.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
