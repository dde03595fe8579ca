package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// The web console and its traffic inspector against the real binary, with ngrok-go agents and
// public clients of every listener. The browser's view is in console_browser_test.go.

// TestConsoleRecordsEveryKindOfTraffic: requests over the HTTP and TLS listeners to endpoints
// and an HTTPS edge, TLS and TCP connections to endpoints and a TCP edge are each recorded once,
// for their account only, with what took them, their sizes and their error codes; captured
// secrets are never shown; bodies are kept only once the account asks.
func TestConsoleRecordsEveryKindOfTraffic(t *testing.T) {
	w := start(t, "--tcp-port-range", "25000-25099", "--tcp-addr-host", "127.0.0.1")
	_, token := w.credential()
	w.reserveDomain("edge-a.example.com")
	sess := w.mustConnect(token)
	ctx := context.Background()
	app := &countingHandler{}
	listen := func(opts config.Tunnel) ngrok.Tunnel {
		t.Helper()
		tun, err := sess.Listen(ctx, opts)
		if err != nil {
			t.Fatalf("listen: %v\n%s", err, w.proc.Stderr)
		}
		return tun
	}
	serveTunnel(t, listen(config.HTTPEndpoint(config.WithDomain("app-a.edgeplane.app"))), app)
	serveTunnel(t, listen(config.HTTPEndpoint(config.WithDomain("plain-a.edgeplane.app"), config.WithScheme(config.SchemeHTTP))), app)
	serveTunnel(t, listen(config.HTTPEndpoint(config.WithDomain("auth-a.edgeplane.app"), config.WithBasicAuth("user", "sekret-password"))), app)
	tcp := listen(config.TCPEndpoint())
	echoConns(tcp)
	echoConns(listen(config.TLSEndpoint(config.WithDomain("tls-a.edgeplane.app"), config.WithTLSTermination())))
	serveTunnel(t, listen(config.LabeledTunnel(config.WithLabel("app", "edge-a"))), app)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"app": "edge-a"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"edge-a.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	var addr struct{ Addr string }
	if st := w.call("POST", "/reserved_addrs", map[string]any{}, &addr); st != 201 {
		t.Fatalf("reserve address: %d", st)
	}
	tcpEdge := w.mustCreate("/edges/tcp", map[string]any{"hostports": []string{addr.Addr}, "backend": map[string]any{"backend_id": group}})

	// Account B, with an endpoint of its own.
	accountB := w.asAccount("team-b")
	var credB struct{ Token string }
	if st := accountB.call("POST", "/credentials", map[string]any{}, &credB); st != 201 {
		t.Fatalf("B's credential: %d", st)
	}
	sessB := w.mustConnect(credB.Token)
	tunB, err := sessB.Listen(ctx, config.HTTPEndpoint(config.WithDomain("app-b.edgeplane.app")))
	if err != nil {
		t.Fatal(err)
	}
	serveTunnel(t, tunB, http.HandlerFunc(hello))

	// The traffic.
	https := w.httpsClient()
	// trySend answers status 0 on a transport error: a name whose edge was just created has no
	// certificate until the edge reaches the plan, so its first contact waits that out.
	trySend := func(c *http.Client, method, u string, body io.Reader, hdr map[string]string) (int, error) {
		req, _ := http.NewRequest(method, u, body)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	send := func(c *http.Client, method, u string, body io.Reader, hdr map[string]string) int {
		t.Helper()
		st, err := trySend(c, method, u, body, hdr)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		return st
	}
	secrets := map[string]string{"Authorization": "Bearer sekret-authz", "Cookie": "sid=sekret-cookie",
		"X-Gitlab-Token": "sekret-gitlab", "X-Trace": "visible-trace"}
	eventually(t, 5*time.Second, "the https endpoint answers", func() bool {
		st, _ := trySend(https, "GET", "https://app-a.edgeplane.app/warm", nil, nil)
		return st == 200
	})
	if st := send(https, "GET", "https://app-a.edgeplane.app/hello?x=1", nil, secrets); st != 200 {
		t.Fatalf("https endpoint: %d", st)
	}
	big := strings.Repeat("b", 20<<10)
	if st := send(w.httpClient(), "POST", "http://plain-a.edgeplane.app/submit", strings.NewReader(big), nil); st != 200 {
		t.Fatalf("http endpoint: %d", st)
	}
	badAuth := map[string]string{"Authorization": "Basic " + "dXNlcjpzZWtyZXQtd3Jvbmc="} // user:sekret-wrong
	if st := send(https, "GET", "https://auth-a.edgeplane.app/private", nil, badAuth); st != 401 {
		t.Fatalf("basic auth endpoint with a wrong password: %d", st)
	}
	eventually(t, 2*time.Second, "the HTTPS edge answers", func() bool {
		st, _ := trySend(https, "GET", "https://edge-a.example.com/edge-path", nil, nil)
		return st == 200
	})
	if got := pingConn(t, mustDial(t, strings.TrimPrefix(tcp.URL(), "tcp://"))); got != "echo:ping" {
		t.Fatalf("tcp endpoint: %q", got)
	}
	tc, err := tls.Dial("tcp", w.https, &tls.Config{RootCAs: w.ca, ServerName: "tls-a.edgeplane.app"})
	if err != nil {
		t.Fatalf("tls endpoint: %v", err)
	}
	if got := pingConn(t, tc); got != "echo:ping" {
		t.Fatalf("tls endpoint: %q", got)
	}
	_, port, _ := net.SplitHostPort(addr.Addr)
	eventually(t, 2*time.Second, "the TCP edge answers", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			return false
		}
		fmt.Fprintf(c, "GET /over-tcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		return strings.Contains(pingConn(t, c), "hello")
	})
	if st := send(https, "GET", "https://app-b.edgeplane.app/b-only", nil, nil); st != 200 {
		t.Fatalf("B's endpoint: %d", st)
	}

	// What account A's console shows.
	a := w.console(w.token)
	helloHit := a.waitFor("the https request", func(e inspected) bool { return e.Path == "/hello?x=1" })
	_, replicaName := a.traffic()
	if !strings.HasPrefix(replicaName, "rep_") || helloHit.Replica != replicaName {
		t.Errorf("replica %q, entry's %q", replicaName, helloHit.Replica)
	}
	if helloHit.Kind != "https" || helloHit.Method != "GET" || helloHit.Status != 200 || helloHit.Host != "app-a.edgeplane.app" ||
		!strings.HasPrefix(helloHit.Client, "127.0.0.1:") || helloHit.Target != "https://app-a.edgeplane.app" || helloHit.BytesOut == 0 || helloHit.DurationMS <= 0 {
		t.Errorf("https endpoint entry: %+v", helloHit)
	}
	full, raw := a.detail(helloHit)
	for _, name := range []string{"Authorization", "Cookie", "X-Gitlab-Token"} {
		if v := full.RequestHeader.values(name); len(v) != 1 || v[0] != "[redacted by edgeplane]" {
			t.Errorf("request header %s: %q, want it redacted", name, v)
		}
	}
	if v := full.ResponseHeader.values("Set-Cookie"); len(v) != 1 || v[0] != "[redacted by edgeplane]" {
		t.Errorf("response Set-Cookie: %q, want it redacted", v)
	}
	if v := full.RequestHeader.values("X-Trace"); len(v) != 1 || v[0] != "visible-trace" || full.Bodies || full.ResponseBody != nil {
		t.Errorf("https entry in full: %s", raw)
	}
	page := a.get(helloHit.URL)
	for _, where := range []string{raw, page} {
		if strings.Contains(where, "sekret") || !strings.Contains(where, "visible-trace") {
			t.Fatalf("a captured secret is shown, or the entry is not:\n%.3000s", where)
		}
	}
	if app.header("/hello").Get("Authorization") != "Bearer sekret-authz" {
		t.Errorf("the agent did not get the client's Authorization header: recording must not change the request")
	}
	auth := a.waitFor("the refused basic auth", func(e inspected) bool { return e.Path == "/private" })
	if auth.Status != 401 || auth.ErrorCode != "ERR_NGROK_3401" {
		t.Errorf("basic auth entry: %+v", auth)
	}
	if _, raw := a.detail(auth); strings.Contains(raw, "c2VrcmV0") || strings.Contains(raw, "dXNlcjpzZWtyZXQtd3Jvbmc") {
		t.Errorf("the basic auth password is shown: %s", raw)
	}
	post := a.waitFor("the http POST", func(e inspected) bool { return e.Path == "/submit" })
	if post.Kind != "http" || post.Method != "POST" || post.BytesIn != int64(len(big)) || post.Target != "http://plain-a.edgeplane.app" {
		t.Errorf("http endpoint entry: %+v", post)
	}
	if full, _ := a.detail(post); full.RequestBody != nil || full.Bodies {
		t.Errorf("a body was kept without the account asking")
	}
	edgeHit, _ := a.detail(a.waitFor("the edge request", func(e inspected) bool { return e.Path == "/edge-path" }))
	if edgeHit.Edge != edge || edgeHit.Route != route || edgeHit.Backend != group || edgeHit.Status != 200 || edgeHit.Kind != "https" {
		t.Errorf("edge entry: %+v (edge %s route %s backend %s)", edgeHit, edge, route, group)
	}
	tcpHit := a.waitFor("the tcp connection", func(e inspected) bool { return e.Kind == "tcp" && e.Target == tcp.URL() })
	if tcpHit.BytesIn != 4 || tcpHit.BytesOut != 9 || tcpHit.Target != tcp.URL() || tcpHit.Host != strings.TrimPrefix(tcp.URL(), "tcp://") {
		t.Errorf("tcp endpoint entry: %+v (url %s)", tcpHit, tcp.URL())
	}
	tlsHit := a.waitFor("the tls connection", func(e inspected) bool { return e.Kind == "tls" })
	if tlsHit.Host != "tls-a.edgeplane.app" || tlsHit.Target != "tls://tls-a.edgeplane.app" || tlsHit.BytesIn == 0 || tlsHit.BytesOut == 0 {
		t.Errorf("tls endpoint entry: %+v", tlsHit)
	}
	tcpEdgeHit, _ := a.detail(a.waitFor("the TCP edge connection", func(e inspected) bool { return e.Kind == "tcp" && e.Target == tcpEdge && e.BytesOut > 0 }))
	if tcpEdgeHit.Edge != tcpEdge || tcpEdgeHit.Backend != group || tcpEdgeHit.Host != addr.Addr {
		t.Errorf("tcp edge entry: %+v", tcpEdgeHit)
	}
	entries, _ := a.traffic()
	for _, e := range entries {
		if strings.Contains(e.Host, "app-b") || e.Path == "/b-only" {
			t.Errorf("account A's inspector shows B's traffic: %+v", e)
		}
	}

	// Bodies, once A asks: the first 16 KiB, the rest cut.
	if st, _ := a.post("/console/traffic/bodies", url.Values{"on": {"true"}}); st != http.StatusSeeOther {
		t.Fatalf("keep bodies: %d", st)
	}
	if st := send(w.httpClient(), "POST", "http://plain-a.edgeplane.app/with-body", strings.NewReader(big), nil); st != 200 {
		t.Fatalf("http endpoint: %d", st)
	}
	kept, _ := a.detail(a.waitFor("the POST with its body", func(e inspected) bool { return e.Path == "/with-body" }))
	if !kept.Bodies || len(kept.RequestBody) != 16<<10 || !kept.RequestBodyCut || !strings.HasPrefix(string(kept.ResponseBody), "hello host=plain-a") {
		t.Errorf("kept bodies: bodies %v, request %d bytes cut %v, response %q", kept.Bodies, len(kept.RequestBody), kept.RequestBodyCut, kept.ResponseBody)
	}

	// What account B's console shows: its own request, nothing of A's.
	b := w.console(accountB.token)
	b.waitFor("B's own request", func(e inspected) bool { return e.Path == "/b-only" })
	entriesB, _ := b.traffic()
	for _, e := range entriesB {
		if e.Host != "app-b.edgeplane.app" {
			t.Errorf("account B's inspector shows %+v", e)
		}
	}
	if body := b.get(helloHit.URL); !strings.Contains(body, "404") || strings.Contains(body, "/hello") {
		t.Errorf("B's console shows A's entry:\n%.1000s", body)
	}
}

// TestConsoleReplay: a recorded request replayed as recorded and edited reaches the agent again
// through the same endpoint, and the replay's answer is shown beside the original's.
func TestConsoleReplay(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	app := &countingHandler{}
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("replay.edgeplane.app")))
	if err != nil {
		t.Fatal(err)
	}
	serveTunnel(t, tun, app)
	eventually(t, 5*time.Second, "the endpoint answers", func() bool {
		st, _, _ := tryGet(w.httpsClient(), "https://replay.edgeplane.app/warm")
		return st == 200
	})
	req, _ := http.NewRequest("GET", "https://replay.edgeplane.app/again?n=1", nil)
	req.Header.Set("X-Original", "yes")
	req.Header.Set("Authorization", "Bearer sekret-not-replayed")
	resp, err := w.httpsClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cc := w.console(w.token)
	e := cc.waitFor("the request", func(e inspected) bool { return e.Path == "/again?n=1" })
	st, page := cc.post(e.URL+"/replay", url.Values{"mode": {"recorded"}})
	if st != 200 || !strings.Contains(page, `id="new-status">200<`) || !strings.Contains(page, `id="old-status">200<`) {
		t.Fatalf("replay as recorded: %d\n%.3000s", st, page)
	}
	if n := app.count("/again"); n != 2 {
		t.Fatalf("the agent saw /again %d times, want 2", n)
	}
	if h := app.header("/again"); h.Get("X-Original") != "yes" || h.Get("Authorization") != "" {
		t.Errorf("the replay as recorded sent X-Original %q and Authorization %q; redacted headers are not sent",
			h.Get("X-Original"), h.Get("Authorization"))
	}
	st, page = cc.post(e.URL+"/replay", url.Values{"mode": {"edited"}, "method": {"POST"}, "path": {"/edited?x=2"},
		"headers": {"X-Edited: yes\nContent-Type: text/plain"}, "body": {"edited body"}})
	if st != 200 || !strings.Contains(page, `id="new-status">200<`) {
		t.Fatalf("edited replay: %d\n%.3000s", st, page)
	}
	if h := app.header("/edited"); app.count("/edited") != 1 || h.Get("X-Edited") != "yes" {
		t.Errorf("the edited replay did not reach the agent as edited: %v", h)
	}
	// Both replays are public requests of their own, recorded like any other.
	cc.waitFor("the edited replay", func(e inspected) bool { return e.Path == "/edited?x=2" && e.Method == "POST" && e.BytesIn == 11 })
	n := 0
	entries, _ := cc.traffic()
	for _, x := range entries {
		if x.Path == "/again?n=1" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("/again?n=1 is listed %d times, want the original and its replay", n)
	}
}

// TestConsoleLiveViewOutlivesTheServerTimeouts: the live view is one long response on the API's
// listener, whose read and write timeouts end ordinary requests; it sets its own deadlines, so
// an entry recorded after those timeouts have passed still reaches it.
func TestConsoleLiveViewOutlivesTheServerTimeouts(t *testing.T) {
	w := start(t, "--read-timeout", "1s", "--write-timeout", "1s")
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("late.edgeplane.app")))
	if err != nil {
		t.Fatal(err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	cc := w.console(w.token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", w.api+"/console/api/traffic/stream?path=/late", nil)
	streamer := &http.Client{Jar: cc.c.Jar} // no client timeout: the stream is meant to last
	resp, err := streamer.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("live view: %v %v", err, resp)
	}
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- line
			}
		}
	}()
	if first := <-events; !strings.Contains(first, "replica") {
		t.Fatalf("the live view's first event: %q", first)
	}
	// Time passes beyond both server timeouts (nothing to wait on: the point is that time passes).
	time.Sleep(2500 * time.Millisecond)
	eventually(t, 5*time.Second, "the endpoint answers", func() bool {
		st, _, _ := tryGet(w.httpsClient(), "https://late.edgeplane.app/late")
		return st == 200
	})
	deadline := time.After(eventuallyFloor)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the live view ended before the entry arrived: a server timeout cut it")
			}
			if strings.Contains(e, `"path":"/late"`) {
				return
			}
		case <-deadline:
			t.Fatal("the entry never reached the live view")
		}
	}
}

// TestConsoleCommandsReachTheAgent: the agents page's Restart and Stop buttons send the API's
// commands, which reach the agents (one session for each, told apart by their metadata).
func TestConsoleCommandsReachTheAgent(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	restarted, stopped := make(chan struct{}, 1), make(chan struct{}, 1)
	w.mustConnect(token, ngrok.WithMetadata("restart-me"),
		ngrok.WithRestartHandler(func(context.Context, ngrok.Session) error { restarted <- struct{}{}; return nil }))
	w.mustConnect(token, ngrok.WithMetadata("stop-me"),
		ngrok.WithStopHandler(func(context.Context, ngrok.Session) error { stopped <- struct{}{}; return nil }))
	var sessions struct {
		TunnelSessions []struct{ ID, Metadata string } `json:"tunnel_sessions"`
	}
	eventually(t, 2*time.Second, "both sessions are listed", func() bool {
		w.call("GET", "/tunnel_sessions", nil, &sessions)
		return len(sessions.TunnelSessions) == 2
	})
	cc := w.console(w.token)
	page := cc.get("/console/agents")
	for _, s := range sessions.TunnelSessions {
		command, done := "restart", restarted
		if s.Metadata == "stop-me" {
			command, done = "stop", stopped
		}
		if !strings.Contains(page, "/console/agents/"+s.ID+"/"+command) {
			t.Fatalf("the agents page does not offer %s for %s:\n%.2000s", command, s.ID, page)
		}
		if st, body := cc.post("/console/agents/"+s.ID+"/"+command, url.Values{}); st != http.StatusSeeOther {
			t.Fatalf("%s: %d\n%.1000s", command, st, body)
		}
		select {
		case <-done:
		case <-time.After(eventuallyFloor):
			t.Fatalf("the agent never got the %s command", command)
		}
	}
}
