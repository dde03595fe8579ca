package tunnel

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestRandomTCPPortComesBackToItsAgentOnly: account a's agent has a tcp endpoint on a random
// port of replica A; A drains, and the agent reconnects to B through a relay that holds B's
// answer to its Auth for 3 s. Meanwhile neither account b's agent nor another agent of account
// a may bind the port on B (307: the port is no reserved address of theirs, and their sessions
// did not take its row over); then the agent binds it again with the address it was given, and
// B's listener on the port answers with the agent's upstream.
func TestRandomTCPPortComesBackToItsAgentOnly(t *testing.T) {
	w := newMoveWorld(t)
	relay := holdingRelay(t, w.b, 3*time.Second, w.pool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sess, err := ngrok.Connect(ctx, ngrok.WithDialer(w.gate(relay, true)), ngrok.WithServer("agents.test:443"),
		ngrok.WithCA(w.pool), ngrok.WithAuthtoken(w.c.tokens["a"]))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	tun, err := sess.Listen(ctx, config.TCPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	echoTCP(t, tun, "a")
	addr := strings.TrimPrefix(tun.URL(), "tcp://")
	port, _ := portOf(addr)
	answer := func(host string) string { return pingPort(host, port) }
	if got := answer(w.a.tcpHost); got != "a ping\n" {
		t.Fatalf("A's listener on %s answered %q", addr, got)
	}

	w.drainA(t)
	waitFor(t, "B holds the row of "+addr+" for the moving agent", func() bool { return w.b.gw.Moving("tcp", addr) })
	for _, account := range []string{"b", "a"} {
		_, err := w.b.connect(account).Listen(ctx, config.TCPEndpoint(config.WithRemoteAddr(addr)))
		if err == nil || !strings.Contains(err.Error(), "ERR_NGROK_307") {
			t.Errorf("a new session of account %s bound %s while its agent moved: %v; want ERR_NGROK_307", account, addr, err)
		}
	}
	waitFor(t, "the agent's port answers on B", func() bool { return answer(w.b.tcpHost) == "a ping\n" })
	if tun.URL() != "tcp://"+addr {
		t.Errorf("the agent's URL changed to %s", tun.URL())
	}
	if _, err := w.b.connect("b").Listen(ctx, config.TCPEndpoint(config.WithRemoteAddr(addr))); err == nil || !strings.Contains(err.Error(), "ERR_NGROK_307") {
		t.Errorf("account b bound %s once its agent was back: %v; want ERR_NGROK_307", addr, err)
	}
}
