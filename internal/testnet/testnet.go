// Package testnet gives tests real loopback connections, so that each test package does not
// carry its own copy of the same listen, dial and accept steps.
package testnet

import (
	"net"
	"testing"
)

// TCPPair returns the two ends of a real loopback TCP connection, the accepted (server's) end
// first; both are closed when the test ends. The listener is closed once the one connection is
// accepted, so nothing else can reach it.
func TCPPair(t testing.TB) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}
