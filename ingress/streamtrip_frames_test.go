package ingress

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamTripHeadWithBody: a request's head goes to the agent in one write with its body's
// first bytes (one frame, where the head and the body were two), for each account's endpoint,
// with a Content-Length and chunked; a body that comes late still follows its head whole, and a
// request without a body is one write as before.
func TestStreamTripHeadWithBody(t *testing.T) {
	echo := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(400)
				return
			}
			fmt.Fprintf(w, "%s %s %d %v", name, r.Method, len(b), r.TransferEncoding)
		})
	}
	w := newTripWorld(t, echo("A"), echo("B"))
	body := strings.Repeat("b", 300)
	for _, c := range []struct {
		name, host, req, want string
		writes                int64
	}{
		{"A, Content-Length", "a.example.com", "POST /x HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 300\r\n\r\n" + body, "A POST 300 []", 1},
		{"B, Content-Length", "b.example.com", "POST /x HTTP/1.1\r\nHost: b.example.com\r\nContent-Length: 300\r\n\r\n" + body, "B POST 300 []", 1},
		// The first chunk goes with the head; the last chunk and the end of the body follow.
		{"A, chunked", "a.example.com", "POST /x HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\r\n\r\n12c\r\n" + body + "\r\n0\r\n\r\n", "A POST 300 [chunked]", 2},
		{"B, no body", "b.example.com", "GET /x HTTP/1.1\r\nHost: b.example.com\r\n\r\n", "B GET 0 []", 1},
	} {
		ep := w.a
		if c.host == "b.example.com" {
			ep = w.b
		}
		pc := w.dial(t)
		// A first request opens the stream, so that only the request under test is counted.
		if status, _, _ := pc.get(t, c.host, "/warm"); status != 200 {
			t.Fatalf("%s: warm-up answered %d", c.name, status)
		}
		before := ep.writes.Load()
		if _, err := io.WriteString(pc.c, c.req); err != nil {
			t.Fatal(err)
		}
		status, got := readAnswer(t, pc)
		if status != 200 || got != c.want {
			t.Fatalf("%s: %d %q, want %q", c.name, status, got, c.want)
		}
		if n := ep.writes.Load() - before; n != c.writes {
			t.Errorf("%s: %d writes on the stream, want %d", c.name, n, c.writes)
		}
	}

	// A client that sends the body a while after the head: the head waits for it, and both
	// arrive whole.
	pc := w.dial(t)
	fmt.Fprintf(pc.c, "POST /late HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 300\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	io.WriteString(pc.c, body[:100])
	time.Sleep(50 * time.Millisecond)
	io.WriteString(pc.c, body[100:])
	if status, got := readAnswer(t, pc); status != 200 || got != "A POST 300 []" {
		t.Fatalf("late body: %d %q", status, got)
	}
}

// readAnswer reads one answer on a public connection: its status and body.
func readAnswer(t *testing.T, pc *publicConn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
