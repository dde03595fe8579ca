package agents

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

	"golang.ngrok.com/ngrok/config"
)

// The body timeout of public requests (--public-body-timeout): a request whose client stops
// sending its body is answered 408 ERR_NGROK_3220 once no byte of it has come for the timeout,
// its upstream sees the body end in an error, and its connection is closed; an upload that keeps
// moving, however slowly, is not cut; the head of a request whose body is slow reaches the
// upstream on its own; and another account is served meanwhile.

// bodyTimeout is the timeout the tests' server runs with.
const bodyTimeout = time.Second

// bodyLog is what an upstream saw of its requests' bodies, by path: that the request arrived,
// and once its handler read the body to its end or an error, how many bytes and the error.
type bodyLog struct {
	mu      sync.Mutex
	arrived map[string]bool
	read    map[string]string
}

func newBodyLog() *bodyLog {
	return &bodyLog{arrived: map[string]bool{}, read: map[string]string{}}
}

// handler notes each request's arrival, then answers /early with 401 unread; /answer-first…
// sends its answer's head and first bytes, then reads the body; any other path reads the body
// whole and answers with its length.
func (l *bodyLog) handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.arrived[r.URL.Path] = true
		l.mu.Unlock()
		if r.URL.Path == "/early" {
			// Closing: net/http would otherwise read the unread body before answering.
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/answer-first") {
			_ = http.NewResponseController(w).EnableFullDuplex()
			_, _ = io.WriteString(w, "started ")
			_ = http.NewResponseController(w).Flush()
		}
		b, err := io.ReadAll(r.Body)
		l.mu.Lock()
		l.read[r.URL.Path] = fmt.Sprintf("%d %v", len(b), err)
		l.mu.Unlock()
		fmt.Fprintf(w, "%s %d", name, len(b))
	})
}

func (l *bodyLog) sawArrive(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.arrived[path]
}

// readOf is what the handler's read of path's body ended with ("" while it has not ended).
func (l *bodyLog) readOf(path string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.read[path]
}

// bodyWorld is a server with a body timeout (and args), account A's http endpoint and https endpoint and
// account B's http endpoint, each served by its account's agent.
type bodyWorld struct {
	*world
	a, b          *bodyLog
	hostA, hostB  string
	secureA       string
	secureClientA *http.Client
}

func newBodyWorld(t *testing.T, timeout time.Duration, args ...string) *bodyWorld {
	w := start(t, append([]string{"--public-body-timeout", timeout.String()}, args...)...)
	bw := &bodyWorld{world: w, a: newBodyLog(), b: newBodyLog(),
		hostA: "body-a.edgeplane.app", hostB: "body-b.edgeplane.app", secureA: "body-a-tls.edgeplane.app"}
	listen := func(w *world, l *bodyLog, name string, opts ...config.HTTPEndpointOption) {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(opts...))
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		serveTunnel(t, tun, l.handler(name))
	}
	listen(w, bw.a, "A", config.WithDomain(bw.hostA), config.WithScheme(config.SchemeHTTP))
	listen(w, bw.a, "A", config.WithDomain(bw.secureA))
	listen(w.asAccount("bodyb"), bw.b, "B", config.WithDomain(bw.hostB), config.WithScheme(config.SchemeHTTP))
	bw.secureClientA = w.httpsClient()
	return bw
}

// send opens a connection to the HTTP listener and writes a request's head and the first part
// of its body; it returns the connection, its reader and the time just before its last byte
// was written (the server cannot have read it sooner: a time taken after the write may trail
// the server's read by a scheduling delay).
func (bw *bodyWorld) send(t *testing.T, head, first string) (net.Conn, *bufio.Reader, time.Time) {
	t.Helper()
	c, err := net.Dial("tcp", bw.http)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(eventuallyFloor))
	sent := time.Now()
	if _, err := io.WriteString(c, head+first); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c), sent
}

// readWithin reads body to its end and closes it, closing it sooner if the end has not come
// within eventuallyFloor (an HTTP/2 answer's body is not ended by the client's timeout); late
// says it had not.
func readWithin(body io.ReadCloser) (b []byte, err error, late bool) {
	var gaveUp atomic.Bool
	stop := time.AfterFunc(eventuallyFloor, func() { gaveUp.Store(true); body.Close() })
	defer stop.Stop()
	defer body.Close()
	b, err = io.ReadAll(body)
	return b, err, gaveUp.Load()
}

// wantBodyTimedOut reads the answer on c: 408 ERR_NGROK_3220, not sooner than the body timeout
// after the client's last byte (since), and then the connection closed.
func wantBodyTimedOut(t *testing.T, what string, c net.Conn, br *bufio.Reader, since time.Time) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", what, err)
	}
	took := time.Since(since)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3220" {
		t.Errorf("%s: %d %s, want 408 ERR_NGROK_3220", what, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
	}
	if took < bodyTimeout {
		t.Errorf("%s: answered %v after the client's last byte, before the %v body timeout", what, took, bodyTimeout)
	}
	if !resp.Close {
		t.Errorf("%s: the 408 does not close the connection", what)
	}
	if !closedWithin(c, eventuallyFloor) {
		t.Errorf("%s: the connection stayed open after the 408", what)
	}
}

// TestPublicBodyTimeout: requests whose clients stop sending their bodies (a Content-Length or
// chunked body, nothing of it or a part, over HTTP/1.1 and HTTP/2) are answered 408
// ERR_NGROK_3220 after the body timeout; each one's head reached the upstream on its own, and
// the upstream's read of the body ended in an error, not a clean end. An upload sending a byte
// every 300 ms under the 1 s timeout completes, its upstream reading every byte. Account B's
// requests are served while A's stalled uploads are held.
func TestPublicBodyTimeout(t *testing.T) {
	bw := newBodyWorld(t, bodyTimeout)

	t.Run("stalled", func(t *testing.T) {
		for _, c := range []struct{ path, head, first string }{
			{"/nothing", "Content-Length: 1000\r\n", ""},
			{"/part", "Content-Length: 1000\r\n", "first bytes"},
			{"/chunked", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n"},
		} {
			conn, br, since := bw.send(t, "POST "+c.path+" HTTP/1.1\r\nHost: "+bw.hostA+"\r\n"+c.head+"\r\n", c.first)
			wantBodyTimedOut(t, c.path, conn, br, since)
			if !bw.a.sawArrive(c.path) {
				t.Errorf("%s: the upstream never saw the request", c.path)
			}
			eventually(t, time.Second, c.path+": the upstream's read of the body to end", func() bool { return bw.a.readOf(c.path) != "" })
			if got := bw.a.readOf(c.path); strings.HasSuffix(got, " <nil>") {
				t.Errorf("%s: the upstream read the cut body as complete: %s", c.path, got)
			}
		}
	})

	t.Run("stalled, answered without the agent", func(t *testing.T) {
		// An unknown host's 404: net/http reads the rest of the body before the answer, and
		// waits no longer than the body timeout for it.
		conn, br, since := bw.send(t, "POST / HTTP/1.1\r\nHost: nobody.edgeplane.app\r\nContent-Length: 1000\r\n\r\n", "")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3200" {
			t.Errorf("%d %s, want 404 ERR_NGROK_3200", resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
		if took := time.Since(since); took < bodyTimeout {
			t.Errorf("answered after %v: the body was not waited for", took)
		}
		if !closedWithin(conn, eventuallyFloor) {
			t.Errorf("the connection stayed open after the answer")
		}
	})

	t.Run("stalled over HTTP/2", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = io.WriteString(pw, "first bytes") }() // and then nothing
		req, _ := http.NewRequest("POST", "https://"+bw.secureA+"/h2", pr)
		req.ContentLength = 1000
		start := time.Now()
		resp, err := bw.secureClientA.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3220" {
			t.Errorf("%s %d %s, want HTTP/2 408 ERR_NGROK_3220", resp.Proto, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
		if took := time.Since(start); took < bodyTimeout {
			t.Errorf("answered after %v, before the %v body timeout", took, bodyTimeout)
		}
		eventually(t, time.Second, "the upstream's read of the body to end", func() bool { return bw.a.readOf("/h2") != "" })
		if got := bw.a.readOf("/h2"); strings.HasSuffix(got, " <nil>") {
			t.Errorf("the upstream read the cut body as complete: %s", got)
		}
	})

	t.Run("stalled after the answer started", func(t *testing.T) {
		// Over HTTP/1.1, then HTTP/2: the answer in progress is cut, not finished.
		conn, br, _ := bw.send(t, "POST /answer-first-1 HTTP/1.1\r\nHost: "+bw.hostA+"\r\nContent-Length: 1000\r\n\r\n", "first bytes")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		got, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(got) != "started " || err == nil {
			t.Errorf("HTTP/1.1: %d %q %v, want 200 \"started \" cut off by an error", resp.StatusCode, got, err)
		}
		if !closedWithin(conn, eventuallyFloor) {
			t.Errorf("HTTP/1.1: the connection stayed open")
		}
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = io.WriteString(pw, "first bytes") }()
		req, _ := http.NewRequest("POST", "https://"+bw.secureA+"/answer-first-2", pr)
		req.ContentLength = 1000
		resp, err = bw.secureClientA.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err, late := readWithin(resp.Body)
		if late {
			t.Errorf("HTTP/2: the answer in progress went on after the body timeout")
		}
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(got) != "started " || err == nil {
			t.Errorf("HTTP/2: %s %d %q %v, want 200 \"started \" cut off by an error", resp.Proto, resp.StatusCode, got, err)
		}
		for _, path := range []string{"/answer-first-1", "/answer-first-2"} {
			eventually(t, time.Second, path+": the upstream's read of the body to end", func() bool { return bw.a.readOf(path) != "" })
			if got := bw.a.readOf(path); strings.HasSuffix(got, " <nil>") {
				t.Errorf("%s: the upstream read the cut body as complete: %s", path, got)
			}
		}
	})

	t.Run("slow upload", func(t *testing.T) {
		const body = "0123456789"
		conn, br, _ := bw.send(t, "POST /slow HTTP/1.1\r\nHost: "+bw.hostA+"\r\nContent-Length: 10\r\n\r\n", "")
		for i := range len(body) {
			time.Sleep(300 * time.Millisecond)
			if _, err := io.WriteString(conn, body[i:i+1]); err != nil {
				t.Fatalf("byte %d: %v", i, err)
			}
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the slow upload was not answered: %v", err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != "A 10" || bw.a.readOf("/slow") != "10 <nil>" {
			t.Errorf("slow upload: %d %q, the upstream read %q; want 200 \"A 10\" and every byte", resp.StatusCode, got, bw.a.readOf("/slow"))
		}
	})

	t.Run("early answer", func(t *testing.T) {
		// The head of a request whose body does not come goes to the upstream on its own:
		// the upstream's 401 is the answer, not the 408 of the body timeout. (Over HTTP/1.1,
		// net/http reads what is left of the body before writing an answer, so the 401 goes out
		// when the body's read ends, here at the body timeout; over HTTP/2 at once.)
		conn, br, _ := bw.send(t, "POST /early HTTP/1.1\r\nHost: "+bw.hostA+"\r\nContent-Length: 1000\r\n\r\n", "")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("HTTP/1.1: %d %s, want the upstream's 401", resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
		conn.Close()
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("POST", "https://"+bw.secureA+"/early", pr)
		req.ContentLength = 1000
		resp, err = bw.secureClientA.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("HTTP/2: %s %d %s, want the upstream's 401", resp.Proto, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
	})

	t.Run("other account served", func(t *testing.T) {
		type held struct {
			c     net.Conn
			br    *bufio.Reader
			since time.Time
		}
		var stalled []held
		for i := range 3 {
			path := fmt.Sprintf("/held%d", i)
			c, br, since := bw.send(t, "POST "+path+" HTTP/1.1\r\nHost: "+bw.hostA+"\r\nContent-Length: 1000\r\n\r\n", "")
			stalled = append(stalled, held{c, br, since})
			eventually(t, time.Second, path+" to reach A's upstream", func() bool { return bw.a.sawArrive(path) })
		}
		client := bw.httpClient()
		defer client.CloseIdleConnections()
		for i := range 3 {
			st, body, _ := get(t, client, "http://"+bw.hostB+"/")
			resp, err := client.Post("http://"+bw.hostB+fmt.Sprintf("/post%d", i), "text/plain", strings.NewReader("b's body"))
			if err != nil {
				t.Fatalf("B's POST: %v", err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if st != 200 || body != "B 0" || resp.StatusCode != 200 || string(got) != "B 8" {
				t.Errorf("B: GET %d %q, POST %d %q; want 200 \"B 0\" and 200 \"B 8\"", st, body, resp.StatusCode, got)
			}
		}
		for i, h := range stalled {
			wantBodyTimedOut(t, fmt.Sprintf("A's held upload %d", i), h.c, h.br, h.since)
		}
	})
}
