package agents

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
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
	logs := newAgentLogs(t)
	c.logsOnFailure()
	for i := range 3 {
		name := fmt.Sprintf("roll%d.edgeplane.app", i)
		sess := a.mustConnect(token, logs.option(name))
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
	logs.report(t)
	c.reportMoves()
	for i, l := range loops {
		t.Logf("%s:", eps[i].url)
		l.stop(t)
	}
}

// TestClusterSuccessorRoutesAtOnce: a replica's successor serves public requests only once it
// routes to the other replicas' agents. Account A's agent is on the first replica and account
// B's on the third; the second, which never served either endpoint (so neither is expected back
// there), hands over, and the requests it gets as soon as its old process stops accepting each
// reach their own account's agent on the first try: neither ERR_NGROK_3200 because the
// successor's view of the others was still empty, nor a failed handshake for a name it did not
// know yet, nor the other account's agent.
func TestClusterSuccessorRoutesAtOnce(t *testing.T) {
	c := startCluster(t)
	_, tokenA := c.lb.credential()
	_, tokenB := c.lb.asAccount("team-b").credential()
	bind := func(r *clusterReplica, token, host string) {
		tun, err := r.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host)))
		if err != nil {
			t.Fatalf("bind %s on %s: %v", host, r.ip, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(hello))
	}
	const hostA, hostB = "succa.edgeplane.app", "succb.edgeplane.app"
	bind(c.replicas[0], tokenA, hostA)
	bind(c.replicas[2], tokenB, hostB)
	get := func(r *clusterReplica, host string) (int, string, error) {
		resp, err := r.httpsClient().Get("https://" + host + "/")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(body), nil
	}
	served := func(r *clusterReplica, host string) bool {
		st, body, err := get(r, host)
		return err == nil && st == 200 && strings.HasPrefix(body, "hello host="+host+" ")
	}
	// The first and third replicas route to each other's agents; the second is not asked.
	for _, r := range []*clusterReplica{c.replicas[0], c.replicas[2]} {
		for _, host := range []string{hostA, hostB} {
			eventually(t, 5*time.Second, "replica "+r.ip+" serves "+host, func() bool { return served(r, host) })
		}
	}

	r := c.replicas[1]
	before := len(drainRE.FindAllString(r.proc.Stderr.String(), -1))
	drainedBefore := len(drainedRE.FindAllString(r.proc.Stderr.String(), -1))
	if err := syscall.Kill(r.proc.Cmd.Process.Pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	var m []string
	waitLog(t, r.world, 30*time.Second, "the old process draining", func(out string) bool {
		all := drainRE.FindAllStringSubmatch(out, -1)
		if len(all) > before {
			m = all[before]
			return true
		}
		return false
	})
	pid, _ := strconv.Atoi(m[2])
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// From here on only the successor accepts on the second replica's sockets.
	for i := range 6 {
		host := []string{hostA, hostB}[i%2]
		st, body, err := get(r, host)
		if err != nil || st != 200 || !strings.HasPrefix(body, "hello host="+host+" ") {
			t.Errorf("request %d for %s to the successor: %d %q, %v", i, host, st, lastBytes(body, 200), err)
		}
	}
	waitLog(t, r.world, 40*time.Second, "the old process drained", func(out string) bool {
		return len(drainedRE.FindAllString(out, -1)) > drainedBefore
	})
}

// stepRE finds the replicas' log lines of an agent's arrival, with the time each step took
// where the replica logs it (the TLS handshake, the credential's read, the session's row, a
// bind's row).
var stepRE = regexp.MustCompile(`(?m)^time=\S*T(\S+)Z level=INFO msg="(agent session started|tunnel online|agent session closed)" session=(\S+)(.*)$`)

// stepAttrRE picks the step durations out of the rest of such a line.
var stepAttrRE = regexp.MustCompile(`\b(url|handshake|auth_wait|credential_read|row_write|since_accept)=(\S+)`)

// reportMoves logs, replica by replica, when each agent session ended, started and bound, with
// the times of its steps: what an agent's move between replicas is made of.
func (c *cluster) reportMoves() {
	for _, r := range c.replicas {
		var lines []string
		for _, m := range stepRE.FindAllStringSubmatch(r.proc.Stderr.String(), -1) {
			var attrs []string
			for _, a := range stepAttrRE.FindAllStringSubmatch(m[4], -1) {
				attrs = append(attrs, a[1]+"="+a[2])
			}
			lines = append(lines, fmt.Sprintf("%s %s %s %s", m[1], m[2], m[3], strings.Join(attrs, " ")))
		}
		c.t.Logf("replica %s, its agents' sessions:\n%s", r.ip, strings.Join(lines, "\n"))
	}
}
