package main

import (
	"testing"
	"time"
)

// TestEndpointWaiter: only endpoints a handover announced or this process served are waited
// for; a wait that ends empty-handed forgets the endpoint, and serving it again brings it back.
func TestEndpointWaiter(t *testing.T) {
	w := newEndpointWaiter([]string{"https://moving.example.com", labeledKey("acct_a", map[string]string{"b": "2", "a": "1"})})
	if !w.expected("https://moving.example.com") || !w.expected(labeledKey("acct_a", map[string]string{"a": "1", "b": "2"})) {
		t.Error("an announced endpoint is not expected")
	}
	for _, k := range []string{"https://never.example.com", "tls://moving.example.com", labeledKey("acct_b", map[string]string{"a": "1", "b": "2"})} {
		if w.expected(k) {
			t.Errorf("%s is expected, though nobody served it", k)
		}
	}
	if got := w.limit("https://moving.example.com"); got != handoverWait {
		t.Errorf("an announced endpoint is waited for %v, want %v (its agent is on its way)", got, handoverWait)
	}
	w.served("https://served.example.com")
	if got := w.limit("https://served.example.com"); got != endpointWait {
		t.Errorf("an endpoint served here is waited for %v, want %v", got, endpointWait)
	}
	calls := 0
	none := func() (ingress string, ok bool) { calls++; return "", false }
	if got := await(w, "https://never.example.com", mover{}, none); got != "" || calls != 1 {
		t.Errorf("an unexpected endpoint: %q after %d lookups, want one lookup", got, calls)
	}
	calls = 0
	await(w, "https://moving.example.com", mover{}, none)
	if calls < 2 || w.expected("https://moving.example.com") {
		t.Errorf("an expected endpoint that did not come: %d lookups, still expected %v", calls, w.expected("https://moving.example.com"))
	}
	if got := await(w, "https://moving.example.com", mover{}, func() (string, bool) { return "bind", true }); got != "bind" || !w.expected("https://moving.example.com") {
		t.Errorf("an endpoint served again: %q, expected %v", got, w.expected("https://moving.example.com"))
	}
	if keys := w.recent(); len(keys) != 3 {
		t.Errorf("recent keys %q, want the three served or announced", keys)
	}
	if got := w.limit("https://moving.example.com"); got != endpointWait {
		t.Errorf("an announced endpoint once served again is waited for %v, want %v", got, endpointWait)
	}
}

// TestEndpointWaiterFollowsRows: a request waits for an endpoint past its fixed wait while the
// rows say its agent is moving, even for an endpoint this process never served (an agent that
// reconnected here and has yet to bind), and asks for fresh rows while it waits; it gives up
// once they stop saying so, and in any case after the move's bound.
func TestEndpointWaiterFollowsRows(t *testing.T) {
	w := newEndpointWaiter(nil)
	w.moveWait = 2 * time.Second
	start := time.Now()
	polls := 0
	back := func(after time.Duration) func() (string, bool) {
		return func() (string, bool) {
			if time.Since(start) < after {
				return "", false
			}
			return "bind", true
		}
	}
	always := mover{moving: func() bool { return true }, poll: func() { polls++ }}
	if got := await(w, "https://arriving.example.com", always, back(endpointWait+300*time.Millisecond)); got != "bind" {
		t.Errorf("an endpoint whose rows say it is moving, back after %v: %q, want its bind", endpointWait+300*time.Millisecond, got)
	}
	if polls == 0 {
		t.Error("the wait asked for no fresh view of the rows")
	}

	start = time.Now()
	until := mover{moving: func() bool { return time.Since(start) < time.Second }}
	if got := await(w, "https://gone.example.com", until, back(time.Hour)); got != "" {
		t.Errorf("an endpoint that never came back: %q", got)
	}
	if took := time.Since(start); took < time.Second || took > time.Second+500*time.Millisecond {
		t.Errorf("a wait whose rows stopped saying the agent moves after 1 s ended after %v", took)
	}

	start = time.Now()
	if got := await(w, "https://stuck.example.com", always, back(time.Hour)); got != "" {
		t.Errorf("an endpoint whose rows never cleared: %q", got)
	}
	if took := time.Since(start); took < w.moveWait || took > w.moveWait+500*time.Millisecond {
		t.Errorf("a wait whose rows never cleared ended after %v, want the bound %v", took, w.moveWait)
	}

	w.served("https://served.example.com")
	start = time.Now()
	if got := await(w, "https://served.example.com", mover{}, back(time.Hour)); got != "" {
		t.Errorf("an endpoint served here and gone: %q", got)
	}
	if took := time.Since(start); took > endpointWait+500*time.Millisecond {
		t.Errorf("an endpoint no row says is moving was waited for %v, want about %v", took, endpointWait)
	}
}
