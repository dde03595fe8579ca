package tunnel

import (
	"context"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// gateDialer dials first for an agent's first connection, and then, for its reconnects, next
// once open is closed (refusing until then, so that ngrok-go backs off and tries again).
type gateDialer struct {
	first, next string
	open        chan struct{}
	dials       atomic.Int64
}

func (d *gateDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d *gateDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	addr := d.first
	if d.dials.Add(1) > 1 {
		select {
		case <-d.open:
			addr = d.next
		default:
			return nil, &net.OpError{Op: "dial", Net: network, Err: errGateClosed}
		}
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

type gateError struct{}

func (gateError) Error() string { return "the test holds this agent back" }

var errGateClosed = gateError{}

// TestDrainLeavesRowsToMovingAgents: a drain ends its sessions without deleting their rows, so
// that the agents' reconnects elsewhere take them over without waiting on this process's
// transaction (which holds the locks theirs need); once taken over, the drain returns. Account
// a's agent reconnects to replica B and takes its session and tunnel rows over there; account
// b's agent never comes back, and its rows are deleted once the drain's wait for it is over.
func TestDrainLeavesRowsToMovingAgents(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	a.gw.moveWait = 1500 * time.Millisecond
	ctx := context.Background()
	pool := replicaPool(t, a, b)
	agent := func(account, host string, d *gateDialer) ngrok.Session {
		t.Helper()
		return gatedAgent(t, c, pool, account, host, d)
	}
	moving := &gateDialer{first: a.agentAddr, next: b.agentAddr, open: make(chan struct{})}
	gone := &gateDialer{first: a.agentAddr, next: b.agentAddr, open: make(chan struct{})}
	agent("a", "takeover-a.edgeplane.app", moving)
	agent("b", "takeover-b.edgeplane.app", gone)
	sessions := func(replica string) []string {
		t.Helper()
		ids, err := c.st.ReplicaSessions(ctx, replica)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	before := sessions("rep_a")
	if len(before) != 2 {
		t.Fatalf("replica A's session rows before the drain: %v, want both agents'", before)
	}

	drained := make(chan int, 1)
	go func() { drained <- a.gw.Drain(ctx) }()
	waitFor(t, "A ends both sessions", func() bool { return len(a.gw.snapshotSessions()) == 0 })
	// Both agents are away: the rows are still A's, for them to take over.
	if got := sessions("rep_a"); !slices.Equal(got, before) {
		t.Fatalf("replica A's session rows once its sessions ended: %v, want %v still there", got, before)
	}
	select {
	case <-drained:
		t.Fatal("the drain returned before its agents took their rows over or its wait ended")
	default:
	}

	close(moving.open)
	waitFor(t, "a's agent binds again on B", func() bool {
		local, _ := b.gw.groups("http", "takeover-a.edgeplane.app")
		return local != nil
	})
	select {
	case cut := <-drained:
		if cut != 0 {
			t.Errorf("the drain cut %d sessions, want none (no stream was open)", cut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the drain did not return")
	}
	if got := sessions("rep_a"); len(got) != 0 {
		t.Errorf("replica A's session rows after the drain: %v, want none (b's deleted, a's taken over)", got)
	}
	onB := sessions("rep_b")
	if len(onB) != 1 || !slices.Contains(before, onB[0]) {
		t.Errorf("replica B's session rows: %v, want a's agent's session, which kept its id (one of %v)", onB, before)
	}
	rows, err := c.st.ReplicaTunnels(ctx, "rep_b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Name != "takeover-a.edgeplane.app" || rows[0].AccountID != c.accounts["a"] {
		t.Errorf("replica B's tunnel rows: %+v, want a's one bind", rows)
	}
	if rows, err := c.st.ReplicaTunnels(ctx, "rep_a", 0); err != nil || len(rows) != 0 {
		t.Errorf("replica A's tunnel rows after the drain: %+v, %v; want none", rows, err)
	}
	if n, err := c.st.CountAgentTunnels(ctx, c.accounts["b"]); err != nil || n != 0 {
		t.Errorf("account b's tunnels after the drain: %d, %v; want none (its agent never came back)", n, err)
	}
}

// TestForwardFollowsMoveWithoutWaitingForThePoll: a connection forwarded to a replica whose
// agent has just left follows the bind to its new replica as soon as it is bound there, though
// the forwarding replica's directory would not poll again for a minute: a forwarded connection
// waiting for its bind makes the directory poll at once. Both accounts' agents move from A to B;
// replica C forwards a request for each endpoint to A, and each reaches its own agent on B.
func TestForwardFollowsMoveWithoutWaitingForThePoll(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	ctx := context.Background()
	pool := replicaPool(t, a, b)
	hosts := map[string]string{"a": "follow-a.edgeplane.app", "b": "follow-b.edgeplane.app"}
	for account, host := range hosts {
		d := &gateDialer{first: a.agentAddr, next: b.agentAddr, open: make(chan struct{})}
		close(d.open) // reconnects go to B at once
		gatedAgent(t, c, pool, account, host, d)
	}
	// C starts once both binds are on A: its first polls (until its view is complete) read
	// them, and the next would come only a minute later.
	cr := c.replica("rep_c", "127.0.0.4", time.Minute)
	eps := map[string]Endpoint{}
	for account, host := range hosts {
		waitFor(t, "C routes "+host+" to A", func() bool {
			r, ok := cr.gw.Endpoint("http", host).(*remoteTunnel)
			return ok && r.replica == "rep_a"
		})
		eps[account] = cr.gw.Endpoint("http", host)
	}
	go a.gw.Drain(ctx)
	for account, host := range hosts {
		waitFor(t, host+" bound again on B", func() bool {
			local, _ := b.gw.groups("http", host)
			return local != nil
		})
		body, err := request(t, eps[account], host, "192.0.2.7:7")
		if err != nil || !strings.HasPrefix(body, account+" ") {
			t.Errorf("a request for %s forwarded to A after its agent moved to B: %q, %v", host, body, err)
		}
	}
}

// replicaPool trusts the agent listeners' certificates of the replicas, so that one agent can
// reconnect from one to another.
func replicaPool(t *testing.T, rs ...*replica) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range rs {
		leaf, err := x509.ParseCertificate(r.gw.cfg.TLS.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		pool.AddCert(leaf)
	}
	return pool
}

// gatedAgent connects an ngrok-go agent of account through d and binds host over plain HTTP,
// answering with the account's name; it ends with the test.
func gatedAgent(t *testing.T, c *cluster, pool *x509.CertPool, account, host string, d *gateDialer) ngrok.Session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := ngrok.Connect(ctx, ngrok.WithDialer(d), ngrok.WithServer("agents.test:443"), ngrok.WithCA(pool),
		ngrok.WithAuthtoken(c.tokens[account]))
	if err != nil {
		cancel()
		t.Fatalf("connect %s: %v", account, err)
	}
	t.Cleanup(func() { sess.Close(); cancel() })
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("bind %s: %v", host, err)
	}
	serveHTTP(t, tun, account)
	return sess
}
