package agents

import (
	"context"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// Changes to a credential, or to the bot user owning it, reach its live sessions.

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
		st, _, _ := tryGet(client, "https://bot.edgeplane.app/")
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
