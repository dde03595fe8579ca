package tunnel

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestCloseDeletesSessionRows: a replica that closes (a shutdown without a handover) ends its
// agents' sessions itself, so their rows go at once, as the sessions it ends otherwise do: the
// links it closes are not links its agents lost, whose rows would wait MoveWait for a return
// that a process on its way out never sees through. Both accounts' rows go.
func TestCloseDeletesSessionRows(t *testing.T) {
	c := newCluster(t)
	r := c.replica("rep_a", "127.0.0.1", 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, account := range []string{"a", "b"} {
		for range 3 {
			tun, err := r.connect(account).Listen(ctx, config.TCPEndpoint())
			if err != nil {
				t.Fatal(err)
			}
			echoTCP(t, tun, account)
		}
	}
	if ids, err := c.st.ReplicaSessions(ctx, "rep_a"); err != nil || len(ids) != 6 {
		t.Fatalf("rep_a's sessions before it closes: %v, %v; want 6", ids, err)
	}
	r.gw.Close()
	ids, err := c.st.ReplicaSessions(ctx, "rep_a")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := c.st.ReplicaTunnels(ctx, "rep_a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 0 || len(rows) != 0 {
		t.Errorf("once rep_a closed, the store still lists %d of its sessions and %d of its tunnels; want none", len(ids), len(rows))
	}
}

// crashDialer connects an agent straight to a replica until crash, which cuts its connections
// and refuses its next dials: the agent's process is gone, without a goodbye.
type crashDialer struct {
	addr  string
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

func (d *crashDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d *crashDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, net.ErrClosed
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, d.addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *crashDialer) crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		c.Close()
	}
}

// TestCloseDeletesLostSessionsRows: the rows of sessions whose links dropped wait for their
// agents' return (here longer than the test), but a replica that closes deletes them itself
// before Close returns, rather than leave a timer to a store that is about to close (or to a
// process that exits before it fires). Both accounts' rows go.
func TestCloseDeletesLostSessionsRows(t *testing.T) {
	c := newCluster(t)
	r := c.replica("rep_a", "127.0.0.1", 0)
	r.gw.moveWait = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dialers []*crashDialer
	for _, account := range []string{"a", "b"} {
		d := &crashDialer{addr: r.agentAddr}
		dialers = append(dialers, d)
		sess, err := ngrok.Connect(ctx, ngrok.WithDialer(d), ngrok.WithServer("agents.test:443"),
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
	}
	for _, d := range dialers {
		d.crash()
	}
	waitFor(t, "rep_a notices both links dropped", func() bool {
		r.gw.mu.Lock()
		defer r.gw.mu.Unlock()
		return len(r.gw.sessions) == 0 && len(r.gw.lost) == 2
	})
	if ids, err := c.st.ReplicaSessions(ctx, "rep_a"); err != nil || len(ids) != 2 {
		t.Fatalf("the lost sessions' rows before rep_a closes: %v, %v; want both kept for their agents", ids, err)
	}
	r.gw.Close()
	ids, err := c.st.ReplicaSessions(ctx, "rep_a")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := c.st.ReplicaTunnels(ctx, "rep_a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 0 || len(rows) != 0 {
		t.Errorf("once rep_a closed, the store still lists %d of its sessions and %d of its tunnels; want none", len(ids), len(rows))
	}
}
