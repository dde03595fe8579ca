package ingress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tripEndpoint is an account's endpoint whose streams are TCP connections to its upstream,
// counted as they are opened and closed.
type tripEndpoint struct {
	tlsEndpoint
	id, account, upstream string
	dials, closes         atomic.Int64
	writes                atomic.Int64 // Writes on its streams: each a frame to a real agent
}

func (e *tripEndpoint) ID() string        { return e.id }
func (e *tripEndpoint) AccountID() string { return e.account }

func (e *tripEndpoint) Dial(ctx context.Context, _, _, _ string, _ bool) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.upstream)
	if err != nil {
		return nil, err
	}
	e.dials.Add(1)
	return &countedConn{Conn: c, closes: &e.closes, writes: &e.writes}, nil
}

// countedConn counts its first Close, and its Writes.
type countedConn struct {
	net.Conn
	closes, writes *atomic.Int64
	once           sync.Once
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.closes.Add(1) })
	return c.Conn.Close()
}

// tripWorld is a public HTTP listener with two accounts' endpoints, a.example.com (account A)
// and b.example.com (account B), each with its own upstream.
type tripWorld struct {
	s    *Server
	addr string
	a, b *tripEndpoint
}

func serveUpstream(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	us := &http.Server{Handler: h}
	go func() { _ = us.Serve(ln) }()
	t.Cleanup(func() { us.Close() })
	return ln.Addr().String()
}

func newTripWorld(t *testing.T, ha, hb http.Handler) *tripWorld {
	t.Helper()
	w := &tripWorld{
		a: &tripEndpoint{id: "ep_a", account: "acct_a", upstream: serveUpstream(t, ha)},
		b: &tripEndpoint{id: "ep_b", account: "acct_b", upstream: serveUpstream(t, hb)},
	}
	w.s, w.addr = servePublic(t, Config{Lookup: byHost(map[string]Endpoint{"a.example.com": w.a, "b.example.com": w.b})})
	return w
}

// byHost is a Lookup of the endpoints by host.
func byHost(eps map[string]Endpoint) func(proto, host string) Endpoint {
	return func(_, host string) Endpoint { return eps[host] }
}

// servePublic runs a public HTTP listener of cfg on loopback until the test ends, and returns
// it and its address.
func servePublic(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s := New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.ServeHTTP(ln) }()
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

// publicConn is one keep-alive connection of a public client.
type publicConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (w *tripWorld) dial(t *testing.T) *publicConn {
	t.Helper()
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &publicConn{c: c, br: bufio.NewReader(c)}
}

// get sends a GET for host and path and returns the answer's status, error code and body.
func (pc *publicConn) get(t *testing.T, host, path string) (int, string, string) {
	t.Helper()
	fmt.Fprintf(pc.c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatalf("GET %s%s: %v", host, path, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s%s: body: %v", host, path, err)
	}
	return resp.StatusCode, resp.Header.Get("ngrok-error-code"), string(body)
}

// whoAnswers answers with the account's name and the address its stream came from.
func whoAnswers(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, name+" "+r.RemoteAddr)
	})
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStreamTripStreamsPerConnection: one public connection asking for both accounts' hosts in
// turn keeps one stream per endpoint, each serving only its own account's requests; another
// public connection to A's host gets a stream of its own, never the first one's.
func TestStreamTripStreamsPerConnection(t *testing.T) {
	w := newTripWorld(t, whoAnswers("A"), whoAnswers("B"))
	one, two := w.dial(t), w.dial(t)
	seen := map[string]map[string]bool{}
	note := func(pc *publicConn, name, host string) string {
		st, _, body := pc.get(t, host, "/")
		if st != 200 || !strings.HasPrefix(body, name+" ") {
			t.Fatalf("%s: %d %q, want %s's answer", host, st, body, name)
		}
		return strings.TrimPrefix(body, name+" ")
	}
	for range 3 {
		for _, c := range []struct {
			key, name, host string
			pc              *publicConn
		}{{"one-A", "A", "a.example.com", one}, {"one-B", "B", "b.example.com", one}, {"two-A", "A", "a.example.com", two}} {
			if seen[c.key] == nil {
				seen[c.key] = map[string]bool{}
			}
			seen[c.key][note(c.pc, c.name, c.host)] = true
		}
	}
	for k, streams := range seen {
		if len(streams) != 1 {
			t.Errorf("%s used %d streams, want 1 kept alive: %v", k, len(streams), streams)
		}
	}
	for s := range seen["one-A"] {
		if seen["two-A"][s] {
			t.Errorf("the second public connection was served on the first one's stream %s", s)
		}
	}
	if a, b := w.a.dials.Load(), w.b.dials.Load(); a != 2 || b != 1 {
		t.Errorf("streams opened: A %d, B %d, want 2 and 1", a, b)
	}
}

// TestStreamTripClientLeaving: a public client that leaves while its request waits for the
// agent's answer, or while the answer's body is being copied, has its stream closed (the
// upstream sees its connection end), and the other account's traffic is not disturbed.
func TestStreamTripClientLeaving(t *testing.T) {
	ended := make(chan string, 2)
	w := newTripWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/part" {
			io.WriteString(rw, "first part") // chunked: the proxy flushes it at once
			http.NewResponseController(rw).Flush()
		}
		<-r.Context().Done() // the upstream's connection ended
		ended <- r.URL.Path
	}), whoAnswers("B"))
	for _, path := range []string{"/wait", "/part"} {
		pc := w.dial(t)
		fmt.Fprintf(pc.c, "GET %s HTTP/1.1\r\nHost: a.example.com\r\n\r\n", path)
		if path == "/part" {
			resp, err := http.ReadResponse(pc.br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: %v %v", path, resp, err)
			}
			buf := make([]byte, 10)
			if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first part" {
				t.Fatalf("%s: %q %v", path, buf, err)
			}
		} else {
			time.Sleep(50 * time.Millisecond) // the request reaches the upstream
		}
		pc.c.Close()
		select {
		case got := <-ended:
			if got != path {
				t.Fatalf("ended %s, want %s", got, path)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the stream was not closed after the client left", path)
		}
	}
	waitFor(t, "A's streams closed", func() bool { return w.a.closes.Load() == 2 })
	if st, _, body := w.dial(t).get(t, "b.example.com", "/"); st != 200 || !strings.HasPrefix(body, "B ") {
		t.Errorf("B after A's clients left: %d %q", st, body)
	}
}

// TestStreamTripUpgrade: a websocket upgrade gets the stream for itself, both ways, for each
// account's endpoint.
func TestStreamTripUpgrade(t *testing.T) {
	echo := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			c, brw, err := http.NewResponseController(rw).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n" + name + " ready\n")
			brw.Flush()
			for {
				line, err := brw.ReadString('\n')
				if err != nil {
					return
				}
				brw.WriteString(name + " " + line)
				brw.Flush()
			}
		})
	}
	w := newTripWorld(t, echo("A"), echo("B"))
	for _, c := range []struct{ name, host string }{{"A", "a.example.com"}, {"B", "b.example.com"}} {
		pc := w.dial(t)
		fmt.Fprintf(pc.c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", c.host)
		resp, err := http.ReadResponse(pc.br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("%s: upgrade: %v %v", c.name, resp, err)
		}
		want := []string{c.name + " ready\n", c.name + " ping\n", c.name + " pong\n"}
		for i, send := range []string{"", "ping\n", "pong\n"} {
			io.WriteString(pc.c, send)
			if line, err := pc.br.ReadString('\n'); err != nil || line != want[i] {
				t.Fatalf("%s: read %q %v, want %q", c.name, line, err, want[i])
			}
		}
	}
}

// TestStreamTripHeaderBound: an answer whose headers pass 1 MiB is a 502 ERR_NGROK_8012 saying
// so, its stream is closed, and the same public connection then reaches the other account.
func TestStreamTripHeaderBound(t *testing.T) {
	w := newTripWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-Big", strings.Repeat("x", 1<<20+1))
		io.WriteString(rw, "too much")
	}), whoAnswers("B"))
	pc := w.dial(t)
	st, code, body := pc.get(t, "a.example.com", "/")
	if st != 502 || code != "ERR_NGROK_8012" || !strings.Contains(body, "exceeded 1048576 bytes") {
		t.Fatalf("headers past the bound: %d %s %q, want 502 ERR_NGROK_8012 naming the bound", st, code, body)
	}
	waitFor(t, "A's stream closed", func() bool { return w.a.closes.Load() == 1 })
	if st, _, body := pc.get(t, "b.example.com", "/"); st != 200 || !strings.HasPrefix(body, "B ") {
		t.Errorf("B after A's failure: %d %q", st, body)
	}
}

// TestStreamTripAgentFails: a stream that cannot be opened, and one closed without an answer, are
// each a 502 ERR_NGROK_8012 of the account's endpoint.
func TestStreamTripAgentFails(t *testing.T) {
	w := newTripWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(rw).Hijack()
		if err == nil {
			c.Close() // no answer at all
		}
	}), whoAnswers("B"))
	w.b.upstream = "127.0.0.1:1" // nothing listens: the dial fails
	for _, host := range []string{"a.example.com", "b.example.com"} {
		st, code, body := w.dial(t).get(t, host, "/")
		if st != 502 || code != "ERR_NGROK_8012" || !strings.Contains(body, "tunnel failed") {
			t.Errorf("%s: %d %s %q, want 502 ERR_NGROK_8012", host, st, code, body)
		}
	}
}

// TestStreamTripInformational: an agent's 103 Early Hints reaches the client before the final
// answer, and the stream is kept for the next request.
func TestStreamTripInformational(t *testing.T) {
	h := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Link", "</"+name+".css>; rel=preload")
			rw.WriteHeader(http.StatusEarlyHints)
			io.WriteString(rw, name+" "+r.RemoteAddr)
		})
	}
	w := newTripWorld(t, h("A"), h("B"))
	pc := w.dial(t)
	for _, name := range []string{"A", "B", "A"} {
		host := strings.ToLower(name) + ".example.com"
		fmt.Fprintf(pc.c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		hints, err := http.ReadResponse(pc.br, nil)
		if err != nil || hints.StatusCode != http.StatusEarlyHints || hints.Header.Get("Link") != "</"+name+".css>; rel=preload" {
			t.Fatalf("%s: first answer %v %v, want 103 with %s's Link", host, hints, err, name)
		}
		resp, err := http.ReadResponse(pc.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), name+" ") {
			t.Fatalf("%s: %d %q", host, resp.StatusCode, body)
		}
	}
	if a, b := w.a.dials.Load(), w.b.dials.Load(); a != 1 || b != 1 {
		t.Errorf("streams opened: A %d, B %d, want 1 each", a, b)
	}
}
