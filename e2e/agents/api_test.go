package agents

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

type sessionDoc struct {
	ID, URI, IP, OS, Region, Transport string
	AgentVersion                       string `json:"agent_version"`
	StartedAt                          string `json:"started_at"`
	Credential                         struct{ ID, URI string }
}

type tunnelDoc struct {
	ID, URI, Proto string
	PublicURL      string `json:"public_url"`
	ForwardsTo     string `json:"forwards_to"`
	StartedAt      string `json:"started_at"`
	Labels         map[string]string
	TunnelSession  struct{ ID, URI string } `json:"tunnel_session"`
}

// TestSessionsAndTunnelsAPI: online sessions and tunnels are listed with the published shape,
// labeled tunnels included, and the commands reach the agent.
func TestSessionsAndTunnelsAPI(t *testing.T) {
	w := start(t)
	credID, token := w.credential()
	restarted := make(chan struct{}, 1)
	sess := w.mustConnect(token, ngrok.WithMetadata("ci-runner"),
		ngrok.WithRestartHandler(func(context.Context, ngrok.Session) error { restarted <- struct{}{}; return nil }),
		ngrok.WithUpdateHandler(func(context.Context, ngrok.Session) error {
			return errors.New("updates disabled here")
		}))
	ctx := context.Background()
	labeled, err := sess.Listen(ctx, config.LabeledTunnel(config.WithLabel("edge", "edghts_x"), config.WithForwardsTo("localhost:3000")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	plain, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("api.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, plain, http.HandlerFunc(hello))

	var sl struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
		URI      string
	}
	if st := w.call("GET", "/tunnel_sessions", nil, &sl); st != 200 || len(sl.Sessions) != 1 {
		t.Fatalf("list sessions: %d %+v", st, sl)
	}
	s := sl.Sessions[0]
	if !strings.HasPrefix(s.ID, "ts_") || s.URI != w.api+"/tunnel_sessions/"+s.ID || s.IP != "127.0.0.1" || s.OS == "" ||
		s.AgentVersion == "" || s.Credential.ID != credID || s.Credential.URI != w.api+"/credentials/"+credID || s.Transport != "ngrok/v2" || s.StartedAt == "" {
		t.Errorf("session document: %+v", s)
	}
	var one sessionDoc
	if st := w.call("GET", "/tunnel_sessions/"+s.ID, nil, &one); st != 200 || one.ID != s.ID {
		t.Errorf("get session: %d %+v", st, one)
	}
	var tl struct {
		Tunnels []tunnelDoc `json:"tunnels"`
	}
	if st := w.call("GET", "/tunnels", nil, &tl); st != 200 || len(tl.Tunnels) != 2 {
		t.Fatalf("list tunnels: %d %+v", st, tl)
	}
	var gotLabeled, gotPlain bool
	for _, tn := range tl.Tunnels {
		if tn.TunnelSession.ID != s.ID || !strings.HasPrefix(tn.ID, "tn_") || tn.URI != w.api+"/tunnels/"+tn.ID {
			t.Errorf("tunnel document: %+v", tn)
		}
		switch {
		case tn.Labels["edge"] == "edghts_x" && tn.ForwardsTo == "localhost:3000":
			gotLabeled = true
		case tn.PublicURL == "https://api.edgeplane.app" && tn.Proto == "https":
			gotPlain = true
		}
	}
	if !gotLabeled || !gotPlain {
		t.Errorf("tunnels listed: %+v", tl.Tunnels)
	}

	// A tunnel-group backend lists the online labeled tunnels whose labels include its own, and
	// a labeled tunnel lists the backends it serves.
	var match, miss struct {
		ID      string
		Tunnels []struct{ ID, URI string }
	}
	if st := w.call("POST", "/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "edghts_x"}}, &match); st != 201 {
		t.Fatalf("create backend: %d", st)
	}
	w.call("POST", "/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "edghts_y"}}, &miss)
	var labeledID string
	for _, tn := range tl.Tunnels {
		if len(tn.Labels) > 0 {
			labeledID = tn.ID
		}
	}
	if len(match.Tunnels) != 1 || match.Tunnels[0].ID != labeledID || match.Tunnels[0].URI != w.api+"/tunnels/"+labeledID || len(miss.Tunnels) != 0 {
		t.Errorf("backend tunnels on create: match %+v, miss %+v (labeled tunnel %s)", match.Tunnels, miss.Tunnels, labeledID)
	}
	w.call("GET", "/backends/tunnel_group/"+match.ID, nil, &match)
	if len(match.Tunnels) != 1 || match.Tunnels[0].ID != labeledID {
		t.Errorf("backend tunnels on get: %+v", match.Tunnels)
	}
	var lt struct{ Backends []struct{ ID string } }
	w.call("GET", "/tunnels/"+labeledID, nil, &lt)
	if len(lt.Backends) != 1 || lt.Backends[0].ID != match.ID {
		t.Errorf("labeled tunnel's backends: %+v, want [%s]", lt.Backends, match.ID)
	}

	// Commands: update is refused by this agent; stop has no handler, so the agent declared it
	// unsupported; restart reaches the handler (and the agent then starts a new session).
	var e struct {
		ErrorCode string `json:"error_code"`
	}
	if st := w.call("POST", "/tunnel_sessions/"+s.ID+"/update", map[string]any{}, &e); st != 502 || e.ErrorCode != "ERR_NGROK_9011" {
		t.Errorf("update refused by the agent: %d %s", st, e.ErrorCode)
	}
	if st := w.call("POST", "/tunnel_sessions/"+s.ID+"/stop", nil, &e); st != 409 || e.ErrorCode != "ERR_NGROK_9010" {
		t.Errorf("stop without a handler: %d %s", st, e.ErrorCode)
	}
	if st := w.call("POST", "/tunnel_sessions/ts_2x0000000000000000000000000/stop", nil, &e); st != 404 {
		t.Errorf("command to a missing session: %d", st)
	}
	// Unbinding removes the tunnel.
	labeled.Close()
	eventually(t, 3*time.Second, "labeled tunnel gone from /tunnels", func() bool {
		w.call("GET", "/tunnels", nil, &tl)
		return len(tl.Tunnels) == 1
	})
	w.call("GET", "/backends/tunnel_group/"+match.ID, nil, &match)
	if len(match.Tunnels) != 0 {
		t.Errorf("backend still lists an unbound tunnel: %+v", match.Tunnels)
	}
	if st := w.call("POST", "/tunnel_sessions/"+s.ID+"/restart", map[string]any{"id": s.ID}, nil); st != 204 {
		t.Errorf("restart: %d", st)
	}
	select {
	case <-restarted:
	case <-time.After(5 * time.Second):
		t.Errorf("the agent's restart handler was not called")
	}
	// ngrok-go ends its session once its restart handler has run (the application is to
	// restart itself); the session and its tunnels leave the lists.
	eventually(t, 3*time.Second, "session gone from /tunnel_sessions", func() bool {
		w.call("GET", "/tunnel_sessions", nil, &sl)
		w.call("GET", "/tunnels", nil, &tl)
		return len(sl.Sessions) == 0 && len(tl.Tunnels) == 0
	})
	if st := w.call("GET", "/tunnel_sessions/"+s.ID, nil, nil); st != 404 {
		t.Errorf("get of a closed session: %d", st)
	}
}

// TestReconnectAfterRestart: the server is killed and started again on the same agent port; the
// agent reconnects with its session id and its endpoint serves traffic again.
func TestReconnectAfterRestart(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("back.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	var before struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
	}
	w.call("GET", "/tunnel_sessions", nil, &before)
	w.stop()
	w.run()
	eventually(t, 15*time.Second, "traffic after the restart", func() bool {
		st, _, _ := tryGet(w.httpClient(), "http://back.edgeplane.app/")
		return st == 200
	})
	var after struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
	}
	w.call("GET", "/tunnel_sessions", nil, &after)
	if len(before.Sessions) != 1 || len(after.Sessions) != 1 || after.Sessions[0].ID != before.Sessions[0].ID {
		t.Errorf("sessions before %+v, after %+v: the agent should keep its session id", before.Sessions, after.Sessions)
	}
}

// TestBindModules: basic auth and IP restriction asked for by the agent are enforced.
func TestBindModules(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts []config.HTTPEndpointOption
	}{
		{"auth.edgeplane.app", []config.HTTPEndpointOption{config.WithBasicAuth("ann", "correct-horse")}},
		{"deny.edgeplane.app", []config.HTTPEndpointOption{config.WithDenyCIDRString("127.0.0.0/8")}},
		{"allow.edgeplane.app", []config.HTTPEndpointOption{config.WithAllowCIDRString("127.0.0.1/32", "::1/128")}},
		{"elsewhere.edgeplane.app", []config.HTTPEndpointOption{config.WithAllowCIDRString("10.0.0.0/8")}},
	} {
		tun, err := sess.Listen(ctx, config.HTTPEndpoint(append(c.opts, config.WithDomain(c.name), config.WithScheme(config.SchemeHTTP))...))
		if err != nil {
			t.Fatalf("listen %s: %v", c.name, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(hello))
	}
	hc := w.httpClient()
	st, _, h := get(t, hc, "http://auth.edgeplane.app/")
	if st != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("basic auth without credentials: %d %q", st, h.Get("WWW-Authenticate"))
	}
	for _, c := range []struct {
		user, pass string
		want       int
	}{{"ann", "wrong", 401}, {"bob", "correct-horse", 401}, {"ann", "correct-horse", 200}} {
		req, _ := http.NewRequest("GET", "http://auth.edgeplane.app/", nil)
		req.SetBasicAuth(c.user, c.pass)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("basic auth %s:%s: %d, want %d", c.user, c.pass, resp.StatusCode, c.want)
		}
	}
	for host, want := range map[string]int{"deny.edgeplane.app": 403, "allow.edgeplane.app": 200, "elsewhere.edgeplane.app": 403} {
		st, _, h := get(t, hc, "http://"+host+"/")
		if st != want || (want == 403 && h.Get("ngrok-error-code") != "ERR_NGROK_3205") {
			t.Errorf("ip restriction %s: %d %q, want %d", host, st, h.Get("ngrok-error-code"), want)
		}
	}
}
