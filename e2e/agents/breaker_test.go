package agents

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// flakyUpstream answers 500 while fail is set, else 200, and counts what it answered.
type flakyUpstream struct {
	fail atomic.Bool
	seen atomic.Int64
}

func (f *flakyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.seen.Add(1)
	if f.fail.Load() {
		http.Error(w, "upstream failure", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// TestEdgeCircuitBreaker: a route's circuit breaker with a volume threshold of 4 and an error
// threshold of 0.5 lets 2 failures and 2 successes through, then trips: requests get 503
// ERR_NGROK_3202 and never reach the agent; after the tripped duration one probe goes through;
// a failed probe trips it again, a successful one closes it with an empty window.
func TestEdgeCircuitBreaker(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("cb.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "cb")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	up := &flakyUpstream{}
	serveTunnel(t, tun, up)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "cb"}})
	ready := w.mustCreate("/backends/http_response", map[string]any{"body": "ready", "status_code": 200})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"cb.example.com:443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/x",
		"backend": map[string]any{"backend_id": group},
		"circuit_breaker": map[string]any{"tripped_duration": 1, "rolling_window": 10, "num_buckets": 10,
			"volume_threshold": 4, "error_threshold_percentage": 0.5}})
	// A second route, created after the first: once it answers, the plan holds the breaker too.
	// The breaker's route does not match /ready, so waiting never passes through the breaker: a
	// request it let through would stay in its window (the breaker outlives the plan's rebuilds)
	// and trip it one request early, and would reach the upstream too.
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "exact_path", "match": "/ready",
		"backend": map[string]any{"backend_id": ready}})
	c := w.httpsClient()
	eventually(t, 5*time.Second, "the edge is in the plan", func() bool {
		resp, err := c.Get("https://cb.example.com/ready")
		if err != nil {
			return false // the domain's certificate is not served yet
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(body) == "ready"
	})

	expect := func(what string, status int, code string, seen int64) {
		t.Helper()
		st, _, h := get(t, c, "https://cb.example.com/x")
		if st != status || h.Get("ngrok-error-code") != code || up.seen.Load() != seen {
			t.Fatalf("%s: %d %q with %d requests upstream, want %d %q with %d", what, st, h.Get("ngrok-error-code"), up.seen.Load(), status, code, seen)
		}
	}
	up.fail.Store(true)
	expect("failure 1 of 1", 500, "", 1)
	expect("failure 2 of 2", 500, "", 2)
	up.fail.Store(false)
	expect("3 requests, below the volume threshold", 200, "", 3)
	expect("4 requests, 2 failures: 50% trips the breaker", 200, "", 4)
	for range 5 {
		expect("tripped", 503, "ERR_NGROK_3202", 4)
	}

	// After the tripped duration (1 s), one probe: it fails, and the breaker trips again.
	up.fail.Store(true)
	eventually(t, 3*time.Second, "the probe after the tripped duration", func() bool {
		st, _, _ := tryGet(c, "https://cb.example.com/x")
		return st != 0 && st != 503
	})
	if up.seen.Load() != 5 {
		t.Fatalf("the half-open breaker let %d requests through, want one probe", up.seen.Load()-4)
	}
	expect("a failed probe trips it again", 503, "ERR_NGROK_3202", 5)

	// A successful probe closes it, with an empty window: 3 failures (below the volume of 4)
	// reach the upstream.
	up.fail.Store(false)
	eventually(t, 3*time.Second, "a successful probe", func() bool {
		st, _, _ := tryGet(c, "https://cb.example.com/x")
		return st == 200
	})
	if up.seen.Load() != 6 {
		t.Fatalf("%d requests upstream after the second probe, want 6", up.seen.Load())
	}
	up.fail.Store(true)
	expect("closed: failure 1", 500, "", 7)
	expect("closed: failure 2", 500, "", 8)
	expect("closed: failure 3", 500, "", 9)
}

// TestAgentCircuitBreaker: an agent's endpoint with ngrok-go's WithCircuitBreaker(0.5) gets the
// module's defaults otherwise: 20 failed requests trip it, the 21st is refused with 503
// ERR_NGROK_3202 without reaching the agent.
func TestAgentCircuitBreaker(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("cb.edgeplane.app"), config.WithCircuitBreaker(0.5)))
	if err != nil {
		t.Fatalf("listen with a circuit breaker: %v", err)
	}
	up := &flakyUpstream{}
	up.fail.Store(true)
	serveTunnel(t, tun, up)
	c := w.httpsClient()
	for i := range 20 {
		if st, _, _ := get(t, c, "https://cb.edgeplane.app/"); st != 500 {
			t.Fatalf("request %d: %d, want the agent's 500", i+1, st)
		}
	}
	st, _, h := get(t, c, "https://cb.edgeplane.app/")
	if st != 503 || h.Get("ngrok-error-code") != "ERR_NGROK_3202" || up.seen.Load() != 20 {
		t.Fatalf("after 20 failures: %d %q, %d requests upstream", st, h.Get("ngrok-error-code"), up.seen.Load())
	}
}
