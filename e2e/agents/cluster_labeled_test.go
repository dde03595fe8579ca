package agents

import (
	"testing"
	"time"
)

// TestClusterLabeledTunnelMoves: on three replicas (PostgreSQL, HAProxy), account a's and
// account b's agents each serve a labeled tunnel edge=mover for their own HTTPS edge, both on
// the first replica, which hands over (SIGUSR2). Account a's agent gets the successor's answer
// to its Auth only 3 s after the successor took its session over. Public requests run in a loop
// throughout, for a's edge on the first replica (whose successor waits while it holds a's row)
// and on the second (which forwards to the draining replica, then to the successor's row), and
// for b's edge on the second: not one fails, and neither account's agent answers the other's.
func TestClusterLabeledTunnelMoves(t *testing.T) {
	c := startCluster(t)
	c.logsOnFailure()
	wb := c.lb.asAccount("labeled-cluster-b")
	moverEdge(t, c.lb, "cmover-a.example.com")
	moverEdge(t, wb, "cmover-b.example.com")
	_, tokenA := c.lb.credential()
	_, tokenB := wb.credential()
	first, second := c.replicas[0], c.replicas[1]
	holder, relay := newReconnectHolder(t, first.world, 3*time.Second)
	serveMover(t, first.mustConnect(tokenA, holder.options(relay)...), "account-a")
	serveMover(t, first.mustConnect(tokenB), "account-b")

	loops := map[string]*requestLoop{}
	for name, cs := range map[string]struct {
		r         *clusterReplica
		url, want string
	}{
		"a on the first replica":  {first, "https://cmover-a.example.com/", "account-a agent"},
		"a on the second replica": {second, "https://cmover-a.example.com/", "account-a agent"},
		"b on the second replica": {second, "https://cmover-b.example.com/", "account-b agent"},
	} {
		client := cs.r.httpsClient()
		eventually(t, 5*time.Second, name+" is served", func() bool { return fetch(client, cs.url, cs.want) == nil })
		loops[name] = startLoop(client, cs.url, cs.want, 1)
	}
	all := func() []*requestLoop {
		var ls []*requestLoop
		for _, l := range loops {
			ls = append(ls, l)
		}
		return ls
	}
	waitRequests(t, 4, all()...)
	newRestarter(first.world).handover(t)
	eventually(t, 20*time.Second, "account a's agent gets its held answer", func() bool { return holder.released.Load() > 0 })
	waitRequests(t, 4, all()...)
	for name, l := range loops {
		t.Logf("%s:", name)
		l.stop(t)
	}
	if holder.holds.Load() == 0 {
		t.Error("account a's agent did not reconnect through the relay that holds it")
	}
}
