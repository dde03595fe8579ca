package ingress

import (
	"context"
	"net"
	"net/http"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/internal/testnet"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// internalConnEndpoint is an internal tcp endpoint as the listener sees it: its connection
// stages hand every connection to next (nil: carry it), and Dial records what it was asked.
type internalConnEndpoint struct {
	account   string
	next      *trafficpolicy.Target
	decisions int
	dialed    []string // client address and protocol of each Dial
}

func (e *internalConnEndpoint) ID() string            { return "tn_internal" }
func (e *internalConnEndpoint) AccountID() string     { return e.account }
func (e *internalConnEndpoint) Chain() *enforce.Chain { return nil }
func (e *internalConnEndpoint) DecideConn(net.Conn, *enforce.TLSHello) enforce.ConnVerdict {
	e.decisions++
	return enforce.ConnVerdict{Allow: true, Forward: e.next, Account: e.account}
}
func (e *internalConnEndpoint) HTTPHandler(build func() http.Handler) http.Handler { return build() }
func (e *internalConnEndpoint) Passthrough() bool                                  { return true }
func (e *internalConnEndpoint) TLSFor(plan.Hello) (plan.ConnTLS, error) {
	return plan.ConnTLS{}, nil
}
func (e *internalConnEndpoint) Dial(_ context.Context, client, proto, _ string, _ bool) (net.Conn, error) {
	e.dialed = append(e.dialed, client, proto)
	return nil, net.ErrClosed
}

// TestCarryForwarded: a connection forward-internal hands over reaches the account's internal
// endpoint only (another account's of the same name is not found), whose agent is dialed with
// the client's address; internal endpoints forwarding to each other end after maxConnForwards
// hands, dialing nothing.
func TestCarryForwarded(t *testing.T) {
	loop := trafficpolicy.Target{Scheme: "tcp", Host: "loop.internal", Port: 5432}
	db := trafficpolicy.Target{Scheme: "tcp", Host: "db.internal", Port: 5432}
	endpoints := map[string]*internalConnEndpoint{
		ep.InternalEndpointKey("acct_a", loop.Host, loop.Port): {account: "acct_a", next: &loop},
		ep.InternalEndpointKey("acct_a", db.Host, db.Port):     {account: "acct_a"},
	}
	s := New(Config{})
	s.SetLookup(func(proto, host string) Endpoint {
		if e := endpoints[host]; e != nil && proto == "tcp" {
			return e
		}
		return nil
	})
	if !s.InternalOnline("acct_a", db) || s.InternalOnline("acct_b", db) || s.InternalOnline("acct_a", trafficpolicy.Target{Scheme: "tls", Host: db.Host, Port: db.Port}) {
		t.Errorf("InternalOnline: A's tcp endpoint must be found for A only, and not as a tls one")
	}

	c, client := testnet.TCPPair(t)
	s.carryForwarded(c, enforce.ConnVerdict{Allow: true, Forward: &db, Account: "acct_a"}, nil, nil)
	e := endpoints[ep.InternalEndpointKey("acct_a", db.Host, db.Port)]
	if len(e.dialed) != 2 || e.dialed[0] != client.LocalAddr().String() || e.dialed[1] != "tcp" {
		t.Errorf("the internal endpoint's agent was dialed with %q, want the client's address %s and tcp", e.dialed, client.LocalAddr())
	}

	c, _ = testnet.TCPPair(t)
	s.carryForwarded(c, enforce.ConnVerdict{Allow: true, Forward: &loop, Account: "acct_a"}, nil, nil)
	l := endpoints[ep.InternalEndpointKey("acct_a", loop.Host, loop.Port)]
	if l.decisions != maxConnForwards || len(l.dialed) != 0 {
		t.Errorf("a forwarding loop: %d hands and %d dials, want %d hands and none", l.decisions, len(l.dialed)/2, maxConnForwards)
	}
}
