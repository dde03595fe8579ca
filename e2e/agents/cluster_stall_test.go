package agents

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// publicTimeout is the longest a public client waits for edgeplane's first answer: the header
// and ClientHello timeouts of the public listeners.
const publicTimeout = 10 * time.Second

// TestClusterStalledPeer: a replica that stops answering (SIGSTOP: its sockets stay open, its
// link goes silent) cannot hold the public connections of another replica past the public
// timeouts: a request for its agent's endpoint gets an error page, a new TCP connection to its
// agent's tcp endpoint is closed, and one that was open is closed too, once the link's heartbeat
// gives up. When it runs again its agents are routed to again.
func TestClusterStalledPeer(t *testing.T) {
	c := startCluster(t)
	_, token := c.lb.credential()
	stalled, via := c.replicas[0], c.replicas[1]
	sess := stalled.mustConnect(token)
	if err := listenAnswer(t, sess, "stall.edgeplane.app", "stall", config.WithScheme(config.SchemeHTTP)); err != nil {
		t.Fatal(err)
	}
	tcp, err := sess.Listen(context.Background(), config.TCPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	answerLines(t, tcp, "tcp", nil)
	u, _ := url.Parse(tcp.URL())
	_, port, _ := net.SplitHostPort(u.Host)
	tcpVia := net.JoinHostPort(via.ip, port)
	c.waitServed("http://stall.edgeplane.app/", "stall")
	eventually(t, time.Second, "replica "+via.ip+" carries the tcp endpoint", func() bool {
		got, err := lineOver(tcpVia, nil, "x\n")
		return err == nil && got == "tcp x\n"
	})
	// A TCP connection carried over the link before the stall, idle after its first exchange.
	open, err := net.Dial("tcp", tcpVia)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	fmt.Fprint(open, "before\n")
	br := bufio.NewReader(open)
	if line, err := br.ReadString('\n'); err != nil || line != "tcp before\n" {
		t.Fatalf("the open connection's first exchange: %q %v", line, err)
	}

	if err := stalled.proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the replica stopped", func() bool { return procState(stalled.proc.Cmd.Process.Pid) == "T" })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stalled replica %s:\n%s\nreplica %s:\n%s", stalled.ip, lastBytes(stalled.proc.Stderr.String(), 6000),
				via.ip, lastBytes(via.proc.Stderr.String(), 6000))
		}
	})
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = stalled.proc.Cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	stalledAt := time.Now()

	st, code, took := errorPage(t, via.httpClient(), "http://stall.edgeplane.app/")
	t.Logf("a request for the stalled replica's agent: %d %s after %v", st, code, took.Round(time.Millisecond))
	if code == "" || took > publicTimeout {
		t.Errorf("a request for the stalled replica's agent: %d %q after %v, want an error page within %v", st, code, took, publicTimeout)
	}
	start := time.Now()
	got, err := lineOver(tcpVia, nil, "during\n")
	t.Logf("a new tcp connection to the stalled replica's agent: %q %v after %v", got, err, time.Since(start).Round(time.Millisecond))
	if got != "" || time.Since(start) > publicTimeout {
		t.Errorf("a new tcp connection to the stalled replica's agent answered %q (%v) after %v, want it closed within %v", got, err, time.Since(start), publicTimeout)
	}
	_ = open.SetReadDeadline(stalledAt.Add(publicTimeout))
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("the tcp connection open over the link when its peer stalled: %v after %v, want it closed within %v", err, time.Since(stalledAt), publicTimeout)
	}
	t.Logf("the tcp connection open over the link was closed %v after the stall", time.Since(stalledAt).Round(time.Millisecond))

	if err := stalled.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	eventually(t, 5*time.Second, "the agent of the stalled replica served again through another", func() bool {
		resp, err := via.httpClient().Get("http://stall.edgeplane.app/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == "stall"
	})
}

// procState is the state letter of process pid in /proc/<pid>/stat ("T" when stopped).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}
