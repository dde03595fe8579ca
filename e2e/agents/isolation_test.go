package agents

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/internal/testproc"
	"github.com/edgeplane/edgeplane/store"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// Isolation between accounts on the data plane: a name is held by one account at a time, and
// only its holder's agents and edges serve it, in every order of events.

// asAccount returns the world as seen by another account of the same server (made with
// `edgeplane apikey create --account name`): the same listeners, its own API key.
func (w *world) asAccount(name string) *world {
	w.t.Helper()
	cmd := exec.Command(binPath, "apikey", "create", "--db", w.db, "--account", name)
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

// TestReplicasOneHolderPerName: with two replicas on one PostgreSQL, a name online for A's agent
// on one replica can be neither bound (pooled or not) by B's agent on the other nor reserved
// through it; and a bind on one replica racing another account's reservation of the same name
// through the other never both succeed.
func TestReplicasOneHolderPerName(t *testing.T) {
	dsn := testdb.Postgres(t) // skips without EDGEPLANE_TEST_POSTGRES
	env := []string{testdb.SecretKeyEnvVar()}
	r1 := startOn(t, dsn, env, "")
	r2 := startOn(t, dsn, env, r1.token)
	b := r2.asAccount("team-b")
	_, tokenA := r1.credential()
	_, tokenB := b.credential()
	sessA, sessB := r1.mustConnect(tokenA), b.mustConnect(tokenB)
	if err := listenAnswer(t, sessA, "rep-a.edgeplane.app", "A", config.WithPoolingEnabled(true)); err != nil {
		t.Fatalf("A's bind on replica 1: %v", err)
	}
	if got := ngrokCode(listenAnswer(t, sessB, "rep-a.edgeplane.app", "B", config.WithPoolingEnabled(true))); got != "ERR_NGROK_334" {
		t.Errorf("B's pooled bind on replica 2 of A's name on replica 1: %s, want ERR_NGROK_334", got)
	}
	var e apiError
	st := b.call("POST", "/reserved_domains", map[string]any{"domain": "rep-a.edgeplane.app"}, &e)
	wantRefused(t, "B reserving through replica 2 A's name online on replica 1", st, e, 409, "ERR_NGROK_430", "rep-a.edgeplane.app")

	const rounds = 12
	wins := map[string]int{}
	for i := range rounds {
		name := fmt.Sprintf("race%d.edgeplane.app", i)
		var bindErr error
		var st int
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			bindErr = listenAnswer(t, sessA, name, "A")
		}()
		go func() {
			defer wg.Done()
			st = b.call("POST", "/reserved_domains", map[string]any{"domain": name}, nil)
		}()
		wg.Wait()
		switch {
		case bindErr == nil && st == 201:
			t.Fatalf("round %d: A's bind on replica 1 and B's reservation through replica 2 of %s both succeeded", i, name)
		case bindErr == nil && st == 409:
			wins["bind"]++
		case st == 201 && ngrokCode(bindErr) == "ERR_NGROK_319":
			wins["reservation"]++
		default:
			t.Fatalf("round %d: bind %v, reservation %d", i, bindErr, st)
		}
	}
	t.Logf("of %d races: %v", rounds, wins)
}

// TestDeactivatedBotUserSessionsEnd: deactivating a bot user (PATCH active false) ends the live
// sessions of its credentials as fast as deleting it does (the gateway's check, every 0.5 s),
// and its token is then refused (ERR_NGROK_107); another account's agent serves on.
func TestDeactivatedBotUserSessionsEnd(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	bot := w.mustCreate("/bot_users", map[string]any{"name": "deploy-bot"})
	var cr struct{ Token string }
	if st := w.call("POST", "/credentials", map[string]any{"owner_id": bot}, &cr); st != 201 {
		t.Fatalf("bot credential: %d", st)
	}
	_, tokenB := b.credential()
	if err := listenAnswer(t, w.mustConnect(cr.Token), "bot.edgeplane.app", "bot"); err != nil {
		t.Fatalf("the bot's bind: %v", err)
	}
	if err := listenAnswer(t, b.mustConnect(tokenB), "other.edgeplane.app", "B"); err != nil {
		t.Fatalf("B's bind: %v", err)
	}
	client := w.httpsClient()
	if st, body, _ := get(t, client, "https://bot.edgeplane.app/"); st != 200 || body != "bot" {
		t.Fatalf("the bot's endpoint: %d %q", st, body)
	}
	if st := w.call("PATCH", "/bot_users/"+bot, map[string]any{"active": false}, nil); st != 200 {
		t.Fatalf("deactivate: %d", st)
	}
	took := eventually(t, 500*time.Millisecond, "the deactivated bot's endpoint offline", func() bool {
		st, _, _ := get(t, client, "https://bot.edgeplane.app/")
		return st == 404
	})
	t.Logf("deactivation reached traffic in %v", took)
	eventually(t, time.Second, "the bot's session gone from the API", func() bool {
		var sl struct {
			Sessions []sessionDoc `json:"tunnel_sessions"`
		}
		w.call("GET", "/tunnel_sessions", nil, &sl)
		return len(sl.Sessions) == 0
	})
	if got := w.connectCode(cr.Token); got != "ERR_NGROK_107" {
		t.Errorf("the deactivated bot's token: %s, want ERR_NGROK_107", got)
	}
	if st, body, _ := get(t, client, "https://other.edgeplane.app/"); st != 200 || body != "B" {
		t.Errorf("B's endpoint: %d %q", st, body)
	}
}

// TestNarrowedACLStopsBinds: narrowing a credential's ACL (PATCH acl) re-checks the live binds of
// its sessions within the gateway's check (0.5 s): a bind the new ACL refuses goes offline and
// its agent is told (StopTunnel, with the refusal a new bind would get, ERR_NGROK_316); the
// others serve on, and the session's next bind is checked against the new ACL. Another account
// with the same rules is untouched.
func TestNarrowedACLStopsBinds(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	id, token := w.credential("bind:keep.edgeplane.app", "bind:drop.edgeplane.app")
	_, tokenB := b.credential("bind:b-drop.edgeplane.app")
	sess := w.mustConnect(token)
	if err := listenAnswer(t, sess, "keep.edgeplane.app", "keep"); err != nil {
		t.Fatalf("bind keep: %v", err)
	}
	drop, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("drop.edgeplane.app")))
	if err != nil {
		t.Fatalf("bind drop: %v", err)
	}
	stopped := serveUntilStopped(drop, "drop")
	if err := listenAnswer(t, b.mustConnect(tokenB), "b-drop.edgeplane.app", "B"); err != nil {
		t.Fatalf("B's bind: %v", err)
	}
	client := w.httpsClient()
	status := func(host string) int {
		st, _, _ := get(t, client, "https://"+host+"/")
		return st
	}
	if status("drop.edgeplane.app") != 200 || status("keep.edgeplane.app") != 200 {
		t.Fatal("the binds are not online")
	}

	if st := w.call("PATCH", "/credentials/"+id, map[string]any{"acl": []string{"bind:keep.edgeplane.app"}}, nil); st != 200 {
		t.Fatalf("narrow the ACL: %d", st)
	}
	took := eventually(t, 500*time.Millisecond, "the bind the new ACL refuses offline", func() bool { return status("drop.edgeplane.app") == 404 })
	t.Logf("the narrowed ACL reached traffic in %v", took)
	select {
	case err := <-stopped:
		if got := ngrokCode(err); got != "ERR_NGROK_316" {
			t.Errorf("the agent was told %v, want ERR_NGROK_316", err)
		}
	case <-time.After(eventuallyFloor):
		t.Errorf("the agent's stopped tunnel still accepts")
	}
	if status("keep.edgeplane.app") != 200 || status("b-drop.edgeplane.app") != 200 {
		t.Errorf("a bind the ACL still permits (or another account's) went offline")
	}
	_, err = sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("drop.edgeplane.app")))
	if got := ngrokCode(err); got != "ERR_NGROK_316" {
		t.Errorf("the session's next bind of the refused name: %s, want ERR_NGROK_316", got)
	}
	var tl struct {
		Tunnels []struct {
			PublicURL string `json:"public_url"`
		} `json:"tunnels"`
	}
	w.call("GET", "/tunnels", nil, &tl)
	if len(tl.Tunnels) != 1 || tl.Tunnels[0].PublicURL != "https://keep.edgeplane.app" {
		t.Errorf("the API lists %+v, want keep only", tl.Tunnels)
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
		stopped <- srv.Serve(tun)
	}()
	return stopped
}

// TestReplicaCutOffLosesItsHolds: a replica that cannot reach the store for longer than the
// tolerance of its rows (15 s) stops holding its agents' names: through the other replica,
// another account may then reserve one and bind another. When the replica reaches the store
// again it writes its rows again through a bind's checks, and stops (with StopTunnel) the
// tunnels whose names were taken: ERR_NGROK_319 for the reserved one, ERR_NGROK_334 for the one
// bound elsewhere; its listener no longer serves them, and its agent's session is listed again.
func TestReplicaCutOffLosesItsHolds(t *testing.T) {
	dsn := testdb.Postgres(t) // skips without EDGEPLANE_TEST_POSTGRES
	env := []string{testdb.SecretKeyEnvVar()}
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	r2 := startOn(t, dsn, env, "")
	r1 := startOn(t, proxy.Redirect(dsn), env, r2.token)
	b := r2.asAccount("team-b")
	_, tokenA := r2.credential()
	_, tokenB := b.credential()
	sessA := r1.mustConnect(tokenA)
	stopped := map[string]<-chan error{}
	for _, name := range []string{"cut-r.edgeplane.app", "cut-b.edgeplane.app"} {
		tun, err := sessA.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name)))
		if err != nil {
			t.Fatalf("A's bind of %s on replica 1: %v", name, err)
		}
		stopped[name] = serveUntilStopped(tun, "A")
	}
	var e apiError
	st := b.call("POST", "/reserved_domains", map[string]any{"domain": "cut-r.edgeplane.app"}, &e)
	wantRefused(t, "B reserving A's online name", st, e, 409, "ERR_NGROK_430", "cut-r.edgeplane.app")

	proxy.Down()
	eventually(t, store.LiveTolerance+10*time.Second, "A's names free once replica 1 is cut off for LiveTolerance", func() bool {
		return b.call("POST", "/reserved_domains", map[string]any{"domain": "cut-r.edgeplane.app"}, nil) == 201
	})
	if err := listenAnswer(t, b.mustConnect(tokenB), "cut-b.edgeplane.app", "B"); err != nil {
		t.Fatalf("B's bind on replica 2 of a name A held before replica 1 was cut off: %v", err)
	}
	proxy.Up()

	for name, code := range map[string]string{"cut-r.edgeplane.app": "ERR_NGROK_319", "cut-b.edgeplane.app": "ERR_NGROK_334"} {
		select {
		case err := <-stopped[name]:
			if got := ngrokCode(err); got != code {
				t.Errorf("A's tunnel of %s was stopped with %v, want %s", name, err, code)
			}
		case <-time.After(eventuallyFloor + store.LiveTolerance):
			t.Fatalf("A's tunnel of %s was not stopped once replica 1 reached the store again", name)
		}
		// Offline on replica 1: a 404, or no handshake for a name it no longer serves.
		if resp, err := r1.httpsClient().Get("https://" + name + "/"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Errorf("replica 1 still serves %s: %d %q", name, resp.StatusCode, body)
			}
		}
	}
	if st, body, _ := get(t, r2.httpsClient(), "https://cut-b.edgeplane.app/"); st != 200 || body != "B" {
		t.Errorf("B's endpoint on replica 2: %d %q", st, body)
	}
	var sl struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
	}
	if r2.call("GET", "/tunnel_sessions", nil, &sl); len(sl.Sessions) != 1 {
		t.Errorf("replica 2 lists %d sessions of A, want the one on replica 1 again", len(sl.Sessions))
	}
}
