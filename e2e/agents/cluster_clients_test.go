package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// The clients of a cluster: public clients through the balancer, each request on a connection
// of its own so the balancer spreads them over the replicas, and the agents' harnesses.

// twoAccounts returns the cluster tests' two tenants: account A, the balancer's world, and
// account B, "team-b", each with the token of a new agent credential.
func (c *cluster) twoAccounts() (a, b *world, tokenA, tokenB string) {
	a, b = c.lb, c.lb.asAccount("team-b")
	_, tokenA = a.credential()
	_, tokenB = b.credential()
	return a, b, tokenA, tokenB
}

// bind binds tun through a new session of token's agent connected to replica r itself (not
// through the balancer, so the test knows where the agent is), failing the test, with what,
// where it is refused.
func (r *clusterReplica) bind(t *testing.T, token string, tun config.Tunnel, what string) ngrok.Tunnel {
	t.Helper()
	l, err := r.mustConnect(token).Listen(context.Background(), tun)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return l
}

// lbClient is a public client of the balancer's HTTP (https false) or TLS listener that opens a
// new connection for every request.
func (c *cluster) lbClient(https bool) *http.Client {
	addr := c.lb.http
	if https {
		addr = c.lb.https
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
			TLSClientConfig:   &tls.Config{RootCAs: c.lb.ca},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// hammer makes n public requests for url through the balancer and fails the test unless every
// one is answered 200 with a body starting with want; it returns how many bodies started with
// each of the other prefixes (which agent answered).
func (c *cluster) hammer(n int, url, want string, others ...string) map[string]int {
	c.t.Helper()
	client := c.lbClient(strings.HasPrefix(url, "https://"))
	seen := map[string]int{}
	failed := 0
	for i := range n {
		resp, err := client.Get(url)
		if err != nil {
			failed++
			c.t.Errorf("%s request %d: %v", url, i, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, want) {
			failed++
			c.t.Errorf("%s request %d: %d %s %q, want 200 %q", url, i, resp.StatusCode, resp.Header.Get("ngrok-error-code"), lastBytes(body, 200), want)
			continue
		}
		for _, o := range others {
			if strings.HasPrefix(body[len(want):], o) {
				seen[o]++
			}
		}
	}
	if failed > 0 {
		c.t.Fatalf("%s: %d of %d requests through the balancer did not reach their agent", url, failed, n)
	}
	return seen
}

// hammerConn makes n connections to addr through the balancer (TLS with conf when not nil),
// writes a line on each and fails the test unless each answer is want.
func (c *cluster) hammerConn(n int, addr string, conf *tls.Config, want string) {
	c.t.Helper()
	failed := 0
	for i := range n {
		got, err := lineOver(addr, conf, fmt.Sprintf("line %d\n", i))
		if exp := fmt.Sprintf(want, i); err != nil || got != exp {
			failed++
			c.t.Errorf("connection %d to %s: %q %v, want %q", i, addr, got, err, exp)
		}
	}
	if failed > 0 {
		c.t.Fatalf("%s: %d of %d connections through the balancer did not reach their agent", addr, failed, n)
	}
}

// lineOver dials addr (with TLS when conf is not nil), writes line and returns the answer's
// first line.
func lineOver(addr string, conf *tls.Config, line string) (string, error) {
	var conn net.Conn
	var err error
	d := &net.Dialer{Timeout: 10 * time.Second}
	if conf != nil {
		conn, err = tls.DialWithDialer(d, "tcp", addr, conf)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, line); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}

// answerLines answers each connection accepted on tun with prefix and the line it read.
func answerLines(t *testing.T, tun net.Listener, prefix string, wrap func(net.Conn) net.Conn) {
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			go func() {
				if wrap != nil {
					c = wrap(c)
				}
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "%s %s", prefix, line)
			}()
		}
	}()
	t.Cleanup(func() { tun.Close() })
}

// TestClusterClients: the four real clients (ngrok-go v1 and v2, the Node SDK, the ngrok agent
// 2.x) connect through the balancer to whichever replica it picks, and 100 public requests for
// each endpoint through the balancer all reach their agent, whichever replica they land on:
// https and http endpoints, a TLS endpoint terminated by edgeplane with the agent's own
// certificate (its key travels sealed in the tunnel's row) and one passed through, a TCP
// reserved address, and an HTTPS edge whose tunnel-group backend is a labeled tunnel. Account B,
// with a labeled tunnel of the same labels and an edge of its own, reaches only its own agent,
// and its requests for A's edge never reach B's agent.
func TestClusterClients(t *testing.T) {
	c := startCluster(t)
	a, b, tokenA, tokenB := c.twoAccounts()
	ctx := context.Background()
	const n = 100

	t.Run("ngrok-go v1", func(t *testing.T) {
		sess := a.mustConnect(tokenA)
		for _, name := range []string{"go1.edgeplane.app"} {
			if err := listenAnswer(t, sess, name, "go1 https"); err != nil {
				t.Fatal(err)
			}
		}
		plain, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("go1-http.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
		if err != nil {
			t.Fatal(err)
		}
		serveTunnel(t, plain, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "go1 http") }))
		c.waitServed("https://go1.edgeplane.app/", "go1 https")
		c.hammer(n, "https://go1.edgeplane.app/", "go1 https")
		c.waitServed("http://go1-http.edgeplane.app/", "go1 http")
		c.hammer(n, "http://go1-http.edgeplane.app/", "go1 http")

		// TLS: terminated by edgeplane with the agent's certificate, and passed through.
		ca := newBindCA(t, "agent's server CA")
		_, chainPEM, keyPEM := ca.issue(t, "go1-term.edgeplane.app")
		term, err := sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("go1-term.edgeplane.app"), config.WithTermination(chainPEM, keyPEM)))
		if err != nil {
			t.Fatal(err)
		}
		answerLines(t, term, "terminated", nil)
		passCert, _, _ := ca.issue(t, "go1-pass.edgeplane.app")
		pass, err := sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("go1-pass.edgeplane.app")))
		if err != nil {
			t.Fatal(err)
		}
		answerLines(t, pass, "passed", func(conn net.Conn) net.Conn {
			return tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{passCert}})
		})
		for _, ep := range []struct{ name, prefix string }{{"go1-term.edgeplane.app", "terminated"}, {"go1-pass.edgeplane.app", "passed"}} {
			conf := &tls.Config{RootCAs: ca.pool, ServerName: ep.name}
			for _, r := range c.replicas {
				eventually(t, time.Second, "replica "+r.ip+" carries "+ep.name, func() bool {
					got, err := lineOver(r.https, conf, "x\n")
					return err == nil && got == ep.prefix+" x\n"
				})
			}
			c.hammerConn(n, c.lb.https, conf, ep.prefix+" line %d\n")
		}

		// A TCP reserved address.
		var ra struct{ Addr string }
		if st := a.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
			t.Fatalf("reserve an address: %d", st)
		}
		tcp, err := sess.Listen(ctx, config.TCPEndpoint(config.WithRemoteAddr(ra.Addr)))
		if err != nil {
			t.Fatal(err)
		}
		answerLines(t, tcp, "tcp", nil)
		_, port, _ := net.SplitHostPort(ra.Addr)
		for _, r := range c.replicas {
			eventually(t, time.Second, "replica "+r.ip+" carries "+ra.Addr, func() bool {
				got, err := lineOver(net.JoinHostPort(r.ip, port), nil, "x\n")
				return err == nil && got == "tcp x\n"
			})
		}
		c.hammerConn(n, ra.Addr, nil, "tcp line %d\n")

		// An edge whose tunnel-group backend is A's labeled tunnel; B has a labeled tunnel of
		// the same labels and an edge of its own.
		labeledAnswer := func(s ngrok.Session, who string) {
			tun, err := s.Listen(ctx, config.LabeledTunnel(config.WithLabel("app", "shop")))
			if err != nil {
				t.Fatal(err)
			}
			serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, who) }))
		}
		labeledAnswer(sess, "agent of A")
		labeledAnswer(b.mustConnect(tokenB), "agent of B")
		for _, acct := range []struct {
			w    *world
			host string
		}{{a, "shop-a.example.com"}, {b, "shop-b.example.com"}} {
			acct.w.reserveDomain(acct.host)
			group := acct.w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"app": "shop"}})
			edge := acct.w.mustCreate("/edges/https", map[string]any{"hostports": []string{acct.host + ":443"}})
			acct.w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
				"backend": map[string]any{"backend_id": group}})
		}
		c.waitServed("https://shop-a.example.com/", "agent of A")
		c.hammer(n, "https://shop-a.example.com/", "agent of A")
		c.waitServed("https://shop-b.example.com/", "agent of B")
		c.hammer(n, "https://shop-b.example.com/", "agent of B")

		// B's bind of A's online name is refused, through whichever replica it lands on.
		sessB := b.mustConnect(tokenB)
		for range 3 {
			if got := ngrokCode(listenAnswer(t, sessB, "go1.edgeplane.app", "B", config.WithPoolingEnabled(true))); got != "ERR_NGROK_334" {
				t.Errorf("B's bind of A's name online on another replica: %s, want ERR_NGROK_334", got)
			}
		}
	})

	t.Run("ngrok-go v2", func(t *testing.T) {
		ev := c.lb.gov2Agent(tokenA, "-url", "https://go2.edgeplane.app")
		if ev.Event != "endpoint" {
			t.Fatalf("gov2agent: %+v", ev)
		}
		c.waitServed("https://go2.edgeplane.app/", "ngrok-go v2")
		c.hammer(n, "https://go2.edgeplane.app/", "ngrok-go v2")
	})

	t.Run("Node SDK", func(t *testing.T) {
		events := c.lb.runNodeSDK("forward", tokenA, "node.edgeplane.app")
		if last := events[len(events)-1]; last.Event != "ready" {
			t.Fatalf("node sdk.js: %+v", events)
		}
		c.waitServed("https://node.edgeplane.app/", "node upstream")
		c.hammer(n, "https://node.edgeplane.app/", "node upstream")
	})

	t.Run("ngrok agent 2.x", func(t *testing.T) {
		app := httptest.NewServer(http.HandlerFunc(hello))
		t.Cleanup(app.Close)
		startNgrokAgentBin(t, c.lb, tokenA, "bin.edgeplane.app", app.URL, false)
		c.waitServed("https://bin.edgeplane.app/", "hello")
		c.hammer(n, "https://bin.edgeplane.app/", "hello host=bin.edgeplane.app")
		c.waitServed("http://bin.edgeplane.app/", "hello")
		c.hammer(n, "http://bin.edgeplane.app/", "hello host=bin.edgeplane.app")
	})

}
