package ingress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The stream transport's pool, driven directly: requests carry the dialInfo and key that
// forward gives them.

// poolUpstream is an upstream whose streams an endpoint of account acct opens.
func poolUpstream(t *testing.T, acct string, h http.Handler) *tripEndpoint {
	return &tripEndpoint{id: "ep_" + acct, account: acct, upstream: serveUpstream(t, h)}
}

// trip sends one request for key over st to e and returns the answer; the caller reads and
// closes its body.
func trip(t *testing.T, st *streamTransport, e *tripEndpoint, key, method, path string, body io.Reader) *http.Response {
	t.Helper()
	ctx := context.WithValue(context.Background(), dialKey, &dialInfo{proto: "http", dial: func(ctx context.Context) (net.Conn, error) {
		return e.Dial(ctx, "", "", "", false)
	}})
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+key+path, body)
	resp, err := st.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s for %s: %v", method, path, key, err)
	}
	return resp
}

// tripBody sends one request and returns the whole body of its answer.
func tripBody(t *testing.T, st *streamTransport, e *tripEndpoint, key, method, path string, body io.Reader) string {
	t.Helper()
	resp := trip(t, st, e, key, method, path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s for %s: body: %v", method, path, key, err)
	}
	return string(b)
}

func (t *streamTransport) idleCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.idleN
}

// TestStreamPoolReuse: a stream whose answer was read to its end serves the next request of its
// key; one whose answer was closed half read is closed, never reused; a key (another account's
// endpoint, or another public connection) never gets a stream of another key.
func TestStreamPoolReuse(t *testing.T) {
	h := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/big" {
				io.WriteString(w, strings.Repeat("x", 1<<20))
				return
			}
			io.WriteString(w, name+" "+r.RemoteAddr)
		})
	}
	st := newStreamTransport()
	defer st.CloseIdleConnections()
	a, b := poolUpstream(t, "acct_a", h("A")), poolUpstream(t, "acct_b", h("B"))
	first := tripBody(t, st, a, "ea.c1", "GET", "/", nil)
	if again := tripBody(t, st, a, "ea.c1", "GET", "/", nil); again != first {
		t.Fatalf("the stream was not reused: %q then %q", first, again)
	}
	if other := tripBody(t, st, a, "ea.c2", "GET", "/", nil); other == first {
		t.Fatalf("another public connection got the first one's stream %q", other)
	}
	if bs := tripBody(t, st, b, "eb.c1", "GET", "/", nil); !strings.HasPrefix(bs, "B ") {
		t.Fatalf("B's key: %q", bs)
	}
	if a.dials.Load() != 2 || b.dials.Load() != 1 {
		t.Fatalf("streams opened: A %d, B %d, want 2 and 1", a.dials.Load(), b.dials.Load())
	}

	// Half read: the rest of the answer is still on the stream, which is closed.
	resp := trip(t, st, a, "ea.c1", "GET", "/big", nil)
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a.closes.Load() != 1 {
		t.Fatalf("a half-read answer's stream: %d closed, want 1", a.closes.Load())
	}
	if next := tripBody(t, st, a, "ea.c1", "GET", "/", nil); !strings.HasPrefix(next, "A ") || next == first {
		t.Fatalf("after a half-read answer: %q (the closed stream was %q)", next, first)
	}
	if a.dials.Load() != 3 {
		t.Fatalf("streams opened for A: %d, want 3", a.dials.Load())
	}
}

// TestStreamPoolBounds: at most maxIdlePerKey streams of a key and maxIdle in all stay idle
// (the longest idle goes first); an idle stream is closed after idleTimeout; CloseIdleConnections
// closes them all.
func TestStreamPoolBounds(t *testing.T) {
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	gate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gate" {
			mu.Lock()
			if arrived++; arrived == 6 {
				close(all)
			}
			mu.Unlock()
			<-all // six requests in flight at once: six streams
		}
		io.WriteString(w, "ok")
	})
	st := newStreamTransport()
	defer st.CloseIdleConnections()
	a := poolUpstream(t, "acct_a", gate)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { tripBody(t, st, a, "ea.c1", "GET", "/gate", nil) })
	}
	wg.Wait()
	if n, closed := st.idleCount(), a.closes.Load(); n != 4 || closed != 2 {
		t.Fatalf("after 6 streams of one key: %d idle, %d closed; want 4 and 2", n, closed)
	}

	st.maxIdle = 5
	b := poolUpstream(t, "acct_b", gate)
	tripBody(t, st, b, "eb.c1", "GET", "/", nil)
	tripBody(t, st, b, "eb.c2", "GET", "/", nil)
	if n, closed := st.idleCount(), a.closes.Load(); n != 5 || closed != 3 {
		t.Fatalf("past maxIdle: %d idle, A's closed %d; want 5 and 3 (A's longest idle evicted)", n, closed)
	}
	st.CloseIdleConnections()
	if n := st.idleCount(); n != 0 || a.closes.Load() != 6 || b.closes.Load() != 2 {
		t.Fatalf("after CloseIdleConnections: %d idle, closed A %d B %d", n, a.closes.Load(), b.closes.Load())
	}

	st = newStreamTransport()
	defer st.CloseIdleConnections()
	st.idleTimeout, st.watchAfter = 200*time.Millisecond, 20*time.Millisecond
	c := poolUpstream(t, "acct_c", gate)
	tripBody(t, st, c, "ec.c1", "GET", "/", nil)
	waitFor(t, "the idle stream closed after its timeout", func() bool { return c.closes.Load() == 1 && st.idleCount() == 0 })
}

// TestStreamPoolStaleStreams: a stream its upstream closes while idle is dropped from the pool by
// its watcher, so a request that cannot be replayed (a POST with a body) gets a new stream; a
// stream closed before the watcher started is found closed by a GET, which is sent again on a
// new stream.
func TestStreamPoolStaleStreams(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.RemoteAddr, b)
	})
	a := &tripEndpoint{id: "ep_a", account: "acct_a"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The upstream closes a kept-alive connection after 50 ms idle, as many servers do.
	us := &http.Server{Handler: h, IdleTimeout: 50 * time.Millisecond}
	go func() { _ = us.Serve(ln) }()
	defer us.Close()
	a.upstream = ln.Addr().String()

	st := newStreamTransport()
	defer st.CloseIdleConnections()
	st.watchAfter = 10 * time.Millisecond
	tripBody(t, st, a, "ea.c1", "GET", "/", nil)
	waitFor(t, "the watcher to drop the closed stream", func() bool { return st.idleCount() == 0 && a.closes.Load() == 1 })
	if got := tripBody(t, st, a, "ea.c1", "POST", "/", strings.NewReader("body")); !strings.HasPrefix(got, "POST ") || !strings.HasSuffix(got, " body") {
		t.Fatalf("POST after the upstream closed the idle stream: %q", got)
	}

	// Unwatched: the stream is found closed only when used.
	st.watchAfter = time.Hour
	tripBody(t, st, a, "ea.c2", "GET", "/", nil)
	time.Sleep(200 * time.Millisecond) // the upstream closes it
	dials := a.dials.Load()
	if got := tripBody(t, st, a, "ea.c2", "GET", "/", nil); !strings.HasPrefix(got, "GET ") {
		t.Fatalf("GET on a stream closed while idle: %q", got)
	}
	if a.dials.Load() != dials+1 {
		t.Fatalf("the GET was not sent again on a new stream: %d dials, want %d", a.dials.Load(), dials+1)
	}
}
