package agents

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"

	"golang.ngrok.com/ngrok/config"
)

// TestClusterSpreads: where several replicas hold binds of one endpoint or tunnels of one
// group, the public traffic arriving through the balancer spreads over all of them, as on one
// server: a tunnel group with agents on two replicas, a pooled endpoint with binds on two
// replicas. Account B's labeled tunnel of the same labels, on the third replica, never gets A's
// edge's traffic. Every replica's API lists every replica's agents.
func TestClusterSpreads(t *testing.T) {
	c := startCluster(t)
	a, _, tokenA, tokenB := c.twoAccounts()
	r1, r2, r3 := c.replicas[0], c.replicas[1], c.replicas[2]
	answer := func(r *clusterReplica, token string, tun config.Tunnel, who string) {
		t.Helper()
		serveTunnel(t, r.bind(t, token, tun, who), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, who) }))
	}
	group := config.LabeledTunnel(config.WithLabel("app", "spread"))
	answer(r1, tokenA, group, "group "+r1.ip)
	answer(r2, tokenA, group, "group "+r2.ip)
	answer(r3, tokenB, group, "B's group "+r3.ip)
	a.reserveDomain("spread.example.com")
	backend := a.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"app": "spread"}})
	edge := a.mustCreate("/edges/https", map[string]any{"hostports": []string{"spread.example.com:443"}})
	a.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": backend}})
	c.waitServed("https://spread.example.com/", "group ")
	seen := c.hammer(100, "https://spread.example.com/", "group ", r1.ip, r2.ip)
	t.Logf("tunnel group: %v", seen)
	if seen[r1.ip] == 0 || seen[r2.ip] == 0 {
		t.Errorf("a tunnel group with agents on two replicas: %v of 100 requests to each, want some to both", seen)
	}

	pooled := config.HTTPEndpoint(config.WithDomain("pool.edgeplane.app"), config.WithPoolingEnabled(true))
	answer(r2, tokenA, pooled, "pool "+r2.ip)
	answer(r3, tokenA, pooled, "pool "+r3.ip)
	c.waitServed("https://pool.edgeplane.app/", "pool ")
	seen = c.hammer(100, "https://pool.edgeplane.app/", "pool ", r2.ip, r3.ip)
	t.Logf("pooled endpoint: %v", seen)
	if seen[r2.ip] == 0 || seen[r3.ip] == 0 {
		t.Errorf("a pooled endpoint with binds on two replicas: %v of 100 requests to each, want some to both", seen)
	}

	// Each replica's metrics show its links up, by the peers' advertised addresses, and the
	// connections and bytes it forwarded and carried for the others.
	var out, in, sent, received float64
	for _, r := range c.replicas {
		m := r.metrics()
		for _, o := range c.others(r) {
			peer := net.JoinHostPort(o.ip, strconv.Itoa(c.ports.peer))
			m.want(`edgeplane_peer_link_up{peer="`+peer+`"}`, 1)
			out += m.value(`edgeplane_peer_forwarded_total{direction="out",peer="` + peer + `",result="ok"}`)
			in += m.value(`edgeplane_peer_forwarded_total{direction="in",peer="` + peer + `",result="ok"}`)
			sent += m.value(`edgeplane_peer_bytes_total{direction="sent",peer="` + peer + `"}`)
			received += m.value(`edgeplane_peer_bytes_total{direction="received",peer="` + peer + `"}`)
		}
		if n := m.value(`edgeplane_remote_tunnels`); n < 2 {
			t.Errorf("replica %s routes to %v tunnels of other replicas, want at least 2", r.ip, n)
		}
	}
	if out == 0 || out != in || sent == 0 || sent != received {
		t.Errorf("the replicas forwarded %v connections (%v bytes) and carried %v (%v bytes) for each other, want the same, more than none",
			out, sent, in, received)
	}

	// Every replica's API lists A's four sessions and tunnels, wherever they are.
	for _, r := range c.replicas {
		var sl struct {
			Sessions []sessionDoc `json:"tunnel_sessions"`
		}
		var tl struct {
			Tunnels []tunnelDoc `json:"tunnels"`
		}
		if st := r.call("GET", "/tunnel_sessions", nil, &sl); st != 200 || len(sl.Sessions) != 4 {
			t.Errorf("replica %s lists %d of A's sessions (%d), want 4", r.ip, len(sl.Sessions), st)
		}
		if st := r.call("GET", "/tunnels", nil, &tl); st != 200 || len(tl.Tunnels) != 4 {
			t.Errorf("replica %s lists %d of A's tunnels (%d), want 4", r.ip, len(tl.Tunnels), st)
		}
	}
}
