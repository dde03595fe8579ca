package ingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/edgeplane/edgeplane/enforce"
)

// TestAwaitRoutedWaitsForRequestsLookingForTheirAgent: a drain waits (AwaitRouted) while an
// HTTP request of account A received before it is still dialing A's agent, and returns once the
// dial is done, though the request is not answered yet (its stream now holds its agent's
// session). Account B's requests are served meanwhile, and one of them still being answered by
// B's agent does not hold the drain; nor does a request answered without a stream (an unknown
// host's 404). Once everything is answered, nothing is left counted.
func TestAwaitRoutedWaitsForRequestsLookingForTheirAgent(t *testing.T) {
	answerA, slowB := make(chan struct{}), make(chan struct{})
	gotSlowB := make(chan struct{})
	upA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-answerA
		_, _ = io.WriteString(w, "a")
	}))
	t.Cleanup(upA.Close)
	upB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(gotSlowB)
			<-slowB
		}
		_, _ = io.WriteString(w, "b")
	}))
	t.Cleanup(upB.Close)
	a := &gatedEndpoint{agentEndpoint: &agentEndpoint{account: "acct_a", upstream: upA.Listener.Addr().String()},
		dialing: make(chan struct{}), release: make(chan struct{})}
	b := &agentEndpoint{account: "acct_b", upstream: upB.Listener.Addr().String()}
	// Registered after the upstreams' Close (which waits for their handlers), so run before it:
	// a failing test ends its held dial and requests first.
	t.Cleanup(func() {
		closeOnce(a.release)
		closeOnce(answerA)
		closeOnce(slowB)
	})
	srv := New(Config{Lookup: func(proto, host string) Endpoint {
		switch {
		case proto == "http" && host == "a.example.com":
			return a
		case proto == "http" && host == "b.example.com":
			return b
		}
		return nil
	}})
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeHTTP(ln) }()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	type answer struct {
		status int
		code   string
		body   string
		err    error
	}
	get := func(host, path string) answer {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+path, nil)
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, code: resp.Header.Get("Ngrok-Error-Code"), body: string(body), err: err}
	}
	async := func(host, path string) chan answer {
		ch := make(chan answer, 1)
		go func() { ch <- get(host, path) }()
		return ch
	}
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal(what)
		}
	}

	gotA := async("a.example.com", "/")
	wait("A's request never dialed its agent", a.dialing)
	if got := get("b.example.com", "/"); got.err != nil || got.status != 200 || got.body != "b" {
		t.Fatalf("B's request while A's is dialing: %+v", got)
	}
	gotB := async("b.example.com", "/slow")
	wait("B's slow request never reached B's agent", gotSlowB)
	if got := get("unknown.example.com", "/"); got.err != nil || got.status != 404 || got.code != "ERR_NGROK_3200" {
		t.Fatalf("a request for an unknown host: %+v, want 404 ERR_NGROK_3200", got)
	}

	wantHeldUntil(t, srv, "A's request", func() { closeOnce(a.release) })

	closeOnce(answerA)
	closeOnce(slowB)
	if got := <-gotA; got.err != nil || got.status != 200 || got.body != "a" {
		t.Fatalf("A's request: %+v", got)
	}
	if got := <-gotB; got.err != nil || got.status != 200 || got.body != "b" {
		t.Fatalf("B's slow request: %+v", got)
	}
	// Every request answered, with or without a stream, gave its count back.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	srv.AwaitRouted(ctx2)
	if ctx2.Err() != nil {
		t.Fatal("AwaitRouted waited for requests already answered")
	}
}

// closeOnce closes ch unless it is closed already.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// wsGatedEndpoint is a gatedEndpoint whose module is websocket_tcp_converter: its websockets are
// carried as raw streams over its (gated) Dial.
type wsGatedEndpoint struct{ *gatedEndpoint }

func (e *wsGatedEndpoint) HTTPHandler(build func() http.Handler) http.Handler {
	return enforce.NewWSTCP().Wrap(build())
}

// TestAwaitRoutedWaitsForRawWebsocketDial: a websocket that websocket_tcp_converter carries as
// a raw stream holds a drain (AwaitRouted) while it dials its agent, and no longer once its
// stream is open, though the websocket goes on being carried.
func TestAwaitRoutedWaitsForRawWebsocketDial(t *testing.T) {
	a := &wsGatedEndpoint{&gatedEndpoint{agentEndpoint: &agentEndpoint{account: "acct_a", upstream: echoUpstream(t, "a", true)},
		dialing: make(chan struct{}), release: make(chan struct{})}}
	t.Cleanup(func() { closeOnce(a.release) })
	srv := New(Config{Lookup: func(proto, host string) Endpoint {
		if proto == "http" && host == "ws.example.com" {
			return a
		}
		return nil
	}})
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeHTTP(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type dialed struct {
		c   *websocket.Conn
		err error
	}
	ws := make(chan dialed, 1)
	go func() {
		c, _, err := websocket.Dial(ctx, "ws://"+ln.Addr().String()+"/", &websocket.DialOptions{Host: "ws.example.com"})
		ws <- dialed{c, err}
	}()
	select {
	case <-a.dialing:
	case <-time.After(20 * time.Second):
		t.Fatal("the websocket never dialed its agent")
	}
	done := make(chan struct{})
	go func() { srv.AwaitRouted(ctx); close(done) }()
	select {
	case <-done:
		t.Fatal("AwaitRouted returned while the websocket was still dialing its agent")
	case <-time.After(300 * time.Millisecond):
	}
	closeOnce(a.release)
	got := <-ws
	if got.err != nil {
		t.Fatalf("websocket: %v", got.err)
	}
	defer got.c.CloseNow()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("AwaitRouted did not return once the websocket had its stream")
	}
	if ctx.Err() != nil {
		t.Fatal("AwaitRouted returned only at its deadline")
	}
	_, msg, err := got.c.Read(ctx)
	if err != nil || string(msg) != "a" {
		t.Fatalf("the websocket after AwaitRouted: %q, %v; want the agent's a", msg, err)
	}
}
