package agents

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"github.com/edgeplane/edgeplane/internal/testproc"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// Isolation between accounts on the data plane: a name is held by one account at a time, and
// only its holder's agents and edges serve it, in every order of events.

// asAccount returns the world as seen by another account of the same server (made with
// `edgeplane apikey create --account name`): the same listeners, its own API key.
func (w *world) asAccount(name string) *world {
	w.t.Helper()
	cmd := exec.Command(binPath, "apikey", "create", "--db", w.db, "--account", name, "--create-account")
	cmd.Env = testproc.CleanEnv(w.env...)
	out, err := cmd.Output()
	if err != nil {
		w.t.Fatalf("apikey create --account %s: %v", name, err)
	}
	other := *w
	other.token = strings.TrimSpace(string(out))
	return &other
}

// apiError is the body of an API error.
type apiError struct {
	ErrorCode string `json:"error_code"`
	Msg       string `json:"msg"`
}

// listenAnswer binds an https endpoint for name on sess and answers every request with body.
func listenAnswer(t *testing.T, sess ngrok.Session, name, body string, opts ...config.HTTPEndpointOption) error {
	t.Helper()
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(append([]config.HTTPEndpointOption{config.WithDomain(name)}, opts...)...))
	if err != nil {
		return err
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	return nil
}

// wantRefused expects the API's refusal with status and code whose message names name and shows
// none of the ids in hidden.
func wantRefused(t *testing.T, what string, st int, e apiError, status int, code, name string, hidden ...string) {
	t.Helper()
	if st != status || e.ErrorCode != code {
		t.Fatalf("%s: %d %s %q, want %d %s", what, st, e.ErrorCode, e.Msg, status, code)
	}
	if !strings.Contains(e.Msg, name) {
		t.Errorf("%s: the message does not name %s: %q", what, name, e.Msg)
	}
	for _, id := range hidden {
		if id != "" && strings.Contains(e.Msg, id) {
			t.Errorf("%s: the message shows the other account's id %s: %q", what, id, e.Msg)
		}
	}
}

// onlineIDs returns the ids of the account's online sessions and tunnels and their credentials.
func (w *world) onlineIDs() []string {
	w.t.Helper()
	var sl struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
	}
	var tl struct {
		Tunnels []struct {
			ID string `json:"id"`
		} `json:"tunnels"`
	}
	w.call("GET", "/tunnel_sessions", nil, &sl)
	w.call("GET", "/tunnels", nil, &tl)
	var ids []string
	for _, s := range sl.Sessions {
		ids = append(ids, s.ID)
	}
	for _, tn := range tl.Tunnels {
		ids = append(ids, tn.ID)
	}
	if len(ids) < 2 {
		w.t.Fatalf("the account lists %d sessions and tunnels, want some of each", len(ids))
	}
	return ids
}

// TestLiveNameNotTakenOver: a name online for account A's agent (under the service domain, not
// reserved) cannot be taken by account B: B's reservation of it is refused (409
// ERR_NGROK_430, naming the name and none of A's ids), as is a wildcard reservation covering
// it; without the reservation B can put it on no edge, and B's agent cannot bind it, pooled or
// not. Every public request keeps reaching A. Once A's endpoint is offline the name is free: B
// reserves it, and A's next bind is refused (ERR_NGROK_319).
func TestLiveNameNotTakenOver(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	sessA := w.mustConnect(tokenA)
	const name = "svc-a.edgeplane.app"
	tunA, err := sessA.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name)))
	if err != nil {
		t.Fatalf("A's bind: %v", err)
	}
	serveTunnel(t, tunA, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "A") }))
	if err := listenAnswer(t, sessA, "app.zone-a.edgeplane.app", "A"); err != nil {
		t.Fatalf("A's bind under a zone: %v", err)
	}
	hidden := w.onlineIDs()

	var e apiError
	st := b.call("POST", "/reserved_domains", map[string]any{"domain": name}, &e)
	wantRefused(t, "B reserving A's online name", st, e, 409, "ERR_NGROK_430", name, hidden...)
	st = b.call("POST", "/reserved_domains", map[string]any{"domain": "*.zone-a.edgeplane.app"}, &e)
	wantRefused(t, "B reserving a wildcard over A's online name", st, e, 409, "ERR_NGROK_430", "*.zone-a.edgeplane.app", hidden...)
	st = b.call("POST", "/edges/https", map[string]any{"hostports": []string{name + ":443"}}, &e)
	wantRefused(t, "B's edge on A's online name", st, e, 400, "ERR_NGROK_7116", name, hidden...)

	sessB := b.mustConnect(tokenB)
	for _, pooled := range []bool{false, true} {
		err := listenAnswer(t, sessB, name, "B", config.WithPoolingEnabled(pooled))
		if got := ngrokCode(err); got != "ERR_NGROK_334" {
			t.Errorf("B's bind of A's online name (pooling %v): %s, want ERR_NGROK_334", pooled, got)
		}
	}
	client := w.httpsClient()
	for range 10 {
		if st, body, _ := get(t, client, "https://"+name+"/"); st != 200 || body != "A" {
			t.Fatalf("a request of A's endpoint got %d %q, want A's answer", st, body)
		}
	}

	// Offline, the name is free: B reserves it, and A can no longer bind it.
	tunA.Close()
	eventually(t, 2*time.Second, "B's reservation once A's endpoint is offline", func() bool {
		return b.call("POST", "/reserved_domains", map[string]any{"domain": name}, nil) == 201
	})
	_, err = sessA.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name)))
	if got := ngrokCode(err); got != "ERR_NGROK_319" {
		t.Errorf("A's bind of the name B reserved: %s, want ERR_NGROK_319", got)
	}
}

// TestNameOrdersOfEvents: the other orders of events leave a name with one holder. Reservation
// first: another account can neither bind nor reserve it. Edge first: the edge's account keeps
// its traffic. A wildcard reservation first: another account cannot bind a name under it, but
// may reserve one exactly (an exact name beats a wildcard) and then serves it. The account
// holding a name serves it on every protocol; another account binds it on none.
func TestNameOrdersOfEvents(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	sessA, sessB := w.mustConnect(tokenA), b.mustConnect(tokenB)
	client := w.httpsClient()
	body := func(host string) string {
		_, body, _ := get(t, client, "https://"+host+"/")
		return body
	}

	// Reservation first.
	b.reserveDomain("r.example.com")
	if got := ngrokCode(listenAnswer(t, sessA, "r.example.com", "A")); got != "ERR_NGROK_319" {
		t.Errorf("A's bind of B's reserved name: %s, want ERR_NGROK_319", got)
	}
	var e apiError
	st := w.call("POST", "/reserved_domains", map[string]any{"domain": "r.example.com"}, &e)
	wantRefused(t, "A reserving B's name", st, e, 409, "ERR_NGROK_414", "r.example.com")
	if err := listenAnswer(t, sessB, "r.example.com", "B"); err != nil {
		t.Fatalf("B's bind of its reserved name: %v", err)
	}
	if got := body("r.example.com"); got != "B" {
		t.Errorf("r.example.com answered %q, want B's", got)
	}

	// Edge first.
	liveEdge(t, b, w, "e.example.com")
	if got := ngrokCode(listenAnswer(t, sessA, "e.example.com", "A")); got != "ERR_NGROK_319" {
		t.Errorf("A's bind of B's edge's name: %s, want ERR_NGROK_319", got)
	}
	if got := body("e.example.com"); got != "v0" {
		t.Errorf("e.example.com answered %q, want B's edge's", got)
	}

	// A wildcard reservation first.
	b.reserveDomain("*.w.example.com")
	if got := ngrokCode(listenAnswer(t, sessA, "n.w.example.com", "A")); got != "ERR_NGROK_319" {
		t.Errorf("A's bind under B's wildcard: %s, want ERR_NGROK_319", got)
	}
	if err := listenAnswer(t, sessB, "n.w.example.com", "B"); err != nil {
		t.Fatalf("B's bind under its wildcard: %v", err)
	}
	w.reserveDomain("mine.w.example.com")
	if err := listenAnswer(t, sessA, "mine.w.example.com", "A"); err != nil {
		t.Fatalf("A's bind of its exact name under B's wildcard: %v", err)
	}
	if got := ngrokCode(listenAnswer(t, sessB, "mine.w.example.com", "B")); got != "ERR_NGROK_319" {
		t.Errorf("B's bind of A's exact name under its wildcard: %s, want ERR_NGROK_319", got)
	}
	if got := body("n.w.example.com"); got != "B" {
		t.Errorf("under B's wildcard: n answered %q, want B's", got)
	}
	// The listeners learn of A's reservation with the plan (within a second); until then the
	// wildcard's holder is the name's, and A's endpoint is not served.
	eventually(t, time.Second, "A's exact name under B's wildcard served by A", func() bool { return body("mine.w.example.com") == "A" })

	// One holder, every protocol: A's https name is A's for http and tls too.
	if err := listenAnswer(t, sessA, "proto-a.edgeplane.app", "A"); err != nil {
		t.Fatalf("A's bind: %v", err)
	}
	if err := listenAnswer(t, sessA, "proto-a.edgeplane.app", "A", config.WithScheme(config.SchemeHTTP)); err != nil {
		t.Fatalf("A's http bind of its https name: %v", err)
	}
	_, err := sessB.Listen(context.Background(), config.TLSEndpoint(config.WithDomain("proto-a.edgeplane.app")))
	if got := ngrokCode(err); got != "ERR_NGROK_334" {
		t.Errorf("B's tls bind of A's https name: %s, want ERR_NGROK_334", got)
	}
}

// TestPoolingStaysInOneAccount: pooling joins only binds of one account. B's pooled bind of A's
// pooled https endpoint (which asks for basic auth) is refused as it would be without pooling
// (ERR_NGROK_334), so no public request skips A's basic auth or reaches B; the same for a tls
// endpoint. A's own second pooled bind is taken.
func TestPoolingStaysInOneAccount(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	sessA, sessA2, sessB := w.mustConnect(tokenA), w.mustConnect(tokenA), b.mustConnect(tokenB)
	const name = "pool-a.edgeplane.app"
	auth := config.WithBasicAuth("alice", "correct-horse-battery")
	for _, s := range []struct {
		sess ngrok.Session
		who  string
	}{{sessA, "A"}, {sessA2, "A2"}} {
		if err := listenAnswer(t, s.sess, name, s.who, config.WithPoolingEnabled(true), auth); err != nil {
			t.Fatalf("%s's pooled bind: %v", s.who, err)
		}
	}
	err := listenAnswer(t, sessB, name, "B", config.WithPoolingEnabled(true))
	if got := ngrokCode(err); got != "ERR_NGROK_334" {
		t.Errorf("B's pooled bind of A's pooled endpoint: %s, want ERR_NGROK_334", got)
	}
	// A new connection per request: streams are reused only within one public connection, and
	// each request goes to the next bind.
	newClient := func() *http.Client {
		c := w.httpsClient()
		c.Transport.(*http.Transport).DisableKeepAlives = true
		return c
	}
	for range 20 {
		st, body, _ := get(t, newClient(), "https://"+name+"/")
		if st != 401 || !strings.Contains(body, "ERR_NGROK_3401") {
			t.Fatalf("a request without credentials got %d %q, want A's 401", st, body)
		}
	}
	seen := map[string]int{}
	for range 20 {
		req, _ := http.NewRequest("GET", "https://"+name+"/", nil)
		req.SetBasicAuth("alice", "correct-horse-battery")
		resp, err := newClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
		resp.Body.Close()
		seen[string(body)]++
	}
	if seen["B"] != 0 || seen["A"] == 0 || seen["A2"] == 0 {
		t.Errorf("pooled traffic went to %v, want A's two binds only", seen)
	}

	// TLS endpoints.
	const tlsName = "pool-tls.edgeplane.app"
	for _, s := range []ngrok.Session{sessA, sessA2} {
		if _, err := s.Listen(context.Background(), config.TLSEndpoint(config.WithDomain(tlsName), config.WithPoolingEnabled(true))); err != nil {
			t.Fatalf("A's pooled tls bind: %v", err)
		}
	}
	_, err = sessB.Listen(context.Background(), config.TLSEndpoint(config.WithDomain(tlsName), config.WithPoolingEnabled(true)))
	if got := ngrokCode(err); got != "ERR_NGROK_334" {
		t.Errorf("B's pooled tls bind of A's pooled tls endpoint: %s, want ERR_NGROK_334", got)
	}
}

// serveUntilStopped answers every request on tun with body and returns the error its Accept
// ends with (what the agent was told when edgeplane stopped the tunnel).
func serveUntilStopped(tun net.Listener, body string) <-chan error {
	stopped := make(chan error, 1)
	go func() {
		// ngrok-go v1.12.1 can panic inside Accept once its tunnel is closed (a nil logger on
		// its error path): the client's bug ends only this goroutine.
		defer func() { _ = recover() }()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })}
		stopped <- srv.Serve(acceptguard.Listener{Listener: tun})
	}()
	return stopped
}
