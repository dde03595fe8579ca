package netx

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fakeListener hands out the connections sent on ch, or the errors sent on errs.
type fakeListener struct {
	ch    chan net.Conn
	errs  chan error
	calls chan struct{} // one value per Accept called
}

func newFake() *fakeListener {
	return &fakeListener{ch: make(chan net.Conn, 64), errs: make(chan error, 4), calls: make(chan struct{}, 64)}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.calls <- struct{}{}
	select {
	case c := <-f.ch:
		return c, nil
	case err := <-f.errs:
		return nil, err
	}
}
func (f *fakeListener) Close() error   { return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// fakeConn is a connection from addr that records its closing.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func from(ip string) *fakeConn {
	return &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

// accept feeds c to the listener and returns what Accept returned; refused connections are
// skipped by Accept, so a sentinel from 192.0.2.99 follows c and is accepted (and closed) when c
// was refused.
func accept(t *testing.T, f *fakeListener, ln net.Listener, c *fakeConn) (net.Conn, bool) {
	t.Helper()
	sentinel := from("192.0.2.99")
	f.ch <- c
	f.ch <- sentinel
	got, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if find(got).Conn == sentinel {
		got.Close()
		return nil, false
	}
	<-f.ch // the unused sentinel
	return got, true
}

func TestPerAddrLimit(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{PerAddr: 2})
	ln := l.Listen(f)
	var open []net.Conn
	for i := range 3 {
		c := from("10.0.0.1")
		got, ok := accept(t, f, ln, c)
		if ok != (i < 2) {
			t.Fatalf("connection %d from one address: accepted %v, want %v", i+1, ok, i < 2)
		}
		if !ok && !c.closed {
			t.Errorf("a refused connection was left open")
		}
		if ok {
			open = append(open, got)
		}
	}
	if _, ok := accept(t, f, ln, from("10.0.0.2")); !ok {
		t.Errorf("another address was refused")
	}
	open[0].Close()
	open[0].Close() // a second close counts nothing
	if _, ok := accept(t, f, ln, from("10.0.0.1")); !ok {
		t.Errorf("a connection was refused after one of the address's closed")
	}
	st := l.Stats()
	// Accepted: two from 10.0.0.1, the sentinel after the refused third (closed), one from
	// 10.0.0.2 and the last from 10.0.0.1; open: three.
	if st.Accepted != 5 || st.Refused != 1 || st.Open != 3 {
		t.Errorf("stats %+v, want 5 accepted, 1 refused, 3 open", st)
	}
}

func TestIPv6CountsBySlash64(t *testing.T) {
	f := newFake()
	ln := NewLimiter(Limits{PerAddr: 1}).Listen(f)
	if _, ok := accept(t, f, ln, from("2001:db8::1")); !ok {
		t.Fatal("first IPv6 connection refused")
	}
	if _, ok := accept(t, f, ln, from("2001:db8::2")); ok {
		t.Errorf("a second address of the same /64 was accepted beyond the limit of 1")
	}
	if _, ok := accept(t, f, ln, from("2001:db8:0:1::1")); !ok {
		t.Errorf("an address of another /64 was refused")
	}
	if _, ok := accept(t, f, ln, from("::ffff:10.0.0.1")); !ok {
		t.Errorf("an IPv4-mapped address was refused")
	}
	if _, ok := accept(t, f, ln, from("10.0.0.1")); ok {
		t.Errorf("10.0.0.1 was accepted beyond the limit after its IPv4-mapped form")
	}
}

func TestPerAddrUntrustedLimit(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{PerAddr: 3, PerAddrUntrusted: 2})
	ln := l.Listen(f)
	a, _ := accept(t, f, ln, from("10.0.0.1"))
	if _, ok := accept(t, f, ln, from("10.0.0.1")); !ok {
		t.Fatal("second untrusted connection refused")
	}
	if _, ok := accept(t, f, ln, from("10.0.0.1")); ok {
		t.Fatal("a third untrusted connection was accepted beyond the limit of 2")
	}
	Trust(a)
	Trust(a) // once is enough
	if st := l.Stats(); st.Untrusted != 1 || st.Open != 2 {
		t.Fatalf("after trusting one: %+v, want 1 untrusted of 2 open", st)
	}
	if _, ok := accept(t, f, ln, from("10.0.0.1")); !ok {
		t.Fatal("refused after one connection was trusted")
	}
	// Three open now: the total limit holds whatever is trusted.
	if _, ok := accept(t, f, ln, from("10.0.0.1")); ok {
		t.Fatal("accepted beyond the per-address limit of 3")
	}
	a.Close()
	Trust(a) // trusting a closed connection changes nothing
	if st := l.Stats(); st.Untrusted != 2 || st.Open != 2 {
		t.Errorf("after closing the trusted one: %+v, want 2 untrusted of 2 open", st)
	}
}

func TestMaxWaitsForASlot(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{Max: 1})
	ln := l.Listen(f)
	first, ok := accept(t, f, ln, from("10.0.0.1"))
	if !ok {
		t.Fatal("first connection refused")
	}
	<-f.calls
	got := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		got <- c
	}()
	f.ch <- from("10.0.0.2")
	time.Sleep(50 * time.Millisecond)
	if len(f.calls) != 0 {
		t.Fatal("Accept took a connection while the one slot was held")
	}
	first.Close()
	c := <-got
	if c == nil || l.Stats().Open != 1 {
		t.Fatalf("after the slot was freed: %v, %+v", c, l.Stats())
	}
	// Close ends an Accept that waits for a slot.
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	ln.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on a closed listener: %v, want net.ErrClosed", err)
	}
}

func TestAcceptErrorFreesTheSlot(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{Max: 1})
	ln := l.Listen(f)
	f.errs <- errors.New("accept failed")
	if _, err := ln.Accept(); err == nil || err.Error() != "accept failed" {
		t.Fatalf("Accept: %v, want the listener's error", err)
	}
	if _, ok := accept(t, f, ln, from("10.0.0.1")); !ok {
		t.Fatal("the slot of a failed Accept was not freed")
	}
	if st := l.Stats(); st.Open != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestConnectionsWithoutAnIPAreNotCountedByAddress(t *testing.T) {
	f := newFake()
	l := NewLimiter(Limits{PerAddr: 1})
	ln := l.Listen(f)
	for range 3 {
		a, _ := net.Pipe()
		f.ch <- a
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if st := l.Stats(); st.Open != 3 || st.Refused != 0 {
		t.Errorf("pipes: %+v, want 3 open, none refused", st)
	}
}

func TestConnForwards(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Limit(raw, Limits{Max: 4, PerAddr: 4})
	defer ln.Close()
	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sc.(interface{ NetConn() net.Conn }).NetConn().(*net.TCPConn); !ok {
		t.Errorf("NetConn is not the TCP connection")
	}
	// ReadFrom and CloseWrite reach the TCP connection: the client reads everything, then EOF
	// while the server's side stays open for reading.
	n, err := sc.(io.ReaderFrom).ReadFrom(strings.NewReader("hello"))
	if err != nil || n != 5 {
		t.Fatalf("ReadFrom: %d %v", n, err)
	}
	if err := sc.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "hello" {
		t.Fatalf("client read %q %v", got, err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := sc.Read(b); err != nil || b[0] != 'x' {
		t.Errorf("read after CloseWrite: %q %v", b, err)
	}
	sc.Close()
	// A connection without CloseWrite or ReadFrom: CloseWrite closes it, ReadFrom copies.
	a, b2 := net.Pipe()
	pc := &conn{Conn: a, l: NewLimiter(Limits{})}
	go func() { _, _ = pc.ReadFrom(strings.NewReader("pipe")); _ = pc.CloseWrite() }()
	if got, _ := io.ReadAll(b2); string(got) != "pipe" {
		t.Errorf("pipe read %q", got)
	}
	// Trust and TrustContext ignore what no limiter accepted.
	Trust(a)
	Trust(nil)
	TrustContext(context.Background())
}

// TestUntrustedIdle serves HTTP through a limiter with a short UntrustedIdle: of two keep-alive
// connections that made one request each, the untrusted one is closed by the server while the
// trusted one stays open.
func TestUntrustedIdle(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimiter(Limits{UntrustedIdle: 200 * time.Millisecond})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/login" {
				TrustContext(r.Context())
			}
		}),
		IdleTimeout: time.Minute,
		ConnContext: ConnContext,
		ConnState:   ConnState,
	}
	go srv.Serve(l.Listen(raw))
	defer srv.Close()
	closed := map[string]bool{}
	for _, path := range []string{"/healthz", "/login"} {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		// Two requests: the idle wait between them is cut too, not only the first.
		for range 2 {
			if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			resp.Body.Close()
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = br.ReadByte()
		var ne net.Error
		closed[path] = !(errors.As(err, &ne) && ne.Timeout())
	}
	if !closed["/healthz"] || closed["/login"] {
		t.Errorf("closed by the server: %v, want only the untrusted /healthz connection", closed)
	}
	if st := l.Stats(); st.Open != 1 || st.Untrusted != 0 {
		t.Errorf("stats %+v, want the trusted connection open", st)
	}
}
