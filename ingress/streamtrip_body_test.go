package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Request bodies over the stream transport: lengths, chunks, answers before the body, bodies
// sent as they arrive or broken off, and 100-continue.

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
