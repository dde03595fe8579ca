package tunnel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/peer"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestDirectoryRoutesRemoteTunnels: a replica routes to another replica's tunnels, read from the
// store: an http endpoint (its basic auth built here from the row's sealed options, the agent
// given the real client's address), a labeled tunnel (to its account only), and a tcp endpoint,
// whose port this replica opens on its own listen host; a row id the holder does not have is
// refused with ErrNoTunnel; an unbind reaches the other replica, which closes the port.
func TestDirectoryRoutesRemoteTunnels(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	ctx := context.Background()
	sa := a.connect("a")
	const host = "dir.edgeplane.app"
	web, err := sa.Listen(ctx, config.HTTPEndpoint(config.WithDomain(host), config.WithScheme(config.SchemeHTTP),
		config.WithBasicAuth("user", "password-1")))
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, web, "a-http")
	lab, err := sa.Listen(ctx, config.LabeledTunnel(config.WithLabel("app", "dir")))
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, lab, "a-labeled")
	tcp, err := sa.Listen(ctx, config.TCPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	echoTCP(t, tcp, "a-tcp")
	u, _ := url.Parse(tcp.URL())
	_, port, _ := net.SplitHostPort(u.Host)

	waitFor(t, "B routes to A's http endpoint", func() bool { return b.gw.Endpoint("http", host) != nil })
	e := b.gw.Endpoint("http", host)
	if _, ok := e.(*remoteTunnel); !ok {
		t.Fatalf("B's endpoint for %s is a %T, not another replica's", host, e)
	}
	if ch := e.Chain(); ch == nil || len(ch.HTTP) != 1 || ch.HTTP[0].Name() != "basic_auth" {
		t.Fatalf("B built %+v from the row's options, want the basic_auth stage", ch)
	}
	if body, err := request(t, e, host, "203.0.113.7:5555"); err != nil || body != "a-http 203.0.113.7:5555" {
		t.Fatalf("request through B's link: %q, %v", body, err)
	}
	waitFor(t, "B routes to A's labeled tunnel", func() bool { return len(b.gw.Labeled(c.accounts["a"], map[string]string{"app": "dir"})) == 1 })
	if body, err := request(t, b.gw.Labeled(c.accounts["a"], map[string]string{"app": "dir"})[0], host, "198.51.100.1:1"); err != nil || !strings.HasPrefix(body, "a-labeled") {
		t.Fatalf("request to the labeled tunnel through B: %q, %v", body, err)
	}
	if got := b.gw.Labeled(c.accounts["b"], map[string]string{"app": "dir"}); len(got) != 0 {
		t.Fatalf("account B's tunnel group sees %d of account A's tunnels", len(got))
	}
	var line string
	waitFor(t, "B carries A's tcp endpoint on its own listen host", func() bool {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(b.tcpHost, port), time.Second)
		if err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "hello\n")
		line, _ = bufio.NewReader(conn).ReadString('\n')
		return line != ""
	})
	if line != "a-tcp hello\n" {
		t.Fatalf("tcp through B: %q", line)
	}
	if _, err := a.gw.AcceptPeer(ctx, peer.Request{TunnelID: "tn_notheld", ClientAddr: "192.0.2.1:1"}); !errors.Is(err, peer.ErrNoTunnel) {
		t.Fatalf("a stream for a tunnel A does not hold: %v, want ErrNoTunnel", err)
	}

	web.Close()
	tcp.Close()
	waitFor(t, "A's unbind reaches B", func() bool { return b.gw.Endpoint("http", host) == nil })
	waitFor(t, "B closes the port of A's tcp endpoint", func() bool { return !b.gw.ports.held(u.Host) })
}

// TestDirectoryPools: binds of one pooled endpoint on two replicas share its connections on
// either replica; a bind another replica's binds refuse gets the refusal one server gives
// (unpooled 334, a pooling mix 6030, another account 334).
func TestDirectoryPools(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	ctx := context.Background()
	const host = "pool.edgeplane.app"
	pooled := func(s ngrok.Session, name string) {
		tun, err := s.Listen(ctx, config.HTTPEndpoint(config.WithDomain(host), config.WithScheme(config.SchemeHTTP), config.WithPoolingEnabled(true)))
		if err != nil {
			t.Fatalf("pooled bind for %s: %v", name, err)
		}
		serveHTTP(t, tun, name)
	}
	pooled(a.connect("a"), "on-a")
	sb := b.connect("a")
	pooled(sb, "on-b")
	for _, r := range []*replica{a, b} {
		seen := map[string]int{}
		waitFor(t, r.id+" spreads the endpoint over both replicas", func() bool {
			body, err := request(t, r.gw.Endpoint("http", host), host, "192.0.2.9:9")
			if err == nil {
				seen[strings.Fields(body)[0]]++
			}
			return seen["on-a"] > 0 && seen["on-b"] > 0
		})
	}
	for _, bad := range []struct {
		account string
		opts    []config.HTTPEndpointOption
		code    string
	}{
		{"a", nil, "ERR_NGROK_6030"},
		{"b", []config.HTTPEndpointOption{config.WithPoolingEnabled(true)}, "ERR_NGROK_334"},
	} {
		s := b.connect(bad.account)
		_, err := s.Listen(ctx, config.HTTPEndpoint(append([]config.HTTPEndpointOption{config.WithDomain(host), config.WithScheme(config.SchemeHTTP)}, bad.opts...)...))
		if err == nil || !strings.Contains(err.Error(), bad.code) {
			t.Errorf("account %s's bind %d options: %v, want %s", bad.account, len(bad.opts), err, bad.code)
		}
	}
	// An unpooled endpoint of A is online on replica A only: B's bind of it is refused.
	if _, err := a.connect("a").Listen(ctx, config.HTTPEndpoint(config.WithDomain("solo.edgeplane.app"), config.WithScheme(config.SchemeHTTP))); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Listen(ctx, config.HTTPEndpoint(config.WithDomain("solo.edgeplane.app"), config.WithScheme(config.SchemeHTTP))); err == nil || !strings.Contains(err.Error(), "ERR_NGROK_334") {
		t.Errorf("a second unpooled bind on another replica: %v, want ERR_NGROK_334", err)
	}
}

// TestDirectorySkipsDownLinks: a replica that stops (its link closes) is not routed to from the
// next poll on, long before its row goes stale.
func TestDirectorySkipsDownLinks(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	tun, err := a.connect("a").Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("down.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, tun, "a")
	waitFor(t, "B routes to A's endpoint", func() bool { return b.gw.Endpoint("http", "down.edgeplane.app") != nil })
	a.link.Close() // A's link goes; its row stays fresh
	waitFor(t, "B stops routing to A", func() bool { return b.gw.Endpoint("http", "down.edgeplane.app") == nil })
}

// TestRandomPortTakenElsewhere: a random-port tcp bind whose port another replica's tunnel has
// taken (its row is in the store; this replica's directory has not read it yet) takes another
// port rather than failing: both accounts' tunnels stay on ports of their own.
func TestRandomPortTakenElsewhere(t *testing.T) {
	c := newCluster(t)
	c.settings.TCPPortMin, c.settings.TCPPortMax = 23011, 23012
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", time.Hour) // B never reads A's rows
	ctx := context.Background()
	held, err := a.connect("a").Listen(ctx, config.TCPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	for _, account := range []string{"b", "a"} {
		s := b.connect(account)
		for i := range 6 {
			tun, err := s.Listen(ctx, config.TCPEndpoint())
			if err != nil {
				t.Fatalf("account %s's random bind %d on B: %v", account, i, err)
			}
			if tun.URL() == held.URL() {
				t.Fatalf("two tunnels on %s", held.URL())
			}
			tun.Close()
			u, _ := url.Parse(tun.URL())
			waitFor(t, "the unbind's row gone", func() bool {
				rows, err := c.st.ReplicaTunnels(ctx, b.id, 0)
				return err == nil && len(rows) == 0 && !b.gw.Online("tcp", u.Host)
			})
		}
	}
}

// TestDirectoryEndsMovedSession: when another replica's rows carry the session id of a session
// this replica holds, written after this replica's row, the agent has reconnected there (its
// old connection lost without a reset): this replica ends its stale session, whose binds would
// otherwise take a share of the endpoint's traffic and fail it.
func TestDirectoryEndsMovedSession(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	ended := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sess, err := ngrok.Connect(ctx, ngrok.WithServer(a.agentAddr), ngrok.WithCA(a.pool), ngrok.WithAuthtoken(c.tokens["a"]),
		ngrok.WithDisconnectHandler(func(context.Context, ngrok.Session, error) {
			select {
			case ended <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("moved.edgeplane.app"))); err != nil {
		t.Fatal(err)
	}
	var id string
	waitFor(t, "A's session online", func() bool {
		for _, s := range a.gw.snapshotSessions() {
			id = s.id
		}
		return id != ""
	})
	// The agent reconnected to replica B, with its session id: B took the row over, and its
	// bind's row with it, which B now lists.
	s := a.gw.session(id)
	row := s.sessionRow()
	row.Replica, row.Conn = "rep_b", "conn_elsewhere"
	took, err := c.st.PutAgentSession(ctx, row)
	if err != nil {
		t.Fatal(err)
	}
	if len(took.Tunnels) != 1 || took.Tunnels[0].Name != "moved.edgeplane.app" {
		t.Fatalf("B took over %+v, want the bind of moved.edgeplane.app", took.Tunnels)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("replica A kept the session its agent moved to replica B")
	}
}
