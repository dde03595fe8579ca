package ingress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/inspect"
)

// recordingWorld is the HTTP listener with a recorder, in front of a real upstream server
// reached as the endpoint app.example.com of account acct_bench.
type recordingWorld struct {
	rec  *inspect.Recorder
	addr string
}

func newRecordingWorld(t *testing.T, upstream http.Handler) *recordingWorld {
	t.Helper()
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	us := &http.Server{Handler: upstream}
	go func() { _ = us.Serve(uln) }()
	t.Cleanup(func() { us.Close() })
	rec := inspect.NewRecorder(inspect.Config{Replica: "rep_test"})
	ep := &upstreamEndpoint{addr: uln.Addr().String()}
	_, addr := servePublic(t, Config{Recorder: rec, Lookup: byHost(map[string]Endpoint{"app.example.com": ep})})
	return &recordingWorld{rec: rec, addr: addr}
}

// send writes a raw request on a new connection and returns the answer's status line and body.
func (w *recordingWorld) send(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// newest waits for the account's newest entry with the path (an entry is recorded once its
// answer is written, which the client may read first).
func (w *recordingWorld) newest(t *testing.T, path string) *inspect.Entry {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, e := range w.rec.List("acct_bench", inspect.Filter{}, 0, 100) {
			if e.Path == path {
				return e
			}
		}
	}
	t.Fatalf("no entry for %s", path)
	return nil
}

// TestRecordingRequests: the listener records a request with its answer's status, sizes and
// headers, secrets redacted and the request unchanged for the upstream; bodies only once the
// account asks, cut at 16 KiB; nothing for a host no account serves.
func TestRecordingRequests(t *testing.T) {
	var seenAuth string
	w := newRecordingWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		seenAuth = r.Header.Get("Authorization")
		n, _ := io.Copy(io.Discard, r.Body)
		rw.Header().Set("Set-Cookie", "s=answer-secret")
		rw.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(rw, "read %d", n)
	}))
	body := strings.Repeat("x", 20<<10)
	req := "POST /a?q=1 HTTP/1.1\r\nHost: app.example.com\r\nAuthorization: Bearer req-secret\r\nCookie: c=req-secret\r\n" +
		"X-Kept: yes\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	resp, got := w.send(t, req)
	if resp.StatusCode != 202 || got != fmt.Sprintf("read %d", len(body)) || seenAuth != "Bearer req-secret" {
		t.Fatalf("through the listener: %d %q, upstream saw Authorization %q", resp.StatusCode, got, seenAuth)
	}
	e := w.newest(t, "/a?q=1")
	if e.Status != 202 || e.Method != "POST" || e.Kind != "http" || e.Host != "app.example.com" || e.BytesIn != int64(len(body)) ||
		e.BytesOut != int64(len(got)) || e.EndpointURL() != "http://app.example.com" || e.Replica != "rep_test" || e.Duration <= 0 {
		t.Fatalf("entry: %+v", e)
	}
	for _, h := range []inspect.Header{e.RequestHeader, e.ResponseHeader} {
		for _, f := range h {
			if strings.Contains(f.Value, "secret") {
				t.Errorf("%s: %q kept", f.Name, f.Value)
			}
		}
	}
	if e.RequestHeader.Get("X-Kept") != "yes" || e.ResponseHeader.Get("Set-Cookie") != inspect.RedactedValue {
		t.Errorf("headers: %v / %v", e.RequestHeader, e.ResponseHeader)
	}
	if e.Bodies || e.RequestBody != nil || e.ResponseBody != nil {
		t.Fatal("bodies kept without the account asking")
	}
	w.rec.SetBodies("acct_bench", true)
	w.send(t, strings.Replace(req, "/a?q=1", "/b", 1))
	e = w.newest(t, "/b")
	if !e.Bodies || len(e.RequestBody) != inspect.MaxBody || !e.RequestBodyCut || string(e.ResponseBody) != got || e.ResponseBodyCut {
		t.Fatalf("kept bodies: %v, request %d cut %v, response %q cut %v", e.Bodies, len(e.RequestBody), e.RequestBodyCut, e.ResponseBody, e.ResponseBodyCut)
	}
	// A host nobody serves is answered and not recorded.
	if resp, _ := w.send(t, "GET /nobody HTTP/1.1\r\nHost: nobody.example.com\r\nConnection: close\r\n\r\n"); resp.StatusCode != 404 {
		t.Fatalf("unknown host: %d", resp.StatusCode)
	}
	w.send(t, "GET /after HTTP/1.1\r\nHost: app.example.com\r\nConnection: close\r\n\r\n")
	w.newest(t, "/after")
	for _, e := range w.rec.List("acct_bench", inspect.Filter{}, 0, 100) {
		if e.Path == "/nobody" {
			t.Fatal("a request for a host nobody serves was recorded")
		}
	}
}

// TestRecordingUpgrades: a websocket upgrade passes through the recording writer (the proxy
// hijacks the connection) and is recorded as upgraded.
func TestRecordingUpgrades(t *testing.T) {
	w := newRecordingWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(rw).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhi")
		_ = brw.Flush()
	}))
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", err, resp)
	}
	hi := make([]byte, 2)
	if _, err := io.ReadFull(br, hi); err != nil || string(hi) != "hi" {
		t.Fatalf("after the upgrade: %q %v", hi, err)
	}
	c.Close()
	if e := w.newest(t, "/ws"); !e.Upgraded || e.Status != 0 {
		t.Fatalf("upgrade entry: %+v", e)
	}
}
