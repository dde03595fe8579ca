package tunnel

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestDirectoryAvoidsDrainingReplica: once a replica is marked draining (its successor serves
// and its agents are about to move there), another replica is told (Config.OnPeerDraining), no
// longer routes to its bind of a pooled endpoint that a third replica also holds, and still
// routes to a bind only it holds, as Draining, so that the public listeners do not keep the
// stream open after each request.
func TestDirectoryAvoidsDrainingReplica(t *testing.T) {
	c := newCluster(t)
	a := c.replica("rep_a", "127.0.0.2", 20*time.Millisecond)
	b := c.replica("rep_b", "127.0.0.3", 20*time.Millisecond)
	d := c.replica("rep_d", "127.0.0.4", 20*time.Millisecond)
	ctx := context.Background()
	const host, solo = "drainpool.edgeplane.app", "drainsolo.edgeplane.app"
	pooled := func(s ngrok.Session, name string) {
		tun, err := s.Listen(ctx, config.HTTPEndpoint(config.WithDomain(host), config.WithScheme(config.SchemeHTTP), config.WithPoolingEnabled(true)))
		if err != nil {
			t.Fatalf("pooled bind for %s: %v", name, err)
		}
		serveHTTP(t, tun, name)
	}
	sa := a.connect("a")
	pooled(sa, "on-a")
	pooled(d.connect("a"), "on-d")
	only, err := sa.Listen(ctx, config.HTTPEndpoint(config.WithDomain(solo), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, only, "solo-a")
	seen := map[string]int{}
	waitFor(t, "B spreads the pooled endpoint over A and D", func() bool {
		e := b.gw.Endpoint("http", host)
		if e == nil {
			return false
		}
		body, err := request(t, e, host, "192.0.2.9:9")
		if err == nil {
			seen[strings.Fields(body)[0]]++
		}
		return seen["on-a"] > 0 && seen["on-d"] > 0
	})
	waitFor(t, "B routes to A's solo endpoint", func() bool { return b.gw.Endpoint("http", solo) != nil })
	if e, ok := b.gw.Endpoint("http", solo).(*remoteTunnel); !ok || e.Draining() {
		t.Fatalf("before the drain, B's endpoint for %s: %T draining=%v", solo, e, ok && e.Draining())
	}
	if n := b.peerDrains.Load(); n != 0 {
		t.Fatalf("B was told of %d drains before any", n)
	}

	if err := c.st.DrainReplica(ctx, "rep_a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B is told that A drains", func() bool { return b.peerDrains.Load() == 1 })
	for i := range 30 {
		e := b.gw.Endpoint("http", host)
		if r, ok := e.(*remoteTunnel); !ok || r.Draining() || r.replica != "rep_d" {
			t.Fatalf("request %d for the pooled endpoint: B chose %T %+v, want D's bind", i, e, e)
		}
	}
	e, ok := b.gw.Endpoint("http", solo).(*remoteTunnel)
	if !ok || !e.Draining() {
		t.Fatalf("after the drain, B's endpoint for %s: %T, want A's bind, draining", solo, b.gw.Endpoint("http", solo))
	}
	if body, err := request(t, e, solo, "192.0.2.9:9"); err != nil || !strings.HasPrefix(body, "solo-a") {
		t.Fatalf("a request for the endpoint only the draining replica holds: %q, %v", body, err)
	}
	waitFor(t, "D is told that A drains", func() bool { return d.peerDrains.Load() == 1 })
}

// TestSessionRetire: the drain claims a session only while no proxy stream is open or being
// opened on it, and once it has, no stream can be counted on it any more: a stream being
// opened when the drain looks keeps the session, instead of being cut with it.
func TestSessionRetire(t *testing.T) {
	s := &session{}
	if !s.enter() {
		t.Fatal("a fresh session refuses a stream")
	}
	if s.retire() {
		t.Fatal("the drain claimed a session with a stream being opened")
	}
	s.leave()
	if !s.retire() {
		t.Fatal("the drain could not claim a session with no stream")
	}
	if s.enter() {
		t.Fatal("a retired session counted a new stream")
	}
	if s.retire() {
		t.Fatal("a session was retired twice")
	}
}
