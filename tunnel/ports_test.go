package tunnel

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"

	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/store"
)

// TestTCPPortsShared: one listener serves an address for local binds and for the directory; it
// stays open while either holds it and closes with the last; a port another program holds is
// reported by setRemote and opened at a later call once it is free.
func TestTCPPortsShared(t *testing.T) {
	served := make(chan string, 4)
	p := newTCPPorts(listenOn("127.0.0.5"), func(addr string, c net.Conn) { served <- addr; c.Close() })
	squat, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := "127.0.0.1:" + portText(squat)
	free, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + portText(free)
	free.Close()

	h, err := p.acquire(addr, "acct")
	if err != nil {
		t.Fatal(err)
	}
	if failed := p.setRemote(map[string]string{addr: "acct", busy: "acct"}); len(failed) != 1 || failed[busy] == nil {
		t.Fatalf("setRemote with a port in use: %v, want the busy port's error only", failed)
	}
	if _, err := p.acquire(busy, "acct"); err == nil {
		t.Fatal("a local bind took a port another program holds")
	}
	h.Close()
	h.Close() // twice: the handle lets go once
	if !p.held(addr) {
		t.Fatal("the listener closed with the local bind while the directory still holds it")
	}
	dial(t, "127.0.0.5:"+portText(free))
	h2, _ := p.acquire(addr, "acct")
	p.setRemote(map[string]string{})
	if !p.held(addr) {
		t.Fatal("the listener closed with the directory while a local bind holds it")
	}
	h2.Close()
	if p.held(addr) {
		t.Fatal("the listener stayed open with nobody holding it")
	}
	squat.Close()
	if failed := p.setRemote(map[string]string{busy: "acct"}); len(failed) != 0 || !p.held(busy) {
		t.Fatalf("the freed port is not taken at the next call: %v", failed)
	}
	p.setRemote(nil)
	if len(served) != 1 || <-served != addr {
		t.Fatalf("connections served for another address than %s", addr)
	}
}

func portText(ln net.Listener) string {
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// dial connects to addr and waits until the server has closed the connection.
func dial(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the server answered")
	}
}

// TestRemoteTunnelFailsClosed: a row whose options this replica cannot open or build is an
// endpoint that refuses its traffic (503 ERR_NGROK_3210 over HTTP, no TCP or TLS connection
// admitted), never one served without its modules.
func TestRemoteTunnelFailsClosed(t *testing.T) {
	for _, row := range []store.ReplicaTunnel{
		{ID: "tn_1", Proto: "https", Name: "x.edgeplane.app", OptsErr: errors.New("a key this replica does not have")},
		{ID: "tn_2", Proto: "tcp", Name: "127.0.0.1:20000", Opts: []byte(`{"ProxyProto": 1}`)},
		{ID: "tn_3", Proto: "http", Name: "y.edgeplane.app", Opts: []byte(`{"UnknownModule": {"x": 1}, "BasicAuth": 7}`)},
	} {
		r := newRemoteTunnel(row, "rep_x", nil, plan.BindEnv{})
		if r.broken == "" {
			t.Fatalf("row %s built without complaint", row.ID)
		}
		c1, c2 := net.Pipe()
		if r.AllowConn(c1, nil) {
			t.Errorf("row %s admits connections", row.ID)
		}
		c1.Close()
		c2.Close()
		ch := r.Chain()
		if ch == nil || len(ch.HTTP) != 1 {
			t.Fatalf("row %s: chain %+v, want the fail-closed stage", row.ID, ch)
		}
		rec := httptest.NewRecorder()
		ch.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 503 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3210" {
			t.Errorf("row %s: %d %q, want 503 ERR_NGROK_3210", row.ID, rec.Code, rec.Header().Get("ngrok-error-code"))
		}
	}
}

// TestRandomPortLeavesAwaitedPorts: a random-port tcp bind never takes a port whose socket
// waits for the endpoint that held it before a handover (Config.Awaited): that endpoint's
// agent binds it again once it reconnects, and another tunnel there, of any account, would
// take its socket and share its port.
func TestRandomPortLeavesAwaitedPorts(t *testing.T) {
	c := newCluster(t)
	free := map[int]bool{}
	for len(free) < 3 { // three ports of a row free on the replica's host
		probe, err := net.Listen("tcp", "127.0.0.6:0")
		if err != nil {
			t.Fatal(err)
		}
		base := probe.Addr().(*net.TCPAddr).Port
		probe.Close()
		clear(free)
		for p := base; p < base+3 && p < 65536; p++ {
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.6", strconv.Itoa(p))); err == nil {
				ln.Close()
				free[p] = true
			}
		}
		c.settings.TCPPortMin, c.settings.TCPPortMax = base, base+2
	}
	open := c.settings.TCPPortMin + 1
	c.awaited = func(port int) bool { return port != open }
	r := c.replica("rep_a", "127.0.0.6", time.Hour)
	ctx := context.Background()
	for _, account := range []string{"a", "b"} {
		s := r.connect(account)
		for i := range 6 {
			tun, err := s.Listen(ctx, config.TCPEndpoint())
			if err != nil {
				t.Fatalf("account %s's random bind %d: %v", account, i, err)
			}
			u, _ := url.Parse(tun.URL())
			if u.Port() != strconv.Itoa(open) {
				t.Fatalf("account %s's random bind %d took %s; only port %d is not awaited", account, i, tun.URL(), open)
			}
			tun.Close()
			waitFor(t, "the unbind's row gone", func() bool {
				rows, err := c.st.ReplicaTunnels(ctx, r.id, 0)
				return err == nil && len(rows) == 0 && !r.gw.Online("tcp", u.Host)
			})
		}
	}
}
