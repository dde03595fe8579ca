package agents

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// The loss of a replica: killed (SIGKILL) or stalled (SIGSTOP), with public connections and
// agents on it and on the others.

// errorPage makes a request for url on client and returns its status, its ngrok error code and
// how long the answer took; an error instead of an answer fails the test.
func errorPage(t *testing.T, client *http.Client, url string) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := client.Get(url)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("GET %s: %v after %v, want an error page", url, err, took)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("ngrok-error-code"), took
}

// configured lists the account's configuration through w: reserved domains, edges,
// credentials, as JSON, for before-and-after comparison.
func configured(t *testing.T, w *world) string {
	t.Helper()
	var out []string
	for _, path := range []string{"/reserved_domains", "/edges/https", "/credentials", "/backends/tunnel_group"} {
		var doc map[string]any
		if st := w.call("GET", path, nil, &doc); st != 200 {
			t.Fatalf("GET %s: %d", path, st)
		}
		for k, v := range doc {
			if list, ok := v.([]any); ok {
				b, _ := json.Marshal(list)
				out = append(out, k+"="+string(b))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestClusterKillReplica: SIGKILL of the replica holding an agent that connects through the
// balancer. The agent reconnects through the balancer to a survivor and its traffic flows again
// (the time it takes is reported); an agent pinned to the dead replica (it cannot reconnect) has
// its requests answered with an error page within a second, through any replica, and its rows
// stop routing within 5 s (the survivors answer 404 ERR_NGROK_3200); a request in flight over
// the link when the holder dies gets 502 ERR_NGROK_8012, and a response being streamed ends
// with the client's connection instead of hanging; agents on the other replicas never notice
// (no reconnect, and their traffic through the balancer all served); nothing configured is lost;
// account B's agent and edge are untouched.
func TestClusterKillReplica(t *testing.T) {
	c := startCluster(t)
	a, b, tokenA, tokenB := c.twoAccounts()
	ctx := context.Background()

	var moverConnects atomic.Int32
	mover := a.mustConnect(tokenA, ngrok.WithConnectHandler(func(context.Context, ngrok.Session) { moverConnects.Add(1) }))
	if err := listenAnswer(t, mover, "mover.edgeplane.app", "mover"); err != nil {
		t.Fatal(err)
	}
	dead := c.holder("mover.edgeplane.app")
	if dead == nil {
		t.Fatal("no replica holds the mover's tunnel")
	}
	survivors := c.others(dead)

	// An agent pinned to the replica that will die, with a plain endpoint, one that hangs
	// before answering, and one that streams forever.
	pinned := dead.mustConnect(tokenA)
	if err := listenAnswer(t, pinned, "pinned.edgeplane.app", "pinned", config.WithScheme(config.SchemeHTTP)); err != nil {
		t.Fatal(err)
	}
	if err := listenAnswer(t, pinned, "pinned-s.edgeplane.app", "pinned"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang, err := pinned.Listen(ctx, config.HTTPEndpoint(config.WithDomain("hang.edgeplane.app")))
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{}, 1)
	serveTunnel(t, hang, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}))
	stream, err := pinned.Listen(ctx, config.HTTPEndpoint(config.WithDomain("stream.edgeplane.app")))
	if err != nil {
		t.Fatal(err)
	}
	serveTunnel(t, stream, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "first chunk\n")
		w.(http.Flusher).Flush()
		<-release
	}))

	// Agents of A and B on the survivors, which must not notice.
	var steadyDisconnects atomic.Int32
	steady := func(r *clusterReplica, token, name string) {
		s := r.mustConnect(token, ngrok.WithDisconnectHandler(func(context.Context, ngrok.Session, error) { steadyDisconnects.Add(1) }))
		if err := listenAnswer(t, s, name, name); err != nil {
			t.Fatal(err)
		}
	}
	steady(survivors[0], tokenA, "steady-a.edgeplane.app")
	steady(survivors[1], tokenB, "steady-b.edgeplane.app")
	b.reserveDomain("b-shop.example.com")
	a.reserveDomain("a-shop.example.com")
	before := configured(t, a)
	for _, u := range []string{"https://mover.edgeplane.app/", "http://pinned.edgeplane.app/", "https://pinned-s.edgeplane.app/",
		"https://steady-a.edgeplane.app/", "https://steady-b.edgeplane.app/"} {
		c.waitServed(u, strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")[:5])
	}

	// A request waiting for the hanging agent and one reading the stream, both through a
	// survivor, so that they cross the link to the replica about to die.
	via := survivors[0]
	hangDone := make(chan *http.Response, 1)
	go func() {
		resp, err := via.httpsClient().Get("https://hang.edgeplane.app/")
		if err != nil {
			hangDone <- nil
			return
		}
		hangDone <- resp
	}()
	streamResp, err := via.httpsClient().Get("https://stream.edgeplane.app/")
	if err != nil {
		t.Fatal(err)
	}
	defer streamResp.Body.Close()
	br := bufio.NewReader(streamResp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first chunk\n" {
		t.Fatalf("the stream's first chunk: %q %v", line, err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the request for the hanging endpoint did not reach its agent")
	}

	connectsBefore := moverConnects.Load()
	killed := time.Now()
	_ = dead.proc.Cmd.Process.Kill()
	<-dead.proc.Done
	// From the kill on, the mover is asked for through the balancer until it answers again.
	lb := c.lbClient(true)
	resumedAt := make(chan time.Duration, 1)
	go func() {
		for time.Since(killed) < 30*time.Second {
			if resp, err := lb.Get("https://mover.edgeplane.app/"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && string(body) == "mover" {
					resumedAt <- time.Since(killed)
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(resumedAt)
	}()

	// The stream ends with its connection; the waiting request gets an error page.
	streamEnded := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, br); streamEnded <- err }()
	select {
	case err := <-streamEnded:
		t.Logf("the stream crossing the link ended %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
		if err == nil {
			t.Errorf("a response streamed over a link that broke ended cleanly, as if it were whole")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a response streamed over a link that broke still open 10 s after the holder died")
	}
	select {
	case resp := <-hangDone:
		if resp == nil || resp.StatusCode != 502 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_8012" {
			t.Errorf("a request waiting over a link that broke: %+v, want 502 ERR_NGROK_8012", resp)
		}
		if resp != nil {
			resp.Body.Close()
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a request waiting over a link that broke unanswered 10 s after the holder died")
	}

	// The pinned agent's endpoint: an error page within a second, from any replica, and from 5
	// s on, the survivors no longer route to the dead replica's rows.
	for plain, tls := c.lbClient(false), c.lbClient(true); time.Since(killed) < 5*time.Second; {
		for _, u := range []string{"http://pinned.edgeplane.app/", "https://pinned-s.edgeplane.app/"} {
			client := plain
			if strings.HasPrefix(u, "https") {
				client = tls
			}
			st, code, took := errorPage(t, client, u)
			if code == "" || took > time.Second {
				t.Fatalf("a request for the dead replica's tunnel %s %v after the kill: %d %q in %v, want an error page within a second",
					u, time.Since(killed).Round(time.Millisecond), st, code, took)
			}
		}
	}
	for _, r := range survivors {
		if st, code, took := errorPage(t, r.httpClient(), "http://pinned.edgeplane.app/"); st != 404 || code != "ERR_NGROK_3200" {
			t.Errorf("replica %s 5 s after the kill: %d %s in %v, want 404 ERR_NGROK_3200 (the dead replica's rows not routed)", r.ip, st, code, took)
		}
		if st, code, took := errorPage(t, r.httpsClient(), "https://pinned-s.edgeplane.app/"); st != 404 || code != "ERR_NGROK_3200" {
			t.Errorf("replica %s 5 s after the kill, over HTTPS: %d %s in %v, want 404 ERR_NGROK_3200", r.ip, st, code, took)
		}
	}

	// The mover's traffic flows again through the balancer.
	resumed, ok := <-resumedAt
	if !ok {
		t.Fatalf("the agent of the killed replica did not serve again through the balancer within 30 s")
	}
	t.Logf("the agent of the killed replica serves again through the balancer %v after the kill (it reconnected %d time(s))",
		resumed.Round(time.Millisecond), moverConnects.Load()-connectsBefore)
	c.replicas = survivors
	c.hammer(100, "https://mover.edgeplane.app/", "mover")
	c.hammer(100, "https://steady-a.edgeplane.app/", "steady-a")
	c.hammer(100, "https://steady-b.edgeplane.app/", "steady-b")
	if n := steadyDisconnects.Load(); n != 0 {
		t.Errorf("agents on the surviving replicas were disconnected %d times", n)
	}
	if after := configured(t, a); after != before {
		t.Errorf("the configuration changed with the replica's death:\nbefore %s\nafter  %s", before, after)
	}
	for _, r := range survivors {
		var sl struct {
			Sessions []sessionDoc `json:"tunnel_sessions"`
		}
		r.call("GET", "/tunnel_sessions", nil, &sl)
		if len(sl.Sessions) < 2 { // the mover's and steady-a's, wherever they are
			t.Errorf("replica %s lists %d of A's sessions after the kill, want the mover's and steady-a's", r.ip, len(sl.Sessions))
		}
	}
}
