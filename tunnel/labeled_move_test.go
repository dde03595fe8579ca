package tunnel

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// moveLabels are the labels of every labeled tunnel of these tests, the same for both accounts:
// labels are an account's own, and account b's must never stand in for account a's.
var moveLabels = map[string]string{"edge": "mover"}

// labeledAgent connects an ngrok-go agent of account through d and starts a labeled tunnel with
// moveLabels, answering with the account's name; it ends with the test.
func labeledAgent(t *testing.T, c *cluster, pool *x509.CertPool, account string, d *gateDialer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := ngrok.Connect(ctx, ngrok.WithDialer(d), ngrok.WithServer("agents.test:443"), ngrok.WithCA(pool),
		ngrok.WithAuthtoken(c.tokens[account]))
	if err != nil {
		cancel()
		t.Fatalf("connect %s: %v", account, err)
	}
	t.Cleanup(func() { sess.Close(); cancel() })
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "mover")))
	if err != nil {
		t.Fatalf("labeled tunnel of %s: %v", account, err)
	}
	serveHTTP(t, tun, account)
}

// labeledOn returns the tunnels of the account's group of moveLabels that r's gateway routes
// to on replica, "" for its own.
func labeledOn(r *replica, accountID, replica string) []Endpoint {
	var out []Endpoint
	for _, e := range r.gw.Labeled(accountID, moveLabels) {
		switch e := e.(type) {
		case *remoteTunnel:
			if e.replica == replica {
				out = append(out, e)
			}
		case *Tunnel:
			if replica == "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// TestLabeledRequestWaitsForBindAfterTakeover: account a's agent of a labeled tunnel moves from
// A to B, and binds again only once B's answer to its Auth reaches it (held for 6 s, B's bound
// on the move 10 s, so that a loaded machine's slow polls still see the hold). B took the
// tunnel's row over with the session: replica C routes the tunnel group to B, and B counts the
// group as moving for account a, not for account b, whose agent with the same labels is
// online on B throughout and never stands in for a's. A request C forwards meanwhile waits on B
// and is answered by a's agent; the new bind keeps the row's id. Account b's group is answered
// by b's agent alone.
func TestLabeledRequestWaitsForBindAfterTakeover(t *testing.T) {
	w := newMoveWorld(t)
	accA, accB := w.c.accounts["a"], w.c.accounts["b"]
	w.b.gw.moveWait = 10 * time.Second
	relay := holdingRelay(t, w.b, 6*time.Second, w.pool)
	labeledAgent(t, w.c, w.pool, "a", w.gate(relay, true))
	labeledAgent(t, w.c, w.pool, "b", &gateDialer{first: w.b.agentAddr, next: w.b.agentAddr, open: make(chan struct{})})
	waitFor(t, "C routes a's group to A", func() bool { return len(labeledOn(w.x, accA, "rep_a")) == 1 })
	rowID := labeledOn(w.x, accA, "rep_a")[0].(*remoteTunnel).row.ID

	w.drainA(t)
	waitFor(t, "C routes a's group to B, where its agent took its row over", func() bool {
		return len(labeledOn(w.x, accA, "rep_b")) == 1
	})
	if got := labeledOn(w.b, accA, ""); len(got) != 0 {
		t.Fatal("a's agent bound again on B before B's answer to its Auth reached it")
	}
	// Each check of the move's state holds also if the agent has bound again meanwhile.
	if moving := w.b.gw.LabeledMoving(accA, moveLabels) && w.b.gw.LabeledMoving(accA, nil); !moving && len(labeledOn(w.b, accA, "")) == 0 {
		t.Error("B does not count a's group as moving while its agent has yet to bind again")
	}
	if w.b.gw.LabeledMoving(accB, moveLabels) {
		t.Error("B counts account b's group as moving: a's row with the same labels extends b's wait")
	}
	for _, e := range w.b.gw.Labeled(accA, moveLabels) {
		if e.AccountID() != accA {
			t.Errorf("B's group of account a has a tunnel of account %s: b's with the same labels answers for it", e.AccountID())
		}
	}
	ep := labeledOn(w.x, accA, "rep_b")[0]
	if body, err := request(t, ep, "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "a ") {
		t.Errorf("a request C forwarded to B for a's group got %q, %v; want a's agent's answer", body, err)
	}
	local := labeledOn(w.b, accA, "")
	if len(local) != 1 || local[0].(*Tunnel).rowID != rowID {
		t.Fatalf("a's group on B once bound again: %d tunnels, want one with row %s (its row's id kept)", len(local), rowID)
	}
	if w.b.gw.LabeledMoving(accA, moveLabels) {
		t.Error("B still counts a's group as moving once bound again")
	}
	for account, id := range map[string]string{"a": accA, "b": accB} {
		got := w.b.gw.Labeled(id, moveLabels)
		if len(got) != 1 {
			t.Fatalf("B's group of account %s: %d tunnels, want its own agent's", account, len(got))
		}
		if body, err := request(t, got[0], "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, account+" ") {
			t.Errorf("account %s's group on B answered %q, %v", account, body, err)
		}
	}
}

// TestLabeledForwardFollowsSlowMove: a connection replica C forwards to account a's labeled
// tunnel on draining replica A, whose agent has left and reconnects to B only after about 3.5 s
// (its first tries are refused, and ngrok-go backs off), follows the tunnel's row to B while A's
// rows say it is moving, and is answered by a's agent there. Account b's agent, with the same
// labels on C, is never taken for a's.
func TestLabeledForwardFollowsSlowMove(t *testing.T) {
	w := newMoveWorld(t)
	accA, accB := w.c.accounts["a"], w.c.accounts["b"]
	slow := w.gate(w.b.agentAddr, false)
	labeledAgent(t, w.c, w.pool, "a", slow)
	labeledAgent(t, w.c, replicaPool(t, w.x), "b", &gateDialer{first: w.x.agentAddr, next: w.x.agentAddr, open: make(chan struct{})})
	waitFor(t, "C routes a's group to A", func() bool { return len(labeledOn(w.x, accA, "rep_a")) == 1 })
	ep := labeledOn(w.x, accA, "rep_a")[0]

	w.drainA(t)
	waitFor(t, "C sees A draining", func() bool { return ep.(*remoteTunnel).Draining() })
	if !w.x.gw.LabeledMoving(accA, moveLabels) || w.x.gw.LabeledMoving(accB, moveLabels) {
		t.Error("C does not count a's group alone as moving while A drains")
	}
	time.AfterFunc(2500*time.Millisecond, func() { close(slow.open) })
	if body, err := request(t, ep, "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "a ") {
		t.Errorf("a request for a's group forwarded to A after its agent left got %q, %v; want a's agent's answer from B", body, err)
	}
	if got := labeledOn(w.x, accB, ""); len(got) != 1 {
		t.Fatalf("C's group of account b: %d local tunnels, want b's", len(got))
	} else if body, err := request(t, got[0], "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "b ") {
		t.Errorf("account b's group on C answered %q, %v", body, err)
	}
}

// TestLabeledRowsNotBoundAgainGo: a labeled tunnel's row an agent took over and did not bind
// again within the move's bound (shortened to 1 s on B; the agent's answer is held for 4 s) is
// deleted: the group no longer counts as moving and replica C no longer routes it to B, so
// that the wait of an edge's request ends. When the agent binds at last, the group is served
// again. Account b's agent with the same labels, on C throughout, is untouched.
func TestLabeledRowsNotBoundAgainGo(t *testing.T) {
	w := newMoveWorld(t)
	accA, accB := w.c.accounts["a"], w.c.accounts["b"]
	w.b.gw.moveWait = time.Second
	relay := holdingRelay(t, w.b, 4*time.Second, w.pool)
	labeledAgent(t, w.c, w.pool, "a", w.gate(relay, true))
	labeledAgent(t, w.c, replicaPool(t, w.x), "b", &gateDialer{first: w.x.agentAddr, next: w.x.agentAddr, open: make(chan struct{})})
	waitFor(t, "C routes a's group to A", func() bool { return len(labeledOn(w.x, accA, "rep_a")) == 1 })

	w.drainA(t)
	waitFor(t, "B takes a's row over", func() bool { return w.b.gw.LabeledMoving(accA, moveLabels) })
	waitFor(t, "B gives the row up", func() bool { return !w.b.gw.LabeledMoving(accA, moveLabels) })
	waitFor(t, "C stops routing a's group", func() bool {
		return len(w.x.gw.Labeled(accA, moveLabels)) == 0 && !w.x.gw.LabeledMoving(accA, moveLabels)
	})
	if rows, err := w.c.st.ReplicaTunnels(context.Background(), "rep_b", 0); err != nil || len(rows) != 0 {
		t.Errorf("B's rows once given up: %+v, %v; want none", rows, err)
	}
	waitFor(t, "a's agent binds again on B, late", func() bool { return len(labeledOn(w.b, accA, "")) == 1 })
	waitFor(t, "C routes a's group to B", func() bool { return len(labeledOn(w.x, accA, "rep_b")) == 1 })
	if body, err := request(t, labeledOn(w.x, accA, "rep_b")[0], "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "a ") {
		t.Errorf("a's group once bound late: %q, %v", body, err)
	}
	if got := w.x.gw.Labeled(accB, moveLabels); len(got) != 1 {
		t.Fatalf("C's group of account b: %d tunnels, want b's", len(got))
	} else if body, err := request(t, got[0], "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "b ") {
		t.Errorf("account b's group: %q, %v", body, err)
	}
}

// TestLabeledMoveWithinAccountQuota: an account at its quota of tunnels on every replica (one,
// counted from the store's rows) moves its labeled tunnel from A to B: the row B took over is
// the one the agent binds again, so the bind adds no row and is not refused; the tunnel comes
// back with its row's id and serves. Account b, at the same quota with a labeled tunnel of the
// same labels on C, still has a second tunnel refused.
func TestLabeledMoveWithinAccountQuota(t *testing.T) {
	c := newCluster(t)
	c.quotas = Quotas{BindsPerAccount: 1}
	w := &moveWorld{c: c}
	w.a = c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	w.b = c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	w.x = c.replica("rep_c", "127.0.0.4", 20*time.Millisecond)
	w.pool = replicaPool(t, w.a, w.b)
	accA, accB := c.accounts["a"], c.accounts["b"]
	labeledAgent(t, c, w.pool, "a", w.gate(w.b.agentAddr, true))
	labeledAgent(t, c, replicaPool(t, w.x), "b", &gateDialer{first: w.x.agentAddr, next: w.x.agentAddr, open: make(chan struct{})})
	waitFor(t, "C routes a's group to A", func() bool { return len(labeledOn(w.x, accA, "rep_a")) == 1 })
	rowID := labeledOn(w.x, accA, "rep_a")[0].(*remoteTunnel).row.ID

	w.drainA(t)
	waitFor(t, "a's tunnel bound again on B", func() bool { return len(labeledOn(w.b, accA, "")) == 1 })
	if got := labeledOn(w.b, accA, "")[0].(*Tunnel).rowID; got != rowID {
		t.Errorf("a's tunnel came back on B with row %s, want its row %s", got, rowID)
	}
	if n, err := c.st.CountAgentTunnels(context.Background(), accA); err != nil || n != 1 {
		t.Errorf("account a's rows after the move: %d, %v; want its one", n, err)
	}
	waitFor(t, "C routes a's group to B", func() bool { return len(labeledOn(w.x, accA, "rep_b")) == 1 })
	if body, err := request(t, labeledOn(w.x, accA, "rep_b")[0], "group.example", "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "a ") {
		t.Errorf("a's group after the move: %q, %v", body, err)
	}
	_, err := w.x.connect("b").Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "mover")))
	if err == nil || !strings.Contains(err.Error(), "limited to 1") {
		t.Errorf("account b's second labeled tunnel at its quota: %v, want the account's limit", err)
	}
	if got := w.x.gw.Labeled(accB, moveLabels); len(got) != 1 {
		t.Errorf("C's group of account b: %d tunnels, want b's one", len(got))
	}
}

// TestNamedMoveWithinAccountQuota: the same for a named bind, which presents its row's id (its
// token) again: an account at its quota of one tunnel moves its endpoint from A to B, and the
// bind is made again on its row on the agent's first session there, not refused (ngrok-go would
// then connect again, its row deleted with the session it left). Account b, at the same quota
// on C, still has a second endpoint refused.
func TestNamedMoveWithinAccountQuota(t *testing.T) {
	c := newCluster(t)
	c.quotas = Quotas{BindsPerAccount: 1}
	w := &moveWorld{c: c}
	w.a = c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	w.b = c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	w.x = c.replica("rep_c", "127.0.0.4", 20*time.Millisecond)
	w.pool = replicaPool(t, w.a, w.b)
	host := "quota-a.edgeplane.app"
	moving := w.gate(w.b.agentAddr, true)
	gatedAgent(t, c, w.pool, "a", host, moving)
	gatedAgent(t, c, replicaPool(t, w.x), "b", "quota-b.edgeplane.app",
		&gateDialer{first: w.x.agentAddr, next: w.x.agentAddr, open: make(chan struct{})})
	waitFor(t, "C routes "+host+" to A", func() bool {
		r, ok := w.x.gw.Endpoint("http", host).(*remoteTunnel)
		return ok && r.replica == "rep_a"
	})
	rowID := w.x.gw.Endpoint("http", host).(*remoteTunnel).row.ID

	w.drainA(t)
	waitFor(t, host+" bound again on B", func() bool {
		local, _ := w.b.gw.groups("http", host)
		return local != nil
	})
	if local, _ := w.b.gw.groups("http", host); local.tunnels[0].rowID != rowID {
		t.Errorf("%s came back on B with row %s, want its row %s", host, local.tunnels[0].rowID, rowID)
	}
	if body, err := request(t, w.b.gw.Endpoint("http", host), host, "192.0.2.7:7"); err != nil || !strings.HasPrefix(body, "a ") {
		t.Errorf("%s after the move: %q, %v", host, body, err)
	}
	if n := moving.dials.Load(); n != 2 {
		t.Errorf("a's agent connected %d times, want twice (to A, then once to B): a refused bind makes it connect again", n)
	}
	_, err := w.x.connect("b").Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("quota-b2.edgeplane.app")))
	if err == nil || !strings.Contains(err.Error(), "limited to 1") {
		t.Errorf("account b's second endpoint at its quota: %v, want the account's limit", err)
	}
}
