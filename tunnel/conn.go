package tunnel

import (
	"net"
	"net/netip"

	"github.com/edgeplane/edgeplane/enforce"
)

// AllowConn runs the endpoint's connection stages on a public connection of a tcp or tls bind
// before any byte is carried: the IP restriction, then the on_tcp_connect rules of its traffic
// policy (with the connection's client and server addresses, and on a tls bind its ClientHello,
// hello: the server name it asked for and its fingerprint; nil on a tcp bind). False means close
// it unanswered, as for a connection its policy forwards to an internal endpoint (see
// DecideConn).
func (t *Tunnel) AllowConn(c net.Conn, hello *enforce.TLSHello) bool {
	v := t.DecideConn(c, hello)
	return v.Allow && v.Forward == nil
}

// DecideConn runs the endpoint's connection stages as AllowConn does and says what becomes of
// the connection: closed, carried to the agent, or handed to an internal endpoint of the
// account by the policy's forward-internal action.
func (t *Tunnel) DecideConn(c net.Conn, hello *enforce.TLSHello) enforce.ConnVerdict {
	client, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	if !t.chain.AllowConn(client.Addr().Unmap()) {
		return enforce.ConnVerdict{}
	}
	return t.policy.Decide(c.RemoteAddr(), c.LocalAddr(), hello)
}
