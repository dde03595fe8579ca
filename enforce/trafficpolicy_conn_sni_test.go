package enforce

import (
	"net"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// TestConnPolicyServerName: on a TLS connection the on_tcp_connect rules read the server name
// its ClientHello asked for as conn.tls.sni, as the listener's terminate-tls rules do; a TCP
// connection has none.
func TestConnPolicyServerName(t *testing.T) {
	p, err := trafficpolicy.Parse(`{"on_tcp_connect":[{"expressions":["conn.tls.sni == 'closed.example.com'"],"actions":[{"type":"deny"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewConnPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	client, server := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}
	if cp.AllowTLS(client, server, "closed.example.com") {
		t.Error("the rule on the server name did not close its connection")
	}
	if !cp.AllowTLS(client, server, "open.example.com") || !cp.Allow(client, server) {
		t.Error("the rule on the server name closed another connection")
	}
}
