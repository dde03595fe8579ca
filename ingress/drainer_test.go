package ingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// drainingEndpoint is an agent's endpoint whose replica may be draining (Drainer).
type drainingEndpoint struct {
	agentEndpoint
	draining atomic.Bool
}

func (e *drainingEndpoint) Draining() bool { return e.draining.Load() }

// TestDrainingEndpointConnectionsNotKept: requests of one public keep-alive connection share
// one connection to the agent while its replica serves; once the replica drains, each request
// tells the agent "Connection: close" and has a connection of its own (none is left open
// between requests to hold the agent's session on the draining replica; the one kept before
// carries the next request and is closed after it), and the public
// connection itself stays open.
func TestDrainingEndpointConnectionsNotKept(t *testing.T) {
	var mu sync.Mutex
	upConns := map[string]bool{}
	closes := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upConns[r.RemoteAddr] = true
		if r.Close {
			closes++
		}
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	e := &drainingEndpoint{agentEndpoint: agentEndpoint{account: "acct_a", upstream: upstream.Listener.Addr().String()}}
	s := New(Config{})
	s.SetLookup(func(proto, host string) Endpoint {
		if host == "drain.edgeplane.app" {
			return e
		}
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.ServeHTTP(ln) }()
	defer s.Close()
	var publicConns atomic.Int64
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		publicConns.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	defer client.CloseIdleConnections()
	get := func() {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
		req.Host = "drain.edgeplane.app"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(upConns), closes
	}
	for range 3 {
		get()
	}
	if conns, closed := counts(); conns != 1 || closed != 0 {
		t.Fatalf("serving: %d connections to the agent for 3 requests, %d asked to close; want 1 kept", conns, closed)
	}
	e.draining.Store(true)
	for range 3 {
		get()
	}
	// The kept connection carries the first of them, and is closed after it.
	if conns, closed := counts(); conns != 3 || closed != 3 {
		t.Errorf("draining: %d connections to the agent after 3 more requests, %d asked to close; want 3, each closed", conns, closed)
	}
	if n := publicConns.Load(); n != 1 {
		t.Errorf("the public client opened %d connections; its keep-alive connection should stay", n)
	}
}
