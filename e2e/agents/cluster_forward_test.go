package agents

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// TestClusterForwardInternalTCP: forward-internal in on_tcp_connect reaches an internal tcp
// endpoint whose agent is on another replica. A's internal tcp endpoint is on the first
// replica, B's of the same name on the third, and each account's public tcp endpoint (on the
// second) forwards to db.internal: a connection to that public port on any replica reaches the
// account's own internal endpoint, with the client's address. B's policy naming an internal
// endpoint only A has finds nothing on any replica, and the connection is closed.
func TestClusterForwardInternalTCP(t *testing.T) {
	c := startCluster(t)
	_, _, tokenA, tokenB := c.twoAccounts()
	r1, r2, r3 := c.replicas[0], c.replicas[1], c.replicas[2]
	bind := func(r *clusterReplica, token string, tun config.Tunnel, tag string) string {
		t.Helper()
		l := r.bind(t, token, tun, tag)
		serveTag(t, l, tag, nil)
		return l.URL()
	}
	db := "tcp://db.internal:" + internalTCPPort
	bind(r1, tokenA, config.TCPEndpoint(config.WithURL(db)), "internal-a")
	bind(r1, tokenA, config.TCPEndpoint(config.WithURL("tcp://only-a.internal:"+internalTCPPort)), "only-a")
	bind(r3, tokenB, config.TCPEndpoint(config.WithURL(db)), "internal-b")
	fwd := func(url string) config.Tunnel {
		return config.TCPEndpoint(config.WithTrafficPolicy(`{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"` + url + `"}}]}]}`))
	}
	port := func(url string) string { _, p, _ := net.SplitHostPort(strings.TrimPrefix(url, "tcp://")); return p }
	pubA := port(bind(r2, tokenA, fwd(db), "public-a"))
	pubB := port(bind(r2, tokenB, fwd(db), "public-b"))
	stealB := port(bind(r2, tokenB, fwd("tcp://only-a.internal:"+internalTCPPort), "public-b"))

	talk := func(addr string) (got, client string) {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "dial: " + err.Error(), ""
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte("hello"))
		b, _ := io.ReadAll(conn)
		return string(b), conn.LocalAddr().String()
	}
	for _, r := range c.replicas {
		for _, x := range []struct{ port, tag string }{{pubA, "internal-a"}, {pubB, "internal-b"}} {
			addr := net.JoinHostPort(r.ip, x.port)
			eventually(t, 3*time.Second, addr+" reaches "+x.tag, func() bool {
				got, client := talk(addr)
				return got == x.tag+" "+client+" hello"
			})
		}
		// The replica listens on B's port once its directory has the bind; then the connection
		// is closed unanswered.
		var got string
		eventually(t, 3*time.Second, "replica "+r.ip+" listens on B's port", func() bool {
			got, _ = talk(net.JoinHostPort(r.ip, stealB))
			return !strings.HasPrefix(got, "dial: ")
		})
		if got != "" {
			t.Errorf("B's forward to A's internal endpoint, through %s: %q, want the connection closed", r.ip, got)
		}
	}
}

// TestClusterForwardInternalOnTCPConnect: forward-internal in an http endpoint's
// on_tcp_connect reaches an internal http endpoint whose agent is on another replica. A's
// http://web.internal is on the first replica, B's of the same name on the third; each
// account's public http endpoint (on the second) forwards its connections there: a request
// through any replica's HTTP listener is served by the account's own internal endpoint, never
// the other's.
func TestClusterForwardInternalOnTCPConnect(t *testing.T) {
	c := startCluster(t)
	b := c.lb.asAccount("team-b")
	// asB is a replica's world with B's API key: its binds are B's, on that replica.
	asB := func(r *clusterReplica) *world {
		w := *r.world
		w.token = b.token
		return &w
	}
	r1, r2, r3 := c.replicas[0], c.replicas[1], c.replicas[2]
	internalBindAs(t, r1.world, config.SchemeHTTP, "web.internal", "internal-a")
	internalBindAs(t, asB(r3), config.SchemeHTTP, "web.internal", "internal-b")
	for name, w := range map[string]*world{"tcc-a.edgeplane.app": r2.world, "tcc-b.edgeplane.app": asB(r2)} {
		if err := publicForwardAs(t, w, config.SchemeHTTP, name, connectForward("http://web.internal", "")); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
	}
	for _, r := range c.replicas {
		hc := r.httpClient()
		for host, want := range map[string]string{"tcc-a.edgeplane.app": "who=internal-a user= body=", "tcc-b.edgeplane.app": "who=internal-b user= body="} {
			eventually(t, 3*time.Second, r.ip+": "+host+" reaches "+want, func() bool {
				resp, body, err := try(hc, "GET", "http://"+host+"/teapot", nil)
				return err == nil && resp.StatusCode == 200 && string(body) == want && resp.Header.Get("x-public") == ""
			})
		}
	}
}
