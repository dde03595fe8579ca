package tunnel

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// TestDirectoryComplete: a replica's view of the others is complete (DirectoryComplete, which a
// starting replica waits on before its public listeners serve) only once it routes to every live
// replica that is not draining, and it polls for that at once rather than after its interval (an
// hour here). A live replica no link reaches keeps it incomplete until it drains; then account
// A's endpoint on another replica is routed to as soon as the view is complete, and as A's.
func TestDirectoryComplete(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	ctx := context.Background()
	const host = "complete.edgeplane.app"
	tun, err := a.connect("a").Listen(ctx, config.HTTPEndpoint(config.WithDomain(host), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, tun, "on-a")
	// A replica whose row is live but whose link address nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ghostAddr := ln.Addr().String()
	ln.Close()
	if err := c.st.AnnounceReplica(ctx, "rep_ghost", ghostAddr); err != nil {
		t.Fatal(err)
	}

	b := c.replica("rep_b", "127.0.0.3", time.Hour)
	waitFor(t, "B routes to A's endpoint", func() bool { return b.gw.Endpoint("http", host) != nil })
	select {
	case <-b.gw.DirectoryComplete():
		t.Fatal("B's view is complete while a live replica cannot be reached")
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.st.DrainReplica(ctx, "rep_ghost"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.gw.DirectoryComplete():
	case <-time.After(20 * time.Second):
		t.Fatal("B's view is not complete once the unreachable replica drains")
	}

	// A replica started now: complete means A's endpoint is routed to, with A's account.
	d := c.replica("rep_d", "127.0.0.4", time.Hour)
	select {
	case <-d.gw.DirectoryComplete():
	case <-time.After(20 * time.Second):
		t.Fatal("D's view is not complete")
	}
	e, ok := d.gw.Endpoint("http", host).(*remoteTunnel)
	if !ok || e.replica != "rep_a" || e.AccountID() != c.accounts["a"] {
		t.Fatalf("D's endpoint for %s once complete: %T %+v, want A's bind on rep_a", host, d.gw.Endpoint("http", host), e)
	}
	if body, err := request(t, e, host, "192.0.2.9:9"); err != nil || !strings.HasPrefix(body, "on-a") {
		t.Fatalf("a request through D: %q, %v", body, err)
	}
}
