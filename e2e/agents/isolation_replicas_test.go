package agents

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
	"golang.ngrok.com/ngrok/config"
)

// Who holds a name across two replicas sharing PostgreSQL.

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
