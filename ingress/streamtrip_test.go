package ingress

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
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
}

func (e *tripEndpoint) ID() string        { return e.id }
func (e *tripEndpoint) AccountID() string { return e.account }

func (e *tripEndpoint) Dial(ctx context.Context, _, _, _ string, _ bool) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.upstream)
	if err != nil {
		return nil, err
	}
	e.dials.Add(1)
	return &countedConn{Conn: c, closes: &e.closes}, nil
}

// countedConn counts its first Close.
type countedConn struct {
	net.Conn
	closes *atomic.Int64
	once   sync.Once
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
	w.s = New(Config{Lookup: func(proto, host string) Endpoint {
		switch host {
		case "a.example.com":
			return w.a
		case "b.example.com":
			return w.b
		}
		return nil
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.s.ServeHTTP(ln) }()
	t.Cleanup(func() { w.s.Close() })
	w.addr = ln.Addr().String()
	return w
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

// TestStreamTripRequestBodies: bodies with a Content-Length and chunked ones reach the upstream
// whole, and an upstream answering before it has read a large body is heard (413), not waited
// on or taken for a failure.
func TestStreamTripRequestBodies(t *testing.T) {
	digest := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/early":
				rw.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			case "/answer-first":
				rw.Write(make([]byte, 4<<20))
				return
			}
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				rw.WriteHeader(400)
				return
			}
			fmt.Fprintf(rw, "%s %d %s %v", name, n, hex.EncodeToString(h.Sum(nil)), r.TransferEncoding)
		})
	}
	w := newTripWorld(t, digest("A"), digest("B"))
	payload := strings.Repeat("0123456789abcdef", 40000) // 640,000 bytes: several windows' worth
	sum := sha256.Sum256([]byte(payload))
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", w.addr)
	}}}
	defer client.CloseIdleConnections()
	for _, c := range []struct {
		name, host string
		chunked    bool
		want       string
	}{
		{"A", "a.example.com", false, "[]"},
		{"A", "a.example.com", true, "[chunked]"},
		{"B", "b.example.com", true, "[chunked]"},
	} {
		var body io.Reader = strings.NewReader(payload)
		if c.chunked {
			body = io.MultiReader(body) // no known length: sent chunked
		}
		req, _ := http.NewRequest("POST", "http://"+c.host+"/upload", body)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf("%s %d %s %s", c.name, len(payload), hex.EncodeToString(sum[:]), c.want)
		if resp.StatusCode != 200 || string(got) != want {
			t.Errorf("%s chunked=%v: %d %q, want %q", c.name, c.chunked, resp.StatusCode, got, want)
		}
	}

	// A large body the upstream does not wait for, answering at once (413) or with a large
	// answer of its own before it reads (which a stream written and read in turn would
	// deadlock on); the client's writes may fail once the answer is in, so they are made on
	// the side.
	for _, path := range []string{"/early", "/answer-first"} {
		pc := w.dial(t)
		big := 8 << 20
		fmt.Fprintf(pc.c, "POST %s HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: %d\r\n\r\n", path, big)
		go func() { _, _ = pc.c.Write(make([]byte, big)) }()
		resp, err := http.ReadResponse(pc.br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if path == "/early" && resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d, want 413", path, resp.StatusCode)
		}
		if path == "/answer-first" && (resp.StatusCode != 200 || n != 4<<20 || err != nil) {
			t.Errorf("%s: %d, %d bytes, %v; want 200 and 4 MiB", path, resp.StatusCode, n, err)
		}
	}
}

// TestStreamTripBodyStreams: a body with a Content-Length reaches the upstream as the client
// sends it, not once it is whole (an upload in progress, the first bytes of a long one).
func TestStreamTripBodyStreams(t *testing.T) {
	first := make(chan string, 1)
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b := make([]byte, 4)
		if _, err := io.ReadFull(r.Body, b); err == nil {
			first <- string(b)
		}
		rest, _ := io.ReadAll(r.Body)
		fmt.Fprintf(rw, "%s%s", b, rest)
	})
	w := newTripWorld(t, h, h)
	for _, host := range []string{"a.example.com", "b.example.com"} {
		pc := w.dial(t)
		fmt.Fprintf(pc.c, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 10\r\n\r\nhalf", host)
		select {
		case got := <-first:
			if got != "half" {
				t.Fatalf("%s: the upstream read %q first", host, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the first part of the body did not reach the upstream", host)
		}
		io.WriteString(pc.c, " done!")
		resp, err := http.ReadResponse(pc.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "half done!" {
			t.Fatalf("%s: %d %q", host, resp.StatusCode, body)
		}
	}
}

// TestStreamTripBadBody: a request body that breaks off (a malformed chunk) ends the exchange
// with a 502 ERR_NGROK_8012 instead of leaving the upstream, and the client, waiting for the
// rest; the other account's requests on the same public connection are not disturbed before.
func TestStreamTripBadBody(t *testing.T) {
	h := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			n, err := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(rw, "%s %d %v", name, n, err)
		})
	}
	w := newTripWorld(t, h("A"), h("B"))
	pc := w.dial(t)
	if st, _, body := pc.get(t, "b.example.com", "/"); st != 200 || body != "B 0 <nil>" {
		t.Fatalf("B: %d %q", st, body)
	}
	fmt.Fprintf(pc.c, "POST /upload HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n")
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatalf("answer to a malformed body: %v", err)
	}
	if resp.StatusCode != 502 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_8012" {
		t.Fatalf("malformed body: %d %s, want 502 ERR_NGROK_8012", resp.StatusCode, resp.Header.Get("ngrok-error-code"))
	}
	waitFor(t, "A's stream closed", func() bool { return w.a.closes.Load() == 1 })
}

// TestStreamTripExpectContinue: a request with Expect: 100-continue sends its body only once the
// agent's 100 Continue has come back to the client; when the upstream answers without asking
// for the body (401), the client is answered and its body is never read.
func TestStreamTripExpectContinue(t *testing.T) {
	h := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/refuse" {
				rw.WriteHeader(http.StatusUnauthorized)
				return
			}
			n, _ := io.Copy(io.Discard, r.Body) // net/http sends the 100 Continue here
			fmt.Fprintf(rw, "%s %d %s", name, n, r.Header.Get("Expect"))
		})
	}
	w := newTripWorld(t, h("A"), h("B"))
	client := &http.Client{Transport: &http.Transport{
		ExpectContinueTimeout: time.Minute, // the body goes only after a 100 Continue
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", w.addr)
		}}}
	defer client.CloseIdleConnections()
	for _, c := range []struct {
		name, host, path string
		status           int
		want             string
	}{
		{"A", "a.example.com", "/upload", 200, "A 5 100-continue"},
		{"B", "b.example.com", "/upload", 200, "B 5 100-continue"},
		{"A", "a.example.com", "/refuse", 401, ""},
	} {
		body := &readFlag{r: strings.NewReader("hello")}
		var continued atomic.Bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { continued.Store(true) }})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+c.host+c.path, body)
		req.ContentLength = 5
		req.Header.Set("Expect", "100-continue")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s%s: %v", c.host, c.path, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.want != "" && string(got) != c.want) {
			t.Errorf("%s%s: %d %q, want %d %q", c.host, c.path, resp.StatusCode, got, c.status, c.want)
		}
		if sent := c.status == 200; continued.Load() != sent || body.read.Load() != sent {
			t.Errorf("%s%s: 100 Continue received %v, body read %v; want both %v", c.host, c.path, continued.Load(), body.read.Load(), sent)
		}
	}
}

// readFlag records whether its reader was read.
type readFlag struct {
	r    io.Reader
	read atomic.Bool
}

func (f *readFlag) Read(p []byte) (int, error) {
	f.read.Store(true)
	return f.r.Read(p)
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
