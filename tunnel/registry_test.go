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

// TestRegistryOneAccountPerName: the tunnels serving a name on a replica belong to one account.
// Another account's bind of it is refused whatever it asks: with pooling on both sides (which
// would otherwise share the endpoint's traffic with a stranger), or on another protocol of the
// same hostname; the account's own pooled binds and its other protocols are taken.
func TestRegistryOneAccountPerName(t *testing.T) {
	r := NewRegistry()
	a := &session{cred: store.AgentCredential{AccountID: "acct_a"}}
	b := &session{cred: store.AgentCredential{AccountID: "acct_b"}}
	for _, tun := range []*Tunnel{
		{sess: a, proto: "https", host: "pool.example.com", pooled: true},
		{sess: a, proto: "tls", host: "pool-tls.example.com", pooled: true},
		{sess: a, proto: "tcp", addr: "127.0.0.1:20001", pooled: true},
	} {
		if conflict, _ := r.add(tun); conflict != "" {
			t.Fatalf("A's first bind of %s: %q", tun.key(), conflict)
		}
	}
	cases := []struct {
		name string
		tun  *Tunnel
		want string
	}{
		{"B pooled on A's pooled https", &Tunnel{sess: b, proto: "https", host: "pool.example.com", pooled: true}, "account"},
		{"B pooled on A's pooled tls", &Tunnel{sess: b, proto: "tls", host: "pool-tls.example.com", pooled: true}, "account"},
		{"B pooled on A's pooled tcp", &Tunnel{sess: b, proto: "tcp", addr: "127.0.0.1:20001", pooled: true}, "account"},
		{"B unpooled on A's name", &Tunnel{sess: b, proto: "https", host: "pool.example.com"}, "account"},
		{"B's http on A's https name", &Tunnel{sess: b, proto: "http", host: "pool.example.com"}, "account"},
		{"B's tls on A's https name", &Tunnel{sess: b, proto: "tls", host: "pool.example.com", pooled: true}, "account"},
		{"A pooled again", &Tunnel{sess: a, proto: "https", host: "pool.example.com", pooled: true}, ""},
		{"A's http on its https name", &Tunnel{sess: a, proto: "http", host: "pool.example.com"}, ""},
		{"B on a free name", &Tunnel{sess: b, proto: "https", host: "other.example.com", pooled: true}, ""},
	}
	for _, c := range cases {
		if conflict, _ := r.add(c.tun); conflict != c.want {
			t.Errorf("%s: %q, want %q", c.name, conflict, c.want)
		}
	}
	if got := r.Endpoint("https", "pool.example.com"); got == nil || got.AccountID() != "acct_a" {
		t.Fatalf("the endpoint is not A's")
	}
	for range 10 {
		if got := r.Endpoint("https", "pool.example.com"); got.AccountID() != "acct_a" {
			t.Fatalf("a request of A's pooled endpoint went to %s", got.AccountID())
		}
	}
}

// TestPooledBindsShareConnections: each of an endpoint's pooled binds gets connections that make
// one request each, although the listeners look the endpoint up twice per such connection (its
// TLS settings in the handshake, then the request's route): a turn counted per lookup sent all
// of them to one bind.
func TestPooledBindsShareConnections(t *testing.T) {
	g := &Gateway{Registry: NewRegistry()}
	sess := &session{cred: store.AgentCredential{AccountID: "acct_1"}}
	a := &Tunnel{sess: sess, proto: "https", host: "pool.example.com", pooled: true}
	b := &Tunnel{sess: sess, proto: "https", host: "pool.example.com", pooled: true}
	for _, tun := range []*Tunnel{a, b} {
		if conflict, _ := g.Registry.add(tun); conflict != "" {
			t.Fatal(conflict)
		}
	}
	served := map[Endpoint]int{}
	for range 200 {
		g.Endpoint("https", "pool.example.com") // the handshake's look
		served[g.Endpoint("https", "pool.example.com")]++
	}
	if served[a] < 40 || served[b] < 40 {
		t.Fatalf("200 one-request connections went %d to one bind and %d to the other", served[a], served[b])
	}
}
