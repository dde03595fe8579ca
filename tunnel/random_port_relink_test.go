package tunnel

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// cutRelay carries an agent's connections to a replica's agent listener until cut closes them
// all: the agent's link drops, and it reconnects through the relay to the same replica.
type cutRelay struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn
	// refusing makes the relay close every new connection: the agent is gone (crashed).
	refusing bool
}

func newCutRelay(t *testing.T, to string) *cutRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &cutRelay{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); r.cut() })
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			refusing := r.refusing
			r.mu.Unlock()
			if refusing {
				a.Close()
				continue
			}
			b, err := net.Dial("tcp", to)
			if err != nil {
				a.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, a, b)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(b, a); b.Close() }()
			go func() { _, _ = io.Copy(a, b); a.Close() }()
		}
	}()
	return r
}

// crash cuts the agent's links and refuses its reconnections, as when its process died.
func (r *cutRelay) crash() {
	r.mu.Lock()
	r.refusing = true
	r.mu.Unlock()
	r.cut()
}

func (r *cutRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

type relayDialer struct{ addr string }

func (d relayDialer) Dial(network, _ string) (net.Conn, error) { return net.Dial(network, d.addr) }
func (d relayDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, d.addr)
}

// TestRandomTCPPortBackAfterLinkDrops: the links of two accounts' agents, each with a tcp
// endpoint on a random port, drop; each agent reconnects to the same replica and gets its own
// port back, answered by its own upstream.
func TestRandomTCPPortBackAfterLinkDrops(t *testing.T) {
	c := newCluster(t)
	r := c.replica("rep_a", "127.0.0.1", 20*time.Millisecond)
	relay := newCutRelay(t, r.agentAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := map[string]string{}
	for _, account := range []string{"a", "b"} {
		sess, err := ngrok.Connect(ctx, ngrok.WithDialer(relayDialer{relay.addr}), ngrok.WithServer("agents.test:443"),
			ngrok.WithCA(r.pool), ngrok.WithAuthtoken(c.tokens[account]))
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		tun, err := sess.Listen(ctx, config.TCPEndpoint())
		if err != nil {
			t.Fatal(err)
		}
		echoTCP(t, tun, account)
		addrs[account] = strings.TrimPrefix(tun.URL(), "tcp://")
	}
	answer := func(addr string) string {
		port, _ := portOf(addr)
		return pingPort("127.0.0.1", port)
	}
	for account, addr := range addrs {
		if got := answer(addr); got != account+" ping\n" {
			t.Fatalf("%s answered %q before the drop", addr, got)
		}
	}
	relay.cut()
	for account, addr := range addrs {
		waitFor(t, "account "+account+"'s port answers again", func() bool { return answer(addr) == account+" ping\n" })
	}
}

// TestCrashedAgentRestartsAtOnce: account a's agent, with an https name and a tcp endpoint on a
// drawn port, dies (its link breaks, it never comes back). Restarted with a new session, it
// binds its name again at once: the lost link's row of the name went with it (a kept row
// refused it, ERR_NGROK_334, until MoveWait). The drawn port's row stays for the agent's return;
// account b cannot bind that address (307).
func TestCrashedAgentRestartsAtOnce(t *testing.T) {
	c := newCluster(t)
	r := c.replica("rep_a", "127.0.0.1", 20*time.Millisecond)
	relay := newCutRelay(t, r.agentAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sess, err := ngrok.Connect(ctx, ngrok.WithDialer(relayDialer{relay.addr}), ngrok.WithServer("agents.test:443"),
		ngrok.WithCA(r.pool), ngrok.WithAuthtoken(c.tokens["a"]))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const name = "crash-a.edgeplane.app"
	if _, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain(name))); err != nil {
		t.Fatal(err)
	}
	tcp, err := sess.Listen(ctx, config.TCPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	drawn := strings.TrimPrefix(tcp.URL(), "tcp://")

	relay.crash()
	waitFor(t, "the replica ends the crashed agent's session", func() bool { return r.gw.Sessions() == 0 })
	if _, err := r.connect("a").Listen(ctx, config.HTTPEndpoint(config.WithDomain(name))); err != nil {
		t.Errorf("the restarted agent's bind of its name: %v; want it bound at once", err)
	}
	_, err = r.connect("b").Listen(ctx, config.TCPEndpoint(config.WithRemoteAddr(drawn)))
	if err == nil || !strings.Contains(err.Error(), "ERR_NGROK_307") {
		t.Errorf("account b's bind of the crashed agent's drawn port %s: %v; want ERR_NGROK_307", drawn, err)
	}
}

// pingPort writes a line "ping" to host:port and returns the line that came back (echoTCP's
// answer names its account), or the dial's error.
func pingPort(host string, port int) string {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 2*time.Second)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	_, _ = conn.Write([]byte("ping\n"))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return line
}
