package agents

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// TestClusterRollingRestart: three replicas behind HAProxy are restarted one after another with
// a handover (SIGUSR2), each once the endpoints are served everywhere again, while public
// requests for the endpoints of four agents (three ngrok-go sessions the balancer spreads over
// the replicas, and the Node SDK, whose reconnect backoff leaves no room for a failed first
// attempt) run in a loop through the balancer. Not one request fails, and no old process
// needs its whole drain timeout: the streams the other replicas keep open to its agents between
// requests would otherwise hold the agents on it, where its successor cannot reach them.
func TestClusterRollingRestart(t *testing.T) {
	c := startCluster(t)
	a := c.lb
	_, token := a.credential()
	type endpoint struct{ url, want string }
	var eps []endpoint
	for i := range 3 {
		name := fmt.Sprintf("roll%d.edgeplane.app", i)
		sess := a.mustConnect(token)
		tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name)))
		if err != nil {
			t.Fatal(err)
		}
		serveTunnel(t, tun, http.HandlerFunc(hello))
		eps = append(eps, endpoint{"https://" + name + "/", "hello host=" + name})
	}
	if events := a.runNodeSDK("forward", token, "node.edgeplane.app"); events[len(events)-1].Event != "ready" {
		t.Fatalf("node sdk.js: %+v", events)
	}
	eps = append(eps, endpoint{"https://node.edgeplane.app/", "node upstream"})
	for _, ep := range eps {
		c.waitServed(ep.url, ep.want)
	}
	var loops []*requestLoop
	for _, ep := range eps {
		loops = append(loops, startLoop(a.httpsClient(), ep.url, ep.want, 1))
	}
	waitRequests(t, 4, loops...)
	for _, r := range c.replicas {
		sent, draining := newRestarter(r.world).handover(t)
		start := time.Now()
		for _, ep := range eps {
			c.waitServed(ep.url, ep.want)
		}
		t.Logf("replica %s: drained %v after SIGUSR2; every endpoint served by every replica %v after that",
			r.ip, draining.Sub(sent).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		// The other replicas' connections kept open to the old process's agents must not hold
		// them there until the drain timeout: meanwhile the successor cannot reach them.
		if strings.Contains(r.proc.Stderr.String(), "the drain timeout ended") {
			t.Errorf("replica %s: the old process's drain ran into its timeout; stderr:\n%s", r.ip, lastBytes(r.proc.Stderr.String(), 4000))
		}
	}
	waitRequests(t, 4, loops...) // the loops go on against the new processes alone
	for i, l := range loops {
		t.Logf("%s:", eps[i].url)
		l.stop(t)
	}
}
