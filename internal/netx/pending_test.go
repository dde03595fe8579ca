package netx

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pendingServer serves HTTP on a real socket through a pending listener (ListenPending) of a
// limiter with max slots that evicts, with header and idle timeouts far longer than any test:
// only eviction frees a slot. /upload reads its whole body; /login trusts the connection.
func pendingServer(t *testing.T, l *Limiter) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/login" {
				TrustContext(r.Context())
			}
			n, _ := io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, strings.Repeat("k", int(min(n, 1))))
		}),
		ReadHeaderTimeout: time.Minute,
		IdleTimeout:       time.Hour,
		ConnContext:       ConnContext,
		ConnState:         ConnState,
	}
	go func() { _ = srv.Serve(l.ListenPending(raw)) }()
	t.Cleanup(func() { srv.Close() })
	return raw.Addr().String()
}

// slowloris opens a connection that sends part of a request head and nothing more (or nothing
// at all, for an empty head).
func slowloris(t *testing.T, addr, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, r := dial(t, addr)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c, r
}

// TestSlowlorisGivesWay fills every slot of a pending listener with connections that never
// finish their first request head (silent, half a request line, a header trickled and never
// ended), then opens as many new clients again: each is answered 200, and the connections closed
// for them are the slow ones, oldest first.
func TestSlowlorisGivesWay(t *testing.T) {
	const max = 6
	l := NewLimiter(Limits{Max: max, Evict: true})
	addr := pendingServer(t, l)
	heads := []string{"", "GET / HT", "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n"}
	type client struct {
		c net.Conn
		r *bufio.Reader
	}
	var slow []client
	for i := range max {
		c, r := slowloris(t, addr, heads[i%len(heads)])
		slow = append(slow, client{c, r})
		waitFor(t, "the slow connection to be accepted", func() bool { return l.Stats().Pending == i+1 })
	}
	answered := 0
	for i := range max {
		c, r := dial(t, addr)
		if request(c, r, "/") == "200 OK" {
			answered++
		}
		if !closedByServer(slow[i].c, slow[i].r) {
			t.Fatalf("newcomer %d: the oldest slow connection (%d) is still open", i, i)
		}
	}
	// A client reads its answer before the server marks its connection idle (ConnState runs
	// after the response is written): wait for the last newcomer's turn, then check.
	waitFor(t, "every newcomer idle", func() bool { return l.Stats().Idle == max })
	st := l.Stats()
	if answered != max || st.Evicted != max || st.Open != max || st.Pending != 0 || st.Idle != max {
		t.Fatalf("%d of %d newcomers answered; stats %+v (want %d evicted, %d open and idle, 0 pending)",
			answered, max, st, max, max)
	}
}

// TestUploadInProgressIsSpared: a connection in the middle of sending a request body is never
// closed to make room, though it is the oldest: the newcomer takes the slot of a slow
// connection, and the upload then completes with 200.
func TestUploadInProgressIsSpared(t *testing.T) {
	const max = 3
	l := NewLimiter(Limits{Max: max, Evict: true})
	addr := pendingServer(t, l)
	up, upr := dial(t, addr)
	if _, err := io.WriteString(up, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload to be in progress", func() bool { st := l.Stats(); return st.Open == 1 && st.Pending == 0 })
	var slow []net.Conn
	for i := range max - 1 {
		c, _ := slowloris(t, addr, "GET / HTTP/1.1\r\n")
		slow = append(slow, c)
		waitFor(t, "the slow connection to be accepted", func() bool { return l.Stats().Pending == i+1 })
	}
	for i := range max - 1 {
		c, r := dial(t, addr)
		if st := request(c, r, "/"); st != "200 OK" {
			t.Fatalf("newcomer %d: status %q", i, st)
		}
	}
	if _, err := io.WriteString(up, "-done!"); err != nil {
		t.Fatalf("finishing the upload: %v", err)
	}
	res, err := http.ReadResponse(upr, nil)
	if err != nil {
		t.Fatalf("the upload in progress was cut off: %v", err)
	}
	res.Body.Close()
	if st := l.Stats(); res.StatusCode != 200 || st.Evicted != max-1 {
		t.Fatalf("upload answered %d; stats %+v (want the %d slow connections evicted)", res.StatusCode, st, max-1)
	}
}

// TestUntrustedGoFirst: with the slots held by an idle connection of a key holder (trusted) and
// younger untrusted ones, newcomers take the untrusted ones' slots, idle or pending; the
// trusted idle connection is closed only once no untrusted one is unproductive.
func TestUntrustedGoFirst(t *testing.T) {
	l := NewLimiter(Limits{Max: 3, Evict: true})
	addr := pendingServer(t, l)
	keyHolder, khr := dial(t, addr)
	if st := request(keyHolder, khr, "/login"); st != "200 OK" {
		t.Fatalf("login: %q", st)
	}
	anon, anr := dial(t, addr)
	if st := request(anon, anr, "/"); st != "200 OK" {
		t.Fatalf("anonymous: %q", st)
	}
	// The client reads its answer before the server marks the connection idle: wait for both
	// to be idle, so the anonymous one is unproductive longer than the slow one opened next.
	waitFor(t, "two idle connections", func() bool { return l.Stats().Idle == 2 })
	slow, slr := slowloris(t, addr, "GET /")
	waitFor(t, "three connections", func() bool { st := l.Stats(); return st.Idle == 2 && st.Pending == 1 })
	// Two newcomers that log in: the untrusted connections make room, the idle one first.
	for i, gone := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{anon, anr}, {slow, slr}} {
		c, r := dial(t, addr)
		if st := request(c, r, "/login"); st != "200 OK" {
			t.Fatalf("newcomer %d: %q", i, st)
		}
		if !closedByServer(gone.c, gone.r) {
			t.Fatalf("newcomer %d: untrusted connection %d still open", i, i)
		}
	}
	if st := l.Stats(); st.Evicted != 2 {
		t.Fatalf("stats %+v: want only the 2 untrusted connections evicted, the key holder's kept", st)
	}
	// Every slot is trusted now: the key holder, idle longest, makes room for the next.
	c, r := dial(t, addr)
	if st := request(c, r, "/"); st != "200 OK" {
		t.Fatalf("a newcomer beside trusted idle connections: %q", st)
	}
	if !closedByServer(keyHolder, khr) {
		t.Fatal("the trusted connection idle longest is still open")
	}
	if st := l.Stats(); st.Evicted != 3 {
		t.Fatalf("stats %+v, want 3 evicted", st)
	}
}

// selfSignedConfig is a TLS server configuration with a throwaway certificate for "localhost".
func selfSignedConfig(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// authServer is the agent listener's shape: TLS (handshake within a minute), then a first line
// that must be "auth", after which the connection is trusted; then it echoes lines.
func authServer(t *testing.T, l *Limiter) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.ListenPending(raw)
	t.Cleanup(func() { ln.Close() })
	cfg := selfSignedConfig(t)
	go func() {
		_ = Serve(ln, func(c net.Conn) {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			tc := tls.Server(c, cfg)
			r := bufio.NewReader(tc)
			if line, err := r.ReadString('\n'); err != nil || line != "auth\n" {
				return
			}
			Trust(c)
			_ = c.SetDeadline(time.Time{})
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				_, _ = io.WriteString(tc, line)
			}
		})
	}()
	return raw.Addr().String()
}

// agent is a client of authServer: it connects and authenticates, and echo checks that its
// connection still works.
type agent struct{ c *tls.Conn }

func dialTLS(t *testing.T, addr string) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func authenticate(t *testing.T, addr string) agent {
	t.Helper()
	c := dialTLS(t, addr)
	if _, err := io.WriteString(c, "auth\n"); err != nil {
		t.Fatal(err)
	}
	a := agent{c}
	if !a.echo() {
		t.Fatal("no echo after auth")
	}
	return a
}

func (a agent) echo() bool {
	_ = a.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(a.c, "ping\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(a.c).ReadString('\n')
	return err == nil && line == "ping\n"
}

// TestUnauthenticatedAgentsGiveWay: on a listener shaped like the agent listener, slots held by
// a connection stuck in its TLS handshake and one that finished it but never authenticated are
// taken by newcomers that authenticate; authenticated connections are never closed for a
// newcomer, which waits instead until one of them goes.
func TestUnauthenticatedAgentsGiveWay(t *testing.T) {
	l := NewLimiter(Limits{Max: 4, Evict: true})
	addr := authServer(t, l)
	agents := []agent{authenticate(t, addr), authenticate(t, addr)}
	noAuth := dialTLS(t, addr)
	inHandshake, inr := dial(t, addr)
	waitFor(t, "four connections, two pending", func() bool { st := l.Stats(); return st.Open == 4 && st.Pending == 2 })
	for i := range 2 {
		agents = append(agents, authenticate(t, addr))
		if st := l.Stats(); st.Evicted != uint64(i+1) {
			t.Fatalf("newcomer %d authenticated; stats %+v", i, st)
		}
	}
	if !closedByServer(noAuth, bufio.NewReader(noAuth)) || !closedByServer(inHandshake, inr) {
		t.Fatal("a connection that never authenticated is still open")
	}
	// Every slot is authenticated: a fifth agent waits for one to close, and none is evicted.
	fifth := make(chan agent, 1)
	go func() { fifth <- authenticate(t, addr) }()
	waitFor(t, "the fifth connection to wait", func() bool { return l.Stats().Pending == 0 })
	for i, a := range agents {
		if !a.echo() {
			t.Fatalf("authenticated connection %d was closed", i)
		}
	}
	agents[0].c.Close()
	if !(<-fifth).echo() {
		t.Fatal("the fifth agent does not work")
	}
	if st := l.Stats(); st.Evicted != 2 || st.Open != 4 || st.Untrusted != 0 {
		t.Fatalf("stats %+v, want 2 evicted and 4 authenticated open", st)
	}
}

// TestCarriedConnectionsAreSpared: one limiter for an HTTP listener, a raw listener whose
// connections are carried at once (a TCP endpoint's: Listen) and a pending one whose
// connections are carried after a first line (TLS passthrough after its ClientHello): a silent
// client of the raw listener and a carried connection that sends nothing more are never closed
// to make room; the newcomers take the slots of HTTP connections.
func TestCarriedConnectionsAreSpared(t *testing.T) {
	l := NewLimiter(Limits{Max: 3, Evict: true})
	httpAddr := pendingServer(t, l)
	echo := func(c net.Conn) {
		up, down := net.Pipe()
		go func() { _, _ = io.Copy(down, down) }() // the "agent": echoes what it is sent
		Pipe(c, up, 0)
	}
	serveRaw := func(ln net.Listener, first bool) string {
		t.Cleanup(func() { ln.Close() })
		go func() {
			_ = Serve(ln, func(c net.Conn) {
				if first {
					if _, err := bufio.NewReader(c).ReadString('\n'); err != nil { // one line, then carried
						c.Close()
						return
					}
				}
				echo(c)
			})
		}()
		return ln.Addr().String()
	}
	rawLn := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	tcpAddr := serveRaw(l.Listen(rawLn()), false)
	tlsAddr := serveRaw(l.ListenPending(rawLn()), true)
	silent, sr := dial(t, tcpAddr)
	waitFor(t, "the silent TCP client to be accepted", func() bool { return l.Stats().Open == 1 })
	carried, cr := dial(t, tlsAddr)
	if _, err := io.WriteString(carried, "hello\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection to be carried", func() bool { st := l.Stats(); return st.Open == 2 && st.Pending == 0 })
	for i := range 3 {
		c, r := dial(t, httpAddr)
		if st := request(c, r, "/"); st != "200 OK" {
			t.Fatalf("newcomer %d: %q", i, st)
		}
	}
	for name, c := range map[string]struct {
		c net.Conn
		r *bufio.Reader
	}{"silent TCP": {silent, sr}, "carried": {carried, cr}} {
		_ = c.c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c.c, "ping\n"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if line, err := c.r.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("%s connection closed to make room: %q %v", name, line, err)
		}
	}
	if st := l.Stats(); st.Evicted != 2 || st.Open != 3 {
		t.Fatalf("stats %+v, want 2 evicted (the first two newcomers, idle) and 3 open", st)
	}
}

// TestHTTP2StreamInProgressIsSpared: over HTTP/2 a connection is productive while a stream is
// open. With two slots, one held by an HTTP/2 upload in progress and one by a client silent in
// its TLS handshake, a newcomer takes the silent one's slot and the upload completes.
func TestHTTP2StreamInProgressIsSpared(t *testing.T) {
	l := NewLimiter(Limits{Max: 2, Evict: true})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, r.Proto)
		}),
		TLSConfig:         selfSignedConfig(t),
		ReadHeaderTimeout: time.Minute,
		IdleTimeout:       time.Hour,
		ConnState:         ConnState,
		ErrorLog:          log.New(io.Discard, "", 0), // the evicted client's handshake error
	}
	srv.TLSConfig.NextProtos = []string{"h2"}
	go func() { _ = srv.ServeTLS(l.ListenPending(raw), "", "") }()
	t.Cleanup(func() { srv.Close() })
	url := "https://" + raw.Addr().String() + "/"
	h2 := func() *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: time.Minute}
	}
	body, feed := io.Pipe()
	upload := make(chan string, 1)
	go func() {
		res, err := h2().Post(url, "text/plain", body)
		if err != nil {
			upload <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		upload <- res.Status + " " + string(b)
	}()
	if _, err := io.WriteString(feed, "half"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload's stream to be open", func() bool { st := l.Stats(); return st.Open == 1 && st.Pending == 0 && st.Idle == 0 })
	silent, sr := dial(t, raw.Addr().String())
	waitFor(t, "the silent client to be accepted", func() bool { return l.Stats().Pending == 1 })
	res, err := h2().Get(url)
	if err != nil {
		t.Fatalf("newcomer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "HTTP/2.0" {
		t.Fatalf("newcomer: %d %q", res.StatusCode, b)
	}
	if !closedByServer(silent, sr) {
		t.Fatal("the silent client is still open")
	}
	_, _ = io.WriteString(feed, "-done")
	feed.Close()
	if got := <-upload; got != "200 OK HTTP/2.0" {
		t.Fatalf("the HTTP/2 upload in progress: %q", got)
	}
	if st := l.Stats(); st.Evicted != 1 {
		t.Fatalf("stats %+v, want only the silent client evicted", st)
	}
}
