package agents

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// connectCode connects with token and returns the ERR_NGROK code of the refusal (ngrok-go retries
// a refused Auth until its context ends, then returns the errors it saw).
func (w *world) connectCode(token string) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	sess, err := w.connect(ctx, token)
	if err == nil {
		sess.Close()
		return "connected"
	}
	return ngrokCode(err)
}

// TestAuthRefusals: each way an Auth is refused, with its code.
func TestAuthRefusals(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	cases := []struct{ name, token, code string }{
		{"no token", "", "ERR_NGROK_4018"},
		{"malformed", "not-a-token", "ERR_NGROK_105"},
		{"unknown", token[:len(token)-4] + "AAAA", "ERR_NGROK_107"},
		{"valid", token, "connected"},
	}
	for _, c := range cases {
		if got := w.connectCode(c.token); got != c.code {
			t.Errorf("%s: %s, want %s", c.name, got, c.code)
		}
	}
}

// TestDeletionsTakeAgentsOffline: deleting a credential ends its sessions within a second (and
// its token is then refused as revoked), deleting the reserved domain of an online endpoint takes
// the endpoint offline, and deleting a bot user ends the sessions of its credentials.
func TestDeletionsTakeAgentsOffline(t *testing.T) {
	w := start(t)
	id, token := w.credential()
	w.reserveDomain("keep.example.com")
	domID := w.reserveDomain("gone.example.com")
	sess := w.mustConnect(token)
	for _, name := range []string{"keep.example.com", "gone.example.com"} {
		tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name), config.WithScheme(config.SchemeHTTP)))
		if err != nil {
			t.Fatalf("listen %s: %v", name, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(hello))
	}
	status := func(host string) int {
		st, _, _ := get(t, w.httpClient(), "http://"+host+"/")
		return st
	}
	if status("gone.example.com") != 200 || status("keep.example.com") != 200 {
		t.Fatalf("endpoints not online")
	}

	if st := w.call("DELETE", "/reserved_domains/"+domID, nil, nil); st != 204 {
		t.Fatalf("delete domain: %d", st)
	}
	took := eventually(t, 2*time.Second, "endpoint of a deleted domain offline", func() bool { return status("gone.example.com") == 404 })
	t.Logf("domain deletion reached traffic in %v", took)
	if status("keep.example.com") != 200 {
		t.Errorf("the other endpoint went offline too")
	}

	if st := w.call("DELETE", "/credentials/"+id, nil, nil); st != 204 {
		t.Fatalf("delete credential: %d", st)
	}
	eventually(t, 2*time.Second, "session of a deleted credential ended", func() bool { return status("keep.example.com") == 404 })
	if got := w.connectCode(token); got != "ERR_NGROK_300" {
		t.Errorf("a revoked credential's token: %s, want ERR_NGROK_300", got)
	}

	// A bot user's credential: deleting the bot user deletes the credential and ends its sessions.
	var bot struct{ ID string }
	if st := w.call("POST", "/bot_users", map[string]any{"name": "ci"}, &bot); st != 201 {
		t.Fatalf("create bot user: %d", st)
	}
	var cr struct{ ID, Token string }
	if st := w.call("POST", "/credentials", map[string]any{"owner_id": bot.ID}, &cr); st != 201 {
		t.Fatalf("create bot credential: %d", st)
	}
	bsess := w.mustConnect(cr.Token)
	tun, err := bsess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("bot.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("bot listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	if status("bot.edgeplane.app") != 200 {
		t.Fatalf("bot endpoint not online")
	}
	if st := w.call("DELETE", "/bot_users/"+bot.ID, nil, nil); st != 204 {
		t.Fatalf("delete bot user: %d", st)
	}
	eventually(t, 2*time.Second, "session of a deleted bot user ended", func() bool { return status("bot.edgeplane.app") == 404 })
}

// TestBindRefusals: each way a bind is refused, with its code, and what is allowed.
func TestBindRefusals(t *testing.T) {
	w := start(t, "--tcp-port-range", "24000-24999", "--tcp-addr-host", "127.0.0.1")
	_, open := w.credential()
	_, limited := w.credential("bind:ok.example.com", "bind:*.wild.example.com", "bind:team=web")
	w.reserveDomain("ok.example.com")
	w.reserveDomain("*.wild.example.com")
	w.reserveDomain("other.example.com")
	w.reserveDomain("edge.example.com")
	var edge struct{ ID string }
	if st := w.call("POST", "/edges/https", map[string]any{"hostports": []string{"edge.example.com:443"}}, &edge); st != 201 {
		t.Fatalf("create edge: %d", st)
	}
	var ra struct{ Addr string }
	if st := w.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
		t.Fatalf("reserve addr: %d", st)
	}
	// An address in the range that is not reserved: any port but the one just reserved.
	unreserved := "127.0.0.1:24999"
	if ra.Addr == unreserved {
		unreserved = "127.0.0.1:24998"
	}
	ls := w.mustConnect(limited)
	os := w.mustConnect(open)
	ctx := context.Background()
	listen := func(sess ngrok.Session, cfg config.Tunnel) string {
		tun, err := sess.Listen(ctx, cfg)
		if err != nil {
			return ngrokCode(err)
		}
		t.Cleanup(func() { tun.Close() })
		return "ok"
	}
	cases := []struct {
		name string
		sess ngrok.Session
		cfg  config.Tunnel
		want string
	}{
		{"ACL permits the exact name", ls, config.HTTPEndpoint(config.WithDomain("ok.example.com")), "ok"},
		{"ACL permits a name under its wildcard", ls, config.HTTPEndpoint(config.WithDomain("a.wild.example.com")), "ok"},
		{"ACL refuses a name", ls, config.HTTPEndpoint(config.WithDomain("other.example.com")), "ERR_NGROK_316"},
		{"ACL refuses an address", ls, config.TCPEndpoint(config.WithRemoteAddr(ra.Addr)), "ERR_NGROK_308"},
		{"ACL refuses a random address", ls, config.TCPEndpoint(), "ERR_NGROK_356"},
		{"ACL permits a label", ls, config.LabeledTunnel(config.WithLabel("team", "web")), "ok"},
		{"ACL refuses a label", ls, config.LabeledTunnel(config.WithLabel("team", "db")), "ERR_NGROK_399"},
		{"name not reserved", os, config.HTTPEndpoint(config.WithDomain("stranger.example.org")), "ERR_NGROK_319"},
		{"address not reserved", os, config.TCPEndpoint(config.WithRemoteAddr(unreserved)), "ERR_NGROK_307"},
		{"hostport of an edge", os, config.HTTPEndpoint(config.WithDomain("edge.example.com")), "ERR_NGROK_381"},
		{"endpoint already online", os, config.HTTPEndpoint(config.WithDomain("ok.example.com")), "ERR_NGROK_334"},
		{"oauth without a managed application", os, config.HTTPEndpoint(config.WithDomain("c.edgeplane.app"), config.WithOAuth("github")), "ERR_NGROK_3208"},
		{"unsupported protocol option", os, config.TCPEndpoint(config.WithProxyProto(config.ProxyProtoV1)), "ERR_NGROK_3208"},
	}
	for _, c := range cases {
		if got := listen(c.sess, c.cfg); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	// An OAuth bind naming no client of its own, on a server started without --oauth-app, is
	// refused (never carried without the sign-in), naming the module and the flag to set.
	_, err := os.Listen(ctx, config.HTTPEndpoint(config.WithDomain("c2.edgeplane.app"), config.WithOAuth("google")))
	if code := ngrokCode(err); code != "ERR_NGROK_3208" || !strings.Contains(err.Error(), "oauth") ||
		!strings.Contains(err.Error(), "--oauth-app google=") {
		t.Errorf("an oauth bind without a managed application: %v, want ERR_NGROK_3208 naming --oauth-app google", err)
	}
}

// TestPooling: two binds of one endpoint are refused unless both pool, and pooled binds share
// the traffic.
func TestPooling(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	a, b := w.mustConnect(token), w.mustConnect(token)
	ctx := context.Background()
	pooled := config.HTTPEndpoint(config.WithDomain("pool.edgeplane.app"), config.WithScheme(config.SchemeHTTP), config.WithPoolingEnabled(true))
	for i, sess := range []ngrok.Session{a, b} {
		tun, err := sess.Listen(ctx, pooled)
		if err != nil {
			t.Fatalf("pooled listen %d: %v", i, err)
		}
		name := []string{"a", "b"}[i]
		serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(name)) }))
	}
	seen := map[string]int{}
	for range 20 {
		// A new connection per request: streams are reused only within one public connection.
		c := w.httpClient()
		c.Transport.(*http.Transport).DisableKeepAlives = true
		_, body, _ := get(t, c, "http://pool.edgeplane.app/")
		seen[body]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Errorf("pooled traffic went to %v, want both", seen)
	}
	_, err := a.Listen(ctx, config.HTTPEndpoint(config.WithDomain("pool.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if got := ngrokCode(err); got != "ERR_NGROK_6030" {
		t.Errorf("an unpooled bind beside pooled ones: %s, want ERR_NGROK_6030", got)
	}
}

// TestPooledTCP: pooled binds of one reserved address share its listener; the endpoint keeps
// serving after its first bind goes, and stops only with its last.
func TestPooledTCP(t *testing.T) {
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "27000-27999")
	_, token := w.credential()
	var ra struct{ Addr string }
	if st := w.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
		t.Fatalf("reserve: %d", st)
	}
	a, b := w.mustConnect(token), w.mustConnect(token)
	var tuns []net.Listener
	for _, s := range []ngrok.Session{a, b} {
		tun, err := s.Listen(context.Background(), config.TCPEndpoint(config.WithRemoteAddr(ra.Addr), config.WithPoolingEnabled(true)))
		if err != nil {
			t.Fatalf("pooled tcp listen: %v", err)
		}
		tuns = append(tuns, tun)
		go func(l net.Listener) {
			for {
				c, err := acceptguard.Listener{Listener: l}.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("hi"))
				c.Close()
			}
		}(tun)
	}
	read := func() string {
		c, err := net.DialTimeout("tcp", ra.Addr, 2*time.Second)
		if err != nil {
			return "refused"
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		buf, _ := io.ReadAll(c)
		return string(buf)
	}
	if got := read(); got != "hi" {
		t.Fatalf("pooled tcp endpoint: %q", got)
	}
	tuns[0].Close() // the first bind, which opened the listener
	eventually(t, 3*time.Second, "the endpoint served by the remaining bind", func() bool {
		return read() == "hi" && read() == "hi"
	})
	tuns[1].Close()
	eventually(t, 3*time.Second, "the listener closed with the last bind", func() bool { return read() == "refused" })
}
