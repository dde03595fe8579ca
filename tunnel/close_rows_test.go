package tunnel

import (
	"context"
	"testing"

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
