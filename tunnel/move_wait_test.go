package tunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// holdingRelay stands between an agent and a replica's agent listener: it ends the agent's TLS
// with a certificate of its own (added to pool, which the agent trusts) and opens its own to
// the replica, and holds the replica's first words on each connection (its answer to Auth) for
// hold. By then the replica has taken the session over, and the agent binds again only once it
// has the answer: the test's window between the two.
func holdingRelay(t *testing.T, to *replica, hold time.Duration, pool *x509.CertPool) string {
	t.Helper()
	cert, _ := selfSigned(t, "agents.test")
	pool.AddCert(cert.Leaf)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			agent, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer agent.Close()
				up, err := tls.Dial("tcp", to.agentAddr, &tls.Config{RootCAs: to.pool, ServerName: "agents.test"})
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, agent); up.Close() }()
				first := make([]byte, 64<<10)
				n, err := up.Read(first)
				if err != nil {
					return
				}
				time.Sleep(hold)
				if _, err := agent.Write(first[:n]); err != nil {
					return
				}
				_, _ = io.Copy(agent, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// moveWorld is three replicas on one store: A, where two accounts' agents start, B, where they
// reconnect, and C, which routes to them wherever they are and is asked for their endpoints.
type moveWorld struct {
	c       *cluster
	a, b, x *replica
	pool    *x509.CertPool
	hosts   map[string]string // by account
}

func newMoveWorld(t *testing.T) *moveWorld {
	t.Helper()
	c := newCluster(t)
	w := &moveWorld{c: c, hosts: map[string]string{"a": "mover-a.edgeplane.app", "b": "mover-b.edgeplane.app"}}
	w.a = c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	w.b = c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	w.x = c.replica("rep_c", "127.0.0.4", 20*time.Millisecond)
	w.pool = replicaPool(t, w.a, w.b)
	return w
}

// agents connects each account's agent to A, reconnecting through dialers[account], and waits
// until C routes its endpoint to A; it returns C's bind of each endpoint there.
func (w *moveWorld) agents(t *testing.T, dialers map[string]*gateDialer) map[string]Endpoint {
	t.Helper()
	eps := map[string]Endpoint{}
	for account, host := range w.hosts {
		gatedAgent(t, w.c, w.pool, account, host, dialers[account])
		waitFor(t, "C routes "+host+" to A", func() bool {
			r, ok := w.x.gw.Endpoint("http", host).(*remoteTunnel)
			return ok && r.replica == "rep_a"
		})
		eps[account] = w.x.gw.Endpoint("http", host)
	}
	return eps
}

// drainA drains replica A as a handover does, its row marked draining first, and waits until
// it has ended its sessions.
func (w *moveWorld) drainA(t *testing.T) {
	t.Helper()
	if err := w.c.st.DrainReplica(context.Background(), "rep_a"); err != nil {
		t.Fatal(err)
	}
	go w.a.gw.Drain(context.Background())
	waitFor(t, "A ends its sessions", func() bool { return len(w.a.gw.snapshotSessions()) == 0 })
}

// gate is an agent's dialer to A that reconnects to next once opened (at once when open).
func (w *moveWorld) gate(next string, open bool) *gateDialer {
	d := &gateDialer{first: w.a.agentAddr, next: next, open: make(chan struct{})}
	if open {
		close(d.open)
	}
	return d
}

// TestForwardWaitsForAgentSlowToReconnect: a connection forwarded to a draining replica whose
// agent has left waits for the agent as long as the draining replica keeps its rows (its agent
// is on its way), not a fixed 2 s: account a's agent reconnects only after about 3.5 s (its
// first tries are refused, and ngrok-go backs off), and a request replica C forwards for it
// meanwhile reaches it on B. Account b's agent moves at once and its request is answered too.
func TestForwardWaitsForAgentSlowToReconnect(t *testing.T) {
	w := newMoveWorld(t)
	slow := w.gate(w.b.agentAddr, false)
	eps := w.agents(t, map[string]*gateDialer{"a": slow, "b": w.gate(w.b.agentAddr, true)})

	w.drainA(t)
	time.AfterFunc(2500*time.Millisecond, func() { close(slow.open) }) // ngrok-go tries again at 3.5 s
	type answer struct {
		body string
		err  error
		took time.Duration
	}
	answers := map[string]chan answer{}
	for account, host := range w.hosts {
		answers[account] = make(chan answer, 1)
		go func() {
			start := time.Now()
			body, err := request(t, eps[account], host, "192.0.2.7:7")
			answers[account] <- answer{body, err, time.Since(start)}
		}()
	}
	for account := range w.hosts {
		got := <-answers[account]
		if got.err != nil || !strings.HasPrefix(got.body, account+" ") {
			t.Errorf("account %s: a request forwarded to the draining replica got %q, %v after %v; want its agent's answer from B",
				account, got.body, got.err, got.took.Round(time.Millisecond))
		}
		if account == "a" && got.took < 2*time.Second {
			t.Errorf("account a's request was answered after %v, before its agent could have reconnected", got.took)
		}
	}
}

// TestRequestWaitsForBindAfterTakeover: an agent that reconnected to replica B has taken its
// session's rows over there, and binds again only once B's answer to its Auth reaches it (held
// for 3 s here). Meanwhile B lists its bind's row: replica C routes a request for the endpoint
// to B, and B's own lookups count it as moving; B holds the request until the bind is made, and
// the request is answered by the agent. Account b's agent, whose answer is not held, is
// answered at once.
func TestRequestWaitsForBindAfterTakeover(t *testing.T) {
	w := newMoveWorld(t)
	relay := holdingRelay(t, w.b, 3*time.Second, w.pool)
	w.agents(t, map[string]*gateDialer{"a": w.gate(relay, true), "b": w.gate(w.b.agentAddr, true)})

	w.drainA(t)
	host := w.hosts["a"]
	waitFor(t, "C routes "+host+" to B, where its agent took its rows over", func() bool {
		r, ok := w.x.gw.Endpoint("http", host).(*remoteTunnel)
		return ok && r.replica == "rep_b"
	})
	if local, _ := w.b.gw.groups("http", host); local != nil {
		t.Fatal("the agent bound again on B before B's answer to its Auth reached it")
	}
	if !w.b.gw.Moving("http", host) {
		t.Errorf("B does not count %s as moving while its agent has yet to bind it again", host)
	}
	for account, h := range w.hosts {
		start := time.Now()
		body, err := request(t, w.x.gw.Endpoint("http", h), h, "192.0.2.7:7")
		if err != nil || !strings.HasPrefix(body, account+" ") {
			t.Errorf("account %s: a request C forwarded to B got %q, %v after %v; want its agent's answer",
				account, body, err, time.Since(start).Round(time.Millisecond))
		}
	}
	if w.b.gw.Moving("http", host) {
		t.Errorf("B still counts %s as moving once it is bound again", host)
	}
}

// TestTakenOverRowsNotBoundAgainGo: rows an agent took over and did not bind again within the
// move's bound (shortened to 1 s here; the agent's answer is held for 4 s) are deleted: the
// endpoint no longer counts as moving, and replica C no longer routes to it, so its requests
// get their error at once, not after another wait. When the agent binds at last, the endpoint
// is served again. Account b's agent, on A throughout, is untouched.
func TestTakenOverRowsNotBoundAgainGo(t *testing.T) {
	w := newMoveWorld(t)
	w.b.gw.moveWait = time.Second
	relay := holdingRelay(t, w.b, 4*time.Second, w.pool)
	stays := &gateDialer{first: w.x.agentAddr, next: w.x.agentAddr, open: make(chan struct{})}
	w.hosts = map[string]string{"a": "late-a.edgeplane.app"}
	w.agents(t, map[string]*gateDialer{"a": w.gate(relay, true)})
	gatedAgent(t, w.c, replicaPool(t, w.x), "b", "stays-b.edgeplane.app", stays)

	w.drainA(t)
	host := w.hosts["a"]
	waitFor(t, "B takes the rows over", func() bool { return w.b.gw.Moving("http", host) })
	// B gives them up at its bound, while the agent is still held: not because it bound again.
	waitFor(t, "B gives the rows up", func() bool { return !w.b.gw.Moving("http", host) })
	if local, _ := w.b.gw.groups("http", host); local != nil {
		t.Errorf("B stopped counting %s as moving only once its agent bound again, not at its 1 s bound", host)
	}
	waitFor(t, "C stops routing "+host, func() bool { return w.x.gw.Endpoint("http", host) == nil && !w.x.gw.Moving("http", host) })
	if rows, err := w.c.st.ReplicaTunnels(context.Background(), "rep_b", 0); err != nil || len(rows) != 0 {
		t.Errorf("B's rows once given up: %+v, %v; want none", rows, err)
	}
	waitFor(t, "the agent binds again on B, late", func() bool {
		local, _ := w.b.gw.groups("http", host)
		return local != nil
	})
	waitFor(t, "C routes "+host+" to B", func() bool {
		r, ok := w.x.gw.Endpoint("http", host).(*remoteTunnel)
		return ok && r.replica == "rep_b"
	})
	if body, err := request(t, w.x.gw.Endpoint("http", host), host, "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "a ") {
		t.Errorf("a request for %s once bound late: %q, %v", host, body, err)
	}
	if body, err := request(t, w.x.gw.Endpoint("http", "stays-b.edgeplane.app"), "stays-b.edgeplane.app", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "b ") {
		t.Errorf("account b's endpoint: %q, %v", body, err)
	}
}

// TestForwardGivesUpWhenRowsGo: a connection forwarded to a draining replica whose agent never
// comes back waits while the draining replica keeps the agent's rows (1 s here) and fails once
// they are gone, saying the endpoint is offline (the public listeners answer 404
// ERR_NGROK_3200), not after the move's whole bound. Account b's agent comes back on B and its
// request is answered.
func TestForwardGivesUpWhenRowsGo(t *testing.T) {
	w := newMoveWorld(t)
	w.a.gw.moveWait = time.Second
	w.x.gw.moveWait = 30 * time.Second // C's own bound, far from A's: which one ended the wait shows
	eps := w.agents(t, map[string]*gateDialer{"a": w.gate(w.b.agentAddr, false), "b": w.gate(w.b.agentAddr, true)})
	w.drainA(t)
	start := time.Now()
	_, err := request(t, eps["a"], w.hosts["a"], "192.0.2.7:7")
	took := time.Since(start)
	var off interface{ EndpointOffline() bool }
	if !errors.As(err, &off) || !off.EndpointOffline() {
		t.Errorf("a request for the endpoint whose agent never came back: %v, want an offline endpoint's error", err)
	}
	if took < 500*time.Millisecond || took > 15*time.Second {
		t.Errorf("it failed after %v, want once A gave the rows up (1 s after ending the session)", took)
	}
	if body, err := request(t, eps["b"], w.hosts["b"], "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "b ") {
		t.Errorf("account b's request: %q, %v; want its agent's answer from B", body, err)
	}
}
