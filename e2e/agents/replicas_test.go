package agents

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestReplicasShareAgents: two replicas on one PostgreSQL share edgeplane's CA and each other's
// agent sessions in the API; a credential deleted through one replica ends its session on the
// other within a second; a replica that dies stops showing its agents.
func TestReplicasShareAgents(t *testing.T) {
	dsn := testdb.Postgres(t) // skips without EDGEPLANE_TEST_POSTGRES
	env := []string{testdb.SecretKeyEnvVar()}
	a := startOn(t, dsn, env, "")
	b := startOn(t, dsn, env, a.token)
	if string(a.caPEM) != string(b.caPEM) {
		t.Fatalf("the replicas have different CAs")
	}
	id, token := a.credential()
	sess := a.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("rep.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	var sl struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
	}
	if st := b.call("GET", "/tunnel_sessions", nil, &sl); st != 200 || len(sl.Sessions) != 1 {
		t.Fatalf("replica B lists %d sessions (%d), want A's one", len(sl.Sessions), st)
	}
	// An agent of replica B trusts the same CA.
	_, token2 := b.credential()
	b.mustConnect(token2)

	if st := b.call("DELETE", "/credentials/"+id, nil, nil); st != 204 {
		t.Fatalf("delete through B: %d", st)
	}
	eventually(t, 3*time.Second, "A's session ended by a delete through B", func() bool {
		st, _, _ := tryGet(a.httpClient(), "http://rep.edgeplane.app/")
		return st == 404
	})

	// Commands through one replica reach an agent held by the other: an unsupported stop refused
	// with the agent's answer, a restart carried out.
	known := map[string]bool{}
	var all struct {
		Sessions []sessionDoc `json:"tunnel_sessions"`
	}
	b.call("GET", "/tunnel_sessions", nil, &all)
	for _, s := range all.Sessions {
		known[s.ID] = true
	}
	_, token3 := a.credential()
	restarted := make(chan struct{}, 1)
	a.mustConnect(token3, ngrok.WithRestartHandler(func(context.Context, ngrok.Session) error {
		restarted <- struct{}{}
		return nil
	}))
	var onA string
	eventually(t, 3*time.Second, "the new session listed by B", func() bool {
		b.call("GET", "/tunnel_sessions", nil, &all)
		for _, s := range all.Sessions {
			if !known[s.ID] {
				onA = s.ID
			}
		}
		return onA != ""
	})
	var e struct {
		ErrorCode string `json:"error_code"`
	}
	if st := b.call("POST", "/tunnel_sessions/"+onA+"/stop", nil, &e); st != 409 || e.ErrorCode != "ERR_NGROK_9010" {
		t.Errorf("stop relayed to a session without a stop handler: %d %s", st, e.ErrorCode)
	}
	if st := b.call("POST", "/tunnel_sessions/"+onA+"/restart", nil, nil); st != 204 {
		t.Errorf("restart relayed through B: %d", st)
	}
	select {
	case <-restarted:
	case <-time.After(5 * time.Second):
		t.Errorf("the restart relayed through B did not reach the agent on A")
	}
	// ngrok-go ends its session after its restart handler ran.
	eventually(t, 3*time.Second, "the restarted session gone", func() bool {
		return a.call("GET", "/tunnel_sessions/"+onA, nil, nil) == 404
	})

	// B's agent is listed by A until B dies, then not.
	if st := a.call("GET", "/tunnel_sessions", nil, &sl); st != 200 || len(sl.Sessions) != 1 {
		t.Fatalf("replica A lists %d sessions, want B's one", len(sl.Sessions))
	}
	b.stop()
	eventually(t, 25*time.Second, "a dead replica's session unlisted", func() bool {
		a.call("GET", "/tunnel_sessions", nil, &sl)
		return len(sl.Sessions) == 0
	})
}

// TestReplicasSharePlans: an edge configured through one replica carries traffic on another
// within a second, and a change through the first reaches the second's plan within a second.
func TestReplicasSharePlans(t *testing.T) {
	dsn := testdb.Postgres(t)
	env := []string{testdb.SecretKeyEnvVar()}
	a := startOn(t, dsn, env, "")
	b := startOn(t, dsn, env, a.token)
	a.reserveDomain("plans.example.com")
	resp := a.mustCreate("/backends/http_response", map[string]any{"body": "v1", "status_code": 200})
	edge := a.mustCreate("/edges/https", map[string]any{"hostports": []string{"plans.example.com:443"}})
	a.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": resp}})
	body := func() string {
		r, err := b.httpsClient().Get("https://plans.example.com/")
		if err != nil {
			return ""
		}
		defer r.Body.Close()
		data, _ := io.ReadAll(r.Body)
		return string(data)
	}
	eventually(t, 3*time.Second, "replica B serves the edge made through A", func() bool { return body() == "v1" })
	if st := a.call("PATCH", "/backends/http_response/"+resp, map[string]any{"body": "v2"}, nil); st != 200 {
		t.Fatalf("patch: %d", st)
	}
	eventually(t, 3*time.Second, "replica B serves the change made through A", func() bool { return body() == "v2" })
}
