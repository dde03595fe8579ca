package tunnel

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// remoteOf is the account of the endpoint online on another replica that holds addr's
// listener, "" for none.
func (p *tcpPorts) remoteOf(addr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o := p.open[addr]; o != nil {
		return o.remote
	}
	return ""
}

// freePort returns a port free on host now.
func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestTCPPortServesItsEndpointsAccount: whatever the order in which a port's holders of two
// accounts come and go (a random port's bind before its row, a bind whose row the store
// accepted, the directory's endpoint of another replica), the listener's connections count
// against the account whose endpoint the address is, never the other's; a random bind is
// refused a port open for another account, and tries another.
func TestTCPPortServesItsEndpointsAccount(t *testing.T) {
	const host = "127.0.0.5"
	accepted := make(chan string, 16)
	p := newTCPPorts(listenCounting(host, func(_ int, account string) { accepted <- account }),
		func(_ string, c net.Conn) { c.Close() })
	charged := func(t *testing.T, addr string) string {
		t.Helper()
		port, _ := portOf(addr)
		dial(t, net.JoinHostPort(host, strconv.Itoa(port)))
		return <-accepted
	}
	next := func(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(freePort(t, host)) }
	must := func(h *portHandle, err error) *portHandle {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	t.Run("remote first, then a random bind of another account", func(t *testing.T) {
		addr := next(t)
		p.setRemote(map[string]string{addr: "A"})
		defer p.setRemote(nil)
		if _, err := p.acquireRandom(addr, "B"); !errors.Is(err, errPortOtherAccount) {
			t.Fatalf("B's random bind took A's port: %v", err)
		}
		if got := charged(t, addr); got != "A" {
			t.Fatalf("a connection counted against %q, want A", got)
		}
	})
	t.Run("random bind first, then remote, the random bind refused by the store", func(t *testing.T) {
		addr := next(t)
		hB := must(p.acquireRandom(addr, "B"))
		p.setRemote(map[string]string{addr: "A"})
		defer p.setRemote(nil)
		if got := charged(t, addr); got != "A" {
			t.Fatalf("with A's endpoint online elsewhere, a connection counted against %q, want A", got)
		}
		hB.Close()
		if got := charged(t, addr); got != "A" {
			t.Fatalf("once B's bind let go, a connection counted against %q, want A", got)
		}
	})
	t.Run("random bind first, then a reserved bind of another account here", func(t *testing.T) {
		addr := next(t)
		hB := must(p.acquireRandom(addr, "B"))
		hA := must(p.acquire(addr, "A"))
		defer hA.Close()
		hB.Close()
		if got := charged(t, addr); got != "A" {
			t.Fatalf("a connection counted against %q, want A", got)
		}
	})
	t.Run("reserved bind first, then a random bind of another account", func(t *testing.T) {
		addr := next(t)
		hA := must(p.acquire(addr, "A"))
		defer hA.Close()
		if _, err := p.acquireRandom(addr, "B"); !errors.Is(err, errPortOtherAccount) {
			t.Fatalf("B's random bind took A's port: %v", err)
		}
		if got := charged(t, addr); got != "A" {
			t.Fatalf("a connection counted against %q, want A", got)
		}
	})
	t.Run("a stale remote: the random bind's row accepted", func(t *testing.T) {
		addr := next(t)
		hB := must(p.acquireRandom(addr, "B"))
		p.setRemote(map[string]string{addr: "A"})
		hB.confirm()
		if got := charged(t, addr); got != "B" {
			t.Fatalf("with B's row written, a connection counted against %q, want B", got)
		}
		p.setRemote(nil)
		if got := charged(t, addr); got != "B" {
			t.Fatalf("once the directory caught up, a connection counted against %q, want B", got)
		}
		hB.Close()
		if p.held(addr) {
			t.Fatal("the listener stayed open with nobody holding it")
		}
	})
	t.Run("an unbind that has not let go yet", func(t *testing.T) {
		addr := next(t)
		hA := must(p.acquire(addr, "A"))
		hB := must(p.acquire(addr, "B"))
		defer hB.Close()
		hA.Close()
		if got := charged(t, addr); got != "B" {
			t.Fatalf("a connection counted against %q, want B, whose row came last", got)
		}
	})
}

// TestTCPPortAccountAcrossReplicas: account b's random bind on replica 2 opens port P before
// its row is written; account a's endpoint on P comes online on replica 1 and reaches replica
// 2 through its directory; b's bind is then refused (as the store refuses its row) and lets
// go. Replica 2's listener on P stays open for a's endpoint, and its connections count
// against a, never b.
func TestTCPPortAccountAcrossReplicas(t *testing.T) {
	c := newCluster(t)
	const host1, host2 = "127.0.0.7", "127.0.0.8"
	port := 0
	for port == 0 {
		port = freePort(t, host1)
		if ln, err := net.Listen("tcp", net.JoinHostPort(host2, strconv.Itoa(port))); err != nil {
			port = 0
		} else {
			ln.Close()
		}
	}
	c.settings.TCPPortMin, c.settings.TCPPortMax = port, port
	accepted := make(chan string, 64)
	c.accepted = func(host string, p int, account string) {
		if host == host2 && p == port {
			select {
			case accepted <- account:
			default:
			}
		}
	}
	r1 := c.replica("rep_1", host1, 50*time.Millisecond)
	r2 := c.replica("rep_2", host2, 50*time.Millisecond)
	addr := "127.0.0.1:" + strconv.Itoa(port)

	hB, err := r2.gw.ports.acquireRandom(addr, c.accounts["b"])
	if err != nil {
		t.Fatal(err)
	}
	tun, err := r1.connect("a").Listen(context.Background(), config.TCPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	if tun.URL() != "tcp://"+addr {
		t.Fatalf("a's random bind took %s, want %s (the only port of the range)", tun.URL(), addr)
	}
	echoTCP(t, tun, "a")
	waitFor(t, "replica 2's directory holds "+addr+" for a", func() bool { return r2.gw.ports.remoteOf(addr) == c.accounts["a"] })
	hB.Close()
	if !r2.gw.ports.held(addr) {
		t.Fatal("replica 2 closed the listener of a's endpoint")
	}
	for len(accepted) > 0 {
		<-accepted
	}
	conn, err := net.Dial("tcp", net.JoinHostPort(host2, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(conn).ReadString('\n'); line != "a ping\n" {
		t.Fatalf("replica 2's port answered %q, want a's endpoint", strings.TrimSpace(line))
	}
	if got := <-accepted; got != c.accounts["a"] {
		t.Fatalf("a's connection on replica 2 counted against %q, want a's account %q (b is %q)", got, c.accounts["a"], c.accounts["b"])
	}
}

// TestRandomBindLeavesAnotherAccountsPort: while account a's random-port bind holds the only
// port of the range (its row not written yet), account b's random bind does not share that
// port's listener: it is refused with ERR_NGROK_325 (no free TCP port), and nothing is bound
// for b; once a's bind lets go, b's bind takes the port.
func TestRandomBindLeavesAnotherAccountsPort(t *testing.T) {
	c := newCluster(t)
	const host = "127.0.0.9"
	port := freePort(t, host)
	c.settings.TCPPortMin, c.settings.TCPPortMax = port, port
	r := c.replica("rep_1", host, time.Hour)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	hA, err := r.gw.ports.acquireRandom(addr, c.accounts["a"])
	if err != nil {
		t.Fatal(err)
	}
	sess := r.connect("b")
	ctx := context.Background()
	if tun, err := sess.Listen(ctx, config.TCPEndpoint()); err == nil || !strings.Contains(err.Error(), "ERR_NGROK_325") {
		if err == nil {
			tun.Close()
		}
		t.Fatalf("b's random bind beside a's hold of the only port: %v, want ERR_NGROK_325", err)
	}
	if r.gw.Online("tcp", addr) {
		t.Fatal("b's refused bind is online")
	}
	hA.Close()
	tun, err := sess.Listen(ctx, config.TCPEndpoint())
	if err != nil {
		t.Fatalf("b's random bind once the port is free: %v", err)
	}
	defer tun.Close()
	if tun.URL() != "tcp://"+addr {
		t.Fatalf("b's random bind took %s, want %s", tun.URL(), addr)
	}
}
