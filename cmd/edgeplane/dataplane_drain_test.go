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
	if keys := w.recent(); len(keys) != 2 {
		t.Errorf("recent keys %q, want the two served or announced", keys)
	}
}
