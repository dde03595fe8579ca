package main

import "testing"

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
	if got := await(w, "https://never.example.com", none); got != "" || calls != 1 {
		t.Errorf("an unexpected endpoint: %q after %d lookups, want one lookup", got, calls)
	}
	calls = 0
	await(w, "https://moving.example.com", none)
	if calls < 2 || w.expected("https://moving.example.com") {
		t.Errorf("an expected endpoint that did not come: %d lookups, still expected %v", calls, w.expected("https://moving.example.com"))
	}
	if got := await(w, "https://moving.example.com", func() (string, bool) { return "bind", true }); got != "bind" || !w.expected("https://moving.example.com") {
		t.Errorf("an endpoint served again: %q, expected %v", got, w.expected("https://moving.example.com"))
	}
	if keys := w.recent(); len(keys) != 3 {
		t.Errorf("recent keys %q, want the three served or announced", keys)
	}
	if got := w.limit("https://moving.example.com"); got != endpointWait {
		t.Errorf("an announced endpoint once served again is waited for %v, want %v", got, endpointWait)
	}
}
