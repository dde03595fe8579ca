package main

// Several `edgeplane serve` processes on one database, as replicas behind a load balancer run:
// on every engine of the run (SQLite always — several processes on one file — and PostgreSQL when
// EDGEPLANE_TEST_POSTGRES is set).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
)

// replicas starts two servers on one fresh database of the engine and returns them with the
// bootstrap token, which only the first prints.
func replicas(t *testing.T, engine string) (a, b *proc, token string) {
	t.Helper()
	dsn := testdb.Fresh(t, engine)
	a = startReplica(t, dsn)
	token, ok := bootstrapToken(t, a.Stderr.String())
	if !ok {
		t.Fatalf("first replica printed no token; stderr:\n%s", a.Stderr)
	}
	b = startReplica(t, dsn)
	if _, again := bootstrapToken(t, b.Stderr.String()); again {
		t.Fatal("the second replica bootstrapped the database again")
	}
	return a, b, token
}

// startReplica starts a server on dsn; replicas on PostgreSQL share the test process's secret key.
func startReplica(t *testing.T, dsn string) *proc {
	t.Helper()
	var env []string
	if strings.HasPrefix(dsn, "postgres") {
		env = append(env, testdb.SecretKeyEnvVar())
	}
	p := startServe(t, "", env, "--db", dsn, "--listen", "127.0.0.1:0")
	p.db = dsn
	return p
}

func forEngines(t *testing.T, fn func(t *testing.T, engine string)) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			fn(t, engine)
		})
	}
}

func decodeObj(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	return m
}

// A write through one replica is visible through the other on the next request, and a key
// deleted through one is refused by the other on the next request.
func TestReplicasShareState(t *testing.T) {
	t.Parallel()
	forEngines(t, func(t *testing.T, engine string) {
		a, b, token := replicas(t, engine)
		id := createIPPolicy(t, a, token)
		if status, code := getIPPolicy(t, b, token, id); status != 200 {
			t.Fatalf("replica B: GET of a policy created through A: %d %s", status, code)
		}
		// A reads the policy (twice: on SQLite the second answer comes from A's read cache)
		// before B changes it.
		for range 2 {
			if status, code := getIPPolicy(t, a, token, id); status != 200 {
				t.Fatalf("replica A: GET of its own policy: %d %s", status, code)
			}
		}
		status, body := call(t, "PATCH", b.url("/ip_policies/"+id), token, `{"description":"via b"}`)
		if status != 200 {
			t.Fatalf("PATCH through B: %d %s", status, body)
		}
		if _, body := call(t, "GET", a.url("/ip_policies/"+id), token, ""); decodeObj(t, body)["description"] != "via b" {
			t.Fatalf("A does not see B's update: %s", body)
		}

		status, body = call(t, "POST", a.url("/api_keys"), token, `{}`)
		if status != 201 {
			t.Fatalf("create key through A: %d %s", status, body)
		}
		key := decodeObj(t, body)
		newToken, keyID := key["token"].(string), key["id"].(string)
		if status, _ := call(t, "GET", b.url("/api_keys"), newToken, ""); status != 200 {
			t.Fatalf("a key created through A is refused by B: %d", status)
		}
		for range 2 {
			if status, code := getIPPolicy(t, b, newToken, id); status != 200 {
				t.Fatalf("B: GET by id with a key created through A: %d %s", status, code)
			}
		}
		if status, body := call(t, "DELETE", a.url("/api_keys/"+keyID), token, ""); status != 204 {
			t.Fatalf("delete key through A: %d %s", status, body)
		}
		status, body = call(t, "GET", b.url("/api_keys"), newToken, "")
		if status != 401 || decodeObj(t, body)["error_code"] != "ERR_NGROK_203" {
			t.Fatalf("B accepted a key deleted through A: %d %s", status, body)
		}
		if status, code := getIPPolicy(t, b, newToken, id); status != 401 || code != "ERR_NGROK_203" {
			t.Fatalf("B: GET by id with a key deleted through A: %d %s", status, code)
		}
	})
}

// Concurrent PATCHes of different fields of one object through both replicas lose no update:
// every round's values of all three fields survive.
func TestReplicasConcurrentPatchesLoseNothing(t *testing.T) {
	t.Parallel()
	forEngines(t, func(t *testing.T, engine string) {
		a, b, token := replicas(t, engine)
		status, body := call(t, "POST", a.url("/credentials"), token, `{}`)
		if status != 201 {
			t.Fatalf("create credential: %d %s", status, body)
		}
		id := decodeObj(t, body)["id"].(string)
		for round := range 15 {
			patches := []struct {
				p    *proc
				body string
			}{
				{a, fmt.Sprintf(`{"description":"d%d"}`, round)},
				{b, fmt.Sprintf(`{"metadata":"m%d"}`, round)},
				{a, fmt.Sprintf(`{"acl":["bind:r%d.example.com"]}`, round)},
				{b, `{"description":null}`},
			}
			var wg sync.WaitGroup
			for _, p := range patches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if status, body := call(t, "PATCH", p.p.url("/credentials/"+id), token, p.body); status != 200 {
						t.Errorf("PATCH %s: %d %s", p.body, status, body)
					}
				}()
			}
			wg.Wait()
			_, body := call(t, "GET", b.url("/credentials/"+id), token, "")
			got := decodeObj(t, body)
			acl, _ := got["acl"].([]any)
			if got["description"] != fmt.Sprintf("d%d", round) || got["metadata"] != fmt.Sprintf("m%d", round) ||
				len(acl) != 1 || acl[0] != fmt.Sprintf("bind:r%d.example.com", round) {
				t.Fatalf("round %d lost an update: %s", round, body)
			}
		}
	})
}

// While PostgreSQL is unreachable a replica answers API requests with a fast 503 and /readyz
// with 503 (while /healthz stays 200); when it is back, the same process recovers.
func TestReplicaDatabaseOutage(t *testing.T) {
	t.Parallel()
	dsn := testdb.Postgres(t)
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	p := startReplica(t, proxy.Redirect(dsn))
	token, _ := bootstrapToken(t, p.Stderr.String())
	id := createIPPolicy(t, p, token)
	ready := func() int {
		res, err := client.Get(p.url("/readyz"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if ready() != 200 {
		t.Fatal("not ready before the outage")
	}

	proxy.Down()
	start := time.Now()
	status, body := call(t, "GET", p.url("/ip_policies/"+id), token, "")
	if status != http.StatusServiceUnavailable || decodeObj(t, body)["error_code"] != "ERR_NGROK_9000" {
		t.Fatalf("during the outage: %d %s", status, body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the 503 took %v", d)
	}
	if status, body := call(t, "POST", p.url("/ip_policies"), token, "{}"); status != http.StatusServiceUnavailable {
		t.Fatalf("create during the outage: %d %s", status, body)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz during the outage: %d", got)
	}
	if res, err := client.Get(p.url("/healthz")); err != nil || res.StatusCode != 200 {
		t.Fatalf("/healthz during the outage: %v %v", err, res)
	}

	proxy.Up()
	deadline := time.Now().Add(15 * time.Second)
	for ready() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover after the outage")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, code := getIPPolicy(t, p, token, id); status != 200 {
		t.Fatalf("after the outage: %d %s", status, code)
	}
}

// Uniqueness holds across replicas: N concurrent creates of one domain name, one hostport and one
// route match, spread over both processes, have exactly one winner each; the others get 409.
func TestReplicasUniqueness(t *testing.T) {
	t.Parallel()
	forEngines(t, func(t *testing.T, engine string) {
		a, b, token := replicas(t, engine)
		race := func(what string, n int, do func(p *proc) (int, []byte)) {
			t.Helper()
			statuses := make([]int, n)
			bodies := make([][]byte, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					statuses[i], bodies[i] = do([]*proc{a, b}[i%2])
				}()
			}
			wg.Wait()
			wins := 0
			for i, s := range statuses {
				switch s {
				case 201:
					wins++
				case 409:
				default:
					t.Errorf("%s: status %d: %s", what, s, bodies[i])
				}
			}
			if wins != 1 {
				t.Fatalf("%s: %d of %d concurrent creates through two replicas succeeded, want exactly 1", what, wins, n)
			}
		}
		const n = 12
		race("domain", n, func(p *proc) (int, []byte) {
			return call(t, "POST", p.url("/reserved_domains"), token, `{"domain":"race.example.com"}`)
		})
		race("hostport", n, func(p *proc) (int, []byte) {
			return call(t, "POST", p.url("/edges/tls"), token, `{"hostports":["race.example.com:443"]}`)
		})
		status, body := call(t, "POST", a.url("/edges/https"), token, `{}`)
		if status != 201 {
			t.Fatalf("create HTTPS edge: %d %s", status, body)
		}
		edge := decodeObj(t, body)["id"].(string)
		race("route match", n, func(p *proc) (int, []byte) {
			return call(t, "POST", p.url("/edges/https/"+edge+"/routes"), token, `{"match_type":"path_prefix","match":"/race"}`)
		})
	})
}
