package tunnel

import (
	"testing"

	"github.com/edgeplane/edgeplane/store"
)

// TestRegistryTunnels: the count of online tunnels follows every bind the registry takes (each
// bind of a pooled endpoint, labeled tunnels) and every removal, and nothing it refuses or
// removes twice.
func TestRegistryTunnels(t *testing.T) {
	r := NewRegistry()
	sess := &session{cred: store.AgentCredential{AccountID: "acct_1"}}
	want := func(n int, after string) {
		t.Helper()
		if got := r.Tunnels(); got != n {
			t.Fatalf("after %s: Tunnels() = %d, want %d", after, got, n)
		}
	}
	want(0, "nothing")
	a := &Tunnel{sess: sess, proto: "http", host: "a.example.com"}
	pool1 := &Tunnel{sess: sess, proto: "https", host: "pool.example.com", pooled: true}
	pool2 := &Tunnel{sess: sess, proto: "https", host: "pool.example.com", pooled: true}
	labeled := &Tunnel{sess: sess, labels: map[string]string{"app": "x"}}
	for _, tun := range []*Tunnel{a, pool1, pool2, labeled} {
		if conflict, _ := r.add(tun); conflict != "" {
			t.Fatalf("add: %q", conflict)
		}
	}
	want(4, "four binds")
	if conflict, _ := r.add(&Tunnel{sess: sess, proto: "http", host: "a.example.com"}); conflict != "online" {
		t.Fatalf("a second bind of an online endpoint: %q, want online", conflict)
	}
	want(4, "a refused bind")
	r.remove(pool1)
	r.remove(labeled)
	want(2, "two removals")
	if r.remove(pool1) || r.remove(labeled) {
		t.Fatal("a tunnel removed twice was found again")
	}
	want(2, "removing them again")
	r.remove(a)
	r.remove(pool2)
	want(0, "removing the rest")
}
