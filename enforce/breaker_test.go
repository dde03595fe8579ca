package enforce

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func breakerStatus(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	return rec.Code, rec.Header().Get("ngrok-error-code")
}

// TestBreaker walks the breaker through its states against the configured numbers: it does not
// trip below the volume threshold nor below the error share, trips at both, refuses for the
// tripped duration with 503 ERR_NGROK_3202 without reaching the upstream, lets one probe through
// (refusing the others meanwhile), trips again when the probe fails and closes when it succeeds.
func TestBreaker(t *testing.T) {
	clock := newFakeClock()
	b, err := NewBreaker(BreakerConfig{Tripped: 5 * time.Second, Window: 10 * time.Second, Buckets: 5, Volume: 4, Threshold: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	b.now = clock.now
	fail := true
	upstream := 0
	h := b.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream++
		if fail {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))

	// Three failures: below the volume threshold of 4, so no trip.
	for i := range 3 {
		if st, _ := breakerStatus(h); st != 502 {
			t.Fatalf("request %d: %d, want the upstream's 502", i, st)
		}
	}
	// A success makes 4 requests with 3 failures (75% >= 50%): the breaker trips.
	fail = false
	if st, _ := breakerStatus(h); st != 200 {
		t.Fatalf("fourth request: %d", st)
	}
	if st, code := breakerStatus(h); st != 503 || code != "ERR_NGROK_3202" {
		t.Fatalf("tripped: %d %q, want 503 ERR_NGROK_3202", st, code)
	}
	if upstream != 4 {
		t.Errorf("the upstream saw %d requests, want 4 (refused requests never reach it)", upstream)
	}
	// Still open just before the tripped duration ends.
	clock.add(5*time.Second - time.Millisecond)
	if st, _ := breakerStatus(h); st != 503 {
		t.Fatalf("before the tripped duration ends: %d", st)
	}

	// Half open: one probe goes through; while it runs, others are refused. It fails: open again.
	clock.add(time.Millisecond)
	fail = true
	var during int
	probeHandler := b.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream++
		during, _ = breakerStatus(h)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	if st, _ := breakerStatus(probeHandler); st != 500 {
		t.Fatalf("the probe: %d, want the upstream's 500", st)
	}
	if during != 503 {
		t.Errorf("a request during the probe: %d, want 503", during)
	}
	if st, code := breakerStatus(h); st != 503 || code != "ERR_NGROK_3202" {
		t.Fatalf("after a failed probe: %d %q", st, code)
	}
	// Another tripped duration, a successful probe: closed, with an empty window.
	clock.add(5 * time.Second)
	fail = false
	if st, _ := breakerStatus(h); st != 200 {
		t.Fatalf("the second probe: %d", st)
	}
	fail = true
	for i := range 3 {
		if st, _ := breakerStatus(h); st != 502 {
			t.Fatalf("closed again, request %d: %d (the old window was not cleared)", i, st)
		}
	}
	if st, _ := breakerStatus(h); st != 502 {
		t.Fatalf("the fourth failure reaches the upstream: %d", st)
	}
	if st, _ := breakerStatus(h); st != 503 {
		t.Fatalf("4 failures of 4 trip the breaker: %d", st)
	}
}

// TestBreakerWindow: failures older than the rolling window no longer count, and a share below
// the threshold does not trip.
func TestBreakerWindow(t *testing.T) {
	clock := newFakeClock()
	b, _ := NewBreaker(BreakerConfig{Tripped: time.Second, Window: 4 * time.Second, Buckets: 4, Volume: 4, Threshold: 0.75})
	b.now = clock.now
	status := 500
	h := b.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	for range 3 {
		breakerStatus(h)
	}
	// The three failures slide out of the 4 s window.
	clock.add(4 * time.Second)
	status = 200
	for range 3 {
		breakerStatus(h)
	}
	status = 500
	if st, _ := breakerStatus(h); st != 500 {
		t.Fatalf("1 failure of 4 in the window: %d", st)
	}
	if st, _ := breakerStatus(h); st != 500 {
		t.Fatalf("2 failures of 5 (40%% < 75%%) must not trip: %d", st)
	}
	// Within the window: 3 ok, then failures until 75%: 3 ok + 9 failures = 12 requests.
	for range 6 {
		breakerStatus(h)
	}
	if st, _ := breakerStatus(h); st != 500 {
		t.Fatalf("the request that makes 9 failures of 12 still gets its answer: %d", st)
	}
	if st, _ := breakerStatus(h); st != 503 {
		t.Fatalf("after 9 failures of 12 (75%%): %d, want 503", st)
	}
}

// TestBreakerCountsPanics: a handler that aborts (the proxy's http.ErrAbortHandler) counts as a
// failure, and 4xx answers do not.
func TestBreakerCountsPanics(t *testing.T) {
	b, _ := NewBreaker(BreakerConfig{Volume: 4, Threshold: 0.6})
	abortH := b.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	abort := func() {
		defer func() { _ = recover() }()
		breakerStatus(abortH)
	}
	notFound := b.Wrap(http.NotFoundHandler())
	breakerStatus(notFound)
	abort()
	breakerStatus(notFound)
	abort()
	// 2 failures of 4 (50% < 60%), then 2 of 5.
	if st, _ := breakerStatus(notFound); st != 404 {
		t.Fatalf("2 failures of 4 with a threshold of 60%% tripped the breaker: %d", st)
	}
	for range 3 {
		abort() // 5 failures of 8: 62.5%
	}
	if st, code := breakerStatus(notFound); st != 503 || code != "ERR_NGROK_3202" {
		t.Fatalf("after aborted requests: %d %q", st, code)
	}
}

// TestBreakerConfig: zero values take the documented defaults; out-of-range values are refused.
func TestBreakerConfig(t *testing.T) {
	b, err := NewBreaker(BreakerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := BreakerConfig{Tripped: 10 * time.Second, Window: 10 * time.Second, Buckets: 10, Volume: 20, Threshold: 0.5}
	if b.Config() != want {
		t.Errorf("defaults: %+v, want %+v", b.Config(), want)
	}
	for _, bad := range []BreakerConfig{{Threshold: 1.5}, {Threshold: -0.1}, {Buckets: 129}} {
		if _, err := NewBreaker(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
