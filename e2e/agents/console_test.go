package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testproc"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// The web console and its traffic inspector against the real binary, with ngrok-go agents and
// public clients of every listener. The browser's view is in console_browser_test.go.

// consoleClient is a signed-in console session, as a browser holds one.
type consoleClient struct {
	t    *testing.T
	w    *world
	c    *http.Client
	csrf string
}

var csrfValue = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// console signs in to the console with an API key.
func (w *world) console(token string) *consoleClient {
	w.t.Helper()
	jar, _ := cookiejar.New(nil)
	cc := &consoleClient{t: w.t, w: w, c: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	page := cc.get("/console/signin")
	m := csrfValue.FindStringSubmatch(page)
	if m == nil {
		w.t.Fatalf("no sign-in form:\n%.1000s", page)
	}
	if st, _ := cc.post("/console/signin", url.Values{"csrf": {m[1]}, "token": {token}}); st != http.StatusSeeOther {
		w.t.Fatalf("sign-in: %d", st)
	}
	home := cc.get("/console/")
	if m = csrfValue.FindStringSubmatch(home); m == nil {
		w.t.Fatalf("not signed in:\n%.1000s", home)
	}
	cc.csrf = m[1]
	return cc
}

func (cc *consoleClient) get(path string) string {
	cc.t.Helper()
	resp, err := cc.c.Get(cc.w.api + path)
	if err != nil {
		cc.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// post sends a form as the console's page does, with its CSRF token; it returns the status and
// the body.
func (cc *consoleClient) post(path string, form url.Values) (int, string) {
	cc.t.Helper()
	if form.Get("csrf") == "" {
		form.Set("csrf", cc.csrf)
	}
	req, _ := http.NewRequest("POST", cc.w.api+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", cc.w.api)
	resp, err := cc.c.Do(req)
	if err != nil {
		cc.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// inspected is an entry as the console's data calls show it.
type inspected struct {
	ID             uint64      `json:"id"`
	Replica        string      `json:"replica"`
	Kind           string      `json:"kind"`
	Client         string      `json:"client"`
	Host           string      `json:"host"`
	Method         string      `json:"method"`
	Path           string      `json:"path"`
	Status         int         `json:"status"`
	BytesIn        int64       `json:"bytes_in"`
	BytesOut       int64       `json:"bytes_out"`
	Target         string      `json:"target"`
	Endpoint       string      `json:"endpoint"`
	Edge           string      `json:"edge"`
	Route          string      `json:"route"`
	Backend        string      `json:"backend"`
	ErrorCode      string      `json:"error_code"`
	Note           string      `json:"note"`
	URL            string      `json:"url"`
	RequestHeader  headerLines `json:"request_header"`
	ResponseHeader headerLines `json:"response_header"`
	RequestBody    []byte      `json:"request_body"`
	RequestBodyCut bool        `json:"request_body_cut"`
	ResponseBody   []byte      `json:"response_body"`
	Bodies         bool        `json:"bodies"`
	DurationMS     float64     `json:"duration_ms"`
}

// headerLines is a recorded header as the data calls show it: its lines.
type headerLines []struct{ Name, Value string }

// values returns the values of the header name.
func (h headerLines) values(name string) []string {
	var out []string
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			out = append(out, f.Value)
		}
	}
	return out
}

// traffic returns the account's newest entries and the replica that recorded them.
func (cc *consoleClient) traffic() ([]inspected, string) {
	cc.t.Helper()
	var out struct {
		Replica string      `json:"replica"`
		Entries []inspected `json:"entries"`
	}
	body := cc.get("/console/api/traffic")
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		cc.t.Fatalf("traffic: %v: %.500s", err, body)
	}
	return out.Entries, out.Replica
}

// detail returns an entry in full, and the raw JSON it came in.
func (cc *consoleClient) detail(e inspected) (inspected, string) {
	cc.t.Helper()
	raw := cc.get(strings.Replace(e.URL, "/console/traffic/", "/console/api/traffic/", 1))
	var out inspected
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		cc.t.Fatalf("detail: %v: %.500s", err, raw)
	}
	return out, raw
}

// waitFor waits until an entry matching match is listed, and returns it.
func (cc *consoleClient) waitFor(what string, match func(inspected) bool) inspected {
	cc.t.Helper()
	var found inspected
	eventually(cc.t, 2*time.Second, "the inspector lists "+what, func() bool {
		entries, _ := cc.traffic()
		for _, e := range entries {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// createKey makes an API key of another account with the binary, as an operator does.
func (w *world) createKey(account string) string {
	w.t.Helper()
	cmd := exec.Command(binPath, "apikey", "create", "--db", w.db, "--account", account)
	cmd.Env = testproc.CleanEnv(w.env...)
	out, err := cmd.Output()
	if err != nil {
		w.t.Fatalf("apikey create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// echoConns answers every connection of l with "echo:" and what it read up to its end.
func echoConns(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write([]byte("echo:" + string(b)))
			}()
		}
	}()
}

// pingConn writes "ping" on c, half-closes it, and returns what came back.
func pingConn(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, _ = c.Write([]byte("ping"))
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// countingHandler counts the requests of each path, and answers hello.
type countingHandler struct {
	mu      sync.Mutex
	seen    map[string]int
	headers map[string]http.Header // the last request's, by path
	// status, when set, chooses the answer's status (200 otherwise).
	status func(r *http.Request) int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.seen == nil {
		h.seen, h.headers = map[string]int{}, map[string]http.Header{}
	}
	h.seen[r.URL.Path]++
	h.headers[r.URL.Path] = r.Header.Clone()
	h.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Set-Cookie", "upstream-session=sekret-set-cookie")
	if h.status != nil {
		w.WriteHeader(h.status(r))
	}
	hello(w, r)
}

func (h *countingHandler) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[path]
}

// header returns the last request's headers of a path.
func (h *countingHandler) header(path string) http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.headers[path]
}

// TestConsoleRecordsEveryKindOfTraffic: requests over the HTTP and TLS listeners to endpoints
// and an HTTPS edge, TLS and TCP connections to endpoints and a TCP edge are each recorded once,
// for their account only, with what took them, their sizes and their error codes; captured
// secrets are never shown; bodies are kept only once the account asks.
func TestConsoleRecordsEveryKindOfTraffic(t *testing.T) {
	w := start(t, "--tcp-port-range", "24100-24199", "--tcp-addr-host", "127.0.0.1")
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
	tokenB := w.createKey("team-b")
	var credB struct{ Token string }
	w2 := *w
	w2.token = tokenB
	if st := w2.call("POST", "/credentials", map[string]any{}, &credB); st != 201 {
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
	send := func(c *http.Client, method, u string, body io.Reader, hdr map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(method, u, body)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	secrets := map[string]string{"Authorization": "Bearer sekret-authz", "Cookie": "sid=sekret-cookie",
		"X-Gitlab-Token": "sekret-gitlab", "X-Trace": "visible-trace"}
	eventually(t, 5*time.Second, "the https endpoint answers", func() bool {
		return send(https, "GET", "https://app-a.edgeplane.app/warm", nil, nil) == 200
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
		return send(https, "GET", "https://edge-a.example.com/edge-path", nil, nil) == 200
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
	b := w.console(tokenB)
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

func mustDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return c
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
		st, _, _ := get(t, w.httpsClient(), "https://replay.edgeplane.app/warm")
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
		st, _, _ := get(t, w.httpsClient(), "https://late.edgeplane.app/late")
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
