package enforce

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// rawUpstream is a TCP server that reads lines and answers each upper-cased, then closes when
// it reads "bye".
func rawUpstream(t *testing.T) (DialFunc, chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan string, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if line == "bye\n" {
						return
					}
					_, _ = c.Write([]byte(strings.ToUpper(line)))
				}
			}()
		}
	}()
	return func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", l.Addr().String())
	}, got
}

// wsServer serves the stage in front of a final handler that carries raw streams over dial, as
// the data plane's does.
func wsServer(t *testing.T, dial DialFunc) *httptest.Server {
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !CarryRaw(r, dial) {
			t.Errorf("a websocket request was not carried raw")
		}
	})
	srv := httptest.NewServer(NewWSTCP().Wrap(final))
	t.Cleanup(srv.Close)
	return srv
}

// TestWSTCP: the payloads of binary and text messages reach the upstream as a byte stream
// (message boundaries are not kept), the upstream's bytes come back as binary messages, and the
// upstream closing its end closes the websocket normally.
func TestWSTCP(t *testing.T) {
	dial, got := rawUpstream(t)
	srv := wsServer(t, dial)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": {"https://elsewhere.example"}}, // any origin may connect
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %d", resp.StatusCode)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("hel")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("lo\n")); err != nil {
		t.Fatal(err)
	}
	if line := <-got; line != "hello\n" {
		t.Errorf("the upstream read %q, want the payloads joined", line)
	}
	typ, msg, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || string(msg) != "HELLO\n" {
		t.Fatalf("the upstream's answer: %v %q %v, want a binary HELLO", typ, msg, err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	<-got
	_, _, err = c.Read(ctx)
	if st := websocket.CloseStatus(err); st != websocket.StatusNormalClosure {
		t.Errorf("after the upstream closed: %v (status %d), want a normal closure", err, st)
	}
}

// TestWSTCPClientCloses: the client closing the websocket closes the upstream connection.
func TestWSTCPClientCloses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			closed <- err
			return
		}
		_, err = io.Copy(io.Discard, c)
		closed <- err
	}()
	srv := wsServer(t, func(ctx context.Context) (net.Conn, error) { return net.Dial("tcp", l.Addr().String()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	_ = c.Write(ctx, websocket.MessageBinary, []byte("x"))
	_ = c.Close(websocket.StatusNormalClosure, "")
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("the upstream saw %v, want EOF", err)
		}
	case <-ctx.Done():
		t.Fatal("the upstream connection stayed open after the client closed")
	}
}

// TestWSTCPRefusals: a request that is not a websocket upgrade gets 400 ERR_NGROK_3206 and never
// reaches the upstream; an upstream that cannot be reached gets 502 ERR_NGROK_8012.
func TestWSTCPRefusals(t *testing.T) {
	dialed := false
	srv := wsServer(t, func(context.Context) (net.Conn, error) {
		dialed = true
		return nil, errors.New("connection refused")
	})
	for _, req := range []func() *http.Request{
		func() *http.Request { r, _ := http.NewRequest("GET", srv.URL, nil); return r },
		func() *http.Request {
			r, _ := http.NewRequest("GET", srv.URL, nil)
			r.Header.Set("Upgrade", "h2c")
			r.Header.Set("Connection", "Upgrade")
			return r
		},
		func() *http.Request {
			r, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
			r.Header.Set("Upgrade", "websocket")
			r.Header.Set("Connection", "Upgrade")
			return r
		},
	} {
		r := req()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3206" {
			t.Errorf("%s upgrade=%q: %d %q, want 400 ERR_NGROK_3206", r.Method, r.Header.Get("Upgrade"), resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
	}
	if dialed {
		t.Errorf("a refused request reached the upstream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err == nil || resp == nil || resp.StatusCode != 502 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_8012" {
		t.Errorf("an unreachable upstream: %v %+v, want 502 ERR_NGROK_8012", err, resp)
	}
}

// TestCarryRawUnmarked: without the stage, CarryRaw leaves the request to the final handler.
func TestCarryRawUnmarked(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	if CarryRaw(r, func(context.Context) (net.Conn, error) { return nil, errors.New("no") }) {
		t.Errorf("CarryRaw took an unmarked request")
	}
}
