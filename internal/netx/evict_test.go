package netx

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// evictServer serves HTTP on a real socket through a limiter of max slots that evicts idle
// connections, with an idle timeout far longer than any test: only eviction frees a slot. A
// request for /block waits until release is closed.
func evictServer(t *testing.T, max int) (*Limiter, string, chan struct{}) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimiter(Limits{Max: max, Evict: true})
	release := make(chan struct{})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		}),
		IdleTimeout: time.Hour,
		ConnState:   ConnState,
	}
	go func() { _ = srv.Serve(l.Listen(raw)) }()
	t.Cleanup(func() { srv.Close() })
	return l, raw.Addr().String(), release
}

// request sends one keep-alive request on c and returns its status line ("" when the
// connection ended first).
func request(c net.Conn, r *bufio.Reader, path string) string {
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return ""
	}
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		return ""
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.Status
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after 30 s: %s", what)
		}
	}
}

// closedByServer reports whether the server closed c: a read ends with EOF or a reset.
func closedByServer(c net.Conn, r *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := r.ReadByte()
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestEvictIdleAdmitsNewClients fills every slot with idle keep-alive connections (one request
// each), then opens as many new ones again: each newcomer is answered, and the connections
// closed for them are the oldest idle ones, in order.
func TestEvictIdleAdmitsNewClients(t *testing.T) {
	const max = 8
	l, addr, _ := evictServer(t, max)
	type client struct {
		c net.Conn
		r *bufio.Reader
	}
	var old []client
	for i := range max {
		c, r := dial(t, addr)
		if st := request(c, r, "/"); st != "200 OK" {
			t.Fatalf("idle connection %d: status %q", i, st)
		}
		old = append(old, client{c, r})
		waitFor(t, "the connection to be idle", func() bool { return l.Stats().Idle == i+1 })
	}
	answered := 0
	for i := range max {
		c, r := dial(t, addr)
		if st := request(c, r, "/"); st == "200 OK" {
			answered++
		}
		if !closedByServer(old[i].c, old[i].r) {
			t.Fatalf("newcomer %d: the oldest idle connection (%d) is still open", i, i)
		}
	}
	st := l.Stats()
	if answered != max || st.Evicted != max || st.Open != max {
		t.Fatalf("%d of %d newcomers answered; stats %+v (want %d evicted, %d open)", answered, max, st, max, max)
	}
}

// TestEvictIdleSparesActiveConnections: connections in the middle of a request are never
// closed to make room. A newcomer waits while every slot is busy, and is answered once one
// connection finishes its request and goes idle.
func TestEvictIdleSparesActiveConnections(t *testing.T) {
	const max = 4
	l, addr, release := evictServer(t, max)
	busy := make(chan string, max)
	for range max {
		c, r := dial(t, addr)
		go func() { busy <- request(c, r, "/block") }()
	}
	waitFor(t, "every slot to be busy", func() bool { return l.Stats().Open == max })
	c, r := dial(t, addr)
	answer := make(chan string, 1)
	go func() { answer <- request(c, r, "/") }()
	// The newcomer is accepted and waits for a slot: nothing is evicted meanwhile.
	time.Sleep(200 * time.Millisecond)
	select {
	case st := <-answer:
		t.Fatalf("the newcomer was answered (%q) while every slot was busy", st)
	default:
	}
	if st := l.Stats(); st.Evicted != 0 || st.Open != max {
		t.Fatalf("stats %+v while every slot was busy", st)
	}
	close(release)
	if st := <-answer; st != "200 OK" {
		t.Fatalf("newcomer: status %q", st)
	}
	ok := 0
	for range max {
		if strings.HasPrefix(<-busy, "200") {
			ok++
		}
	}
	if st := l.Stats(); ok != max || st.Evicted != 1 {
		t.Fatalf("%d of %d blocked requests answered; stats %+v (want 1 evicted)", ok, max, st)
	}
}
