package enforce

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// ConnPolicy is the traffic_policy module of a TLS or TCP edge, and of an agent's tls or tcp
// bind: the rules of the document's on_tcp_connect phase decide on each connection before any
// byte is carried, with the connection's variables (conn.client_ip, conn.client_port,
// conn.server_ip, conn.server_port). A rule runs its actions when every one of its expressions
// is true (a rule without expressions always runs): deny closes the connection, restrict-ips
// closes it when its CIDRs do not admit the client (enforce: false only reports). A connection
// no rule closes is carried.
//
// NewConnPolicy refuses a document with rules in the HTTP phases (ngrok's TLS and TCP endpoints
// have none) or with any other action, so the edge fails closed (and the bind is refused) naming
// what it cannot apply. An expression that fails to evaluate closes the connection.
type ConnPolicy struct {
	rules []connRule
}

// connRule is an on_tcp_connect rule with its actions made ready: each reports whether the
// connection may go on.
type connRule struct {
	rule    *trafficpolicy.Rule
	actions []func(client netip.Addr) bool
}

// NewConnPolicy makes the connection stage of a parsed document; an error names the first part
// of it edgeplane does not apply on TLS and TCP edges and binds.
func NewConnPolicy(p *trafficpolicy.Policy) (*ConnPolicy, error) {
	for _, ph := range []struct {
		name  string
		rules []*trafficpolicy.Rule
	}{{trafficpolicy.OnHTTPRequest, p.OnHTTPRequest}, {trafficpolicy.OnHTTPResponse, p.OnHTTPResponse}} {
		if len(ph.rules) > 0 {
			return nil, fmt.Errorf("%s does not apply to TLS and TCP endpoints and edges (only on_tcp_connect does)", ph.name)
		}
	}
	return newConnPolicy(p.OnTCPConnect)
}

// newConnPolicy makes the on_tcp_connect rules ready to run.
func newConnPolicy(rules []*trafficpolicy.Rule) (*ConnPolicy, error) {
	cp := &ConnPolicy{}
	for _, r := range rules {
		cr := connRule{rule: r}
		for _, a := range r.Actions {
			f, err := connAction(a)
			if err != nil {
				return nil, err
			}
			cr.actions = append(cr.actions, f)
		}
		cp.rules = append(cp.rules, cr)
	}
	forgetConfigs(rules)
	return cp, nil
}

// connAction makes an action of on_tcp_connect ready to run.
func connAction(a *trafficpolicy.Action) (func(netip.Addr) bool, error) {
	if a.Type != "deny" && a.Type != "restrict-ips" {
		return nil, notApplied(a, trafficpolicy.OnTCPConnect)
	}
	cfg, err := a.Decode()
	if err != nil {
		return nil, err
	}
	switch c := cfg.(type) {
	case *trafficpolicy.DenyConfig:
		return func(netip.Addr) bool { return false }, nil
	case *trafficpolicy.RestrictIPsConfig:
		if len(c.IPPolicies) > 0 {
			return nil, fmt.Errorf("%s: ip_policies in the restrict-ips action are not applied yet", a.Path)
		}
		f, err := NewIPFilter(c.Allow, c.Deny)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", a.Path, err)
		}
		if c.Enforce != nil && !*c.Enforce {
			return func(netip.Addr) bool { return true }, nil
		}
		return f.AllowConn, nil
	}
	return nil, notApplied(a, trafficpolicy.OnTCPConnect)
}

// Allow runs the phase on a connection from client to server (the listener's address). A nil
// policy allows every connection.
func (cp *ConnPolicy) Allow(client, server net.Addr) bool {
	if cp == nil || len(cp.rules) == 0 {
		return true
	}
	return cp.allow(client.String(), server.String())
}

// allow runs the phase on the addresses as host:port strings.
func (cp *ConnPolicy) allow(client, server string) bool {
	vars := trafficpolicy.ConnVars(client, server)
	addr, _ := netip.ParseAddrPort(client)
	for _, cr := range cp.rules {
		ok, err := cr.rule.Match(vars)
		if err != nil {
			return false
		}
		if !ok {
			continue
		}
		for _, act := range cr.actions {
			if !act(addr.Addr().Unmap()) {
				return false
			}
		}
	}
	return true
}
