package enforce

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/edgeplane/edgeplane/internal/ja4"
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
// close-connection closes the connection as deny does; set-vars sets variables for the later
// rules of the phase; log writes a record to the data plane's policy log. NewConnPolicy refuses
// a document with rules in the HTTP phases (ngrok's TLS and TCP endpoints have none) or with any
// other action, so the edge fails closed (and the bind is refused) naming what it cannot apply.
// An expression or action that fails to evaluate closes the connection.
type ConnPolicy struct {
	rules []connRule
	opts  PolicyOptions
	// ja4 is set when some expression or interpolation of the document reads
	// conn.tls.ja4_fingerprint: only then does Decide fingerprint a connection's ClientHello.
	ja4 bool
}

// TLSHello is what the on_tcp_connect phase reads of a TLS connection's ClientHello, which the
// listener has read when the phase runs (a nil *TLSHello is a TCP connection's).
type TLSHello struct {
	// ServerName is the name it asked for, lowercase (conn.tls.sni).
	ServerName string
	// Info is the parsed ClientHello, fingerprinted for conn.tls.ja4_fingerprint only when the
	// policy reads it; nil when the caller has none (the fingerprint then fails to evaluate).
	Info *tls.ClientHelloInfo
}

// helloConn is the connection of the on_tcp_connect phase of a TLS or TCP edge or endpoint, for
// conn.tls.ja4_fingerprint: the phase runs before any byte is carried, so it has no served
// certificate (the handshake is not done) and no bytes (read as 0 there anyway).
type helloConn struct {
	ja4   string
	known bool
}

func (helloConn) ServedCertificate(string) *x509.Certificate { return nil }
func (helloConn) Bytes() (in, out int64, counted bool)       { return 0, 0, true }
func (h helloConn) JA4() (string, bool)                      { return h.ja4, h.known }

// connOfHello is the connection the phase's rules read conn.tls.ja4_fingerprint from: "" on a
// TCP connection (no TLS, as on plain HTTP), the ClientHello's fingerprint on a TLS one.
func connOfHello(hello *TLSHello) trafficpolicy.Conn {
	switch {
	case hello == nil:
		return helloConn{known: true}
	case hello.Info == nil:
		return helloConn{}
	}
	return helloConn{ja4: ja4.Fingerprint(hello.Info), known: true}
}

// connRule is an on_tcp_connect rule with its actions made ready.
type connRule struct {
	rule    *trafficpolicy.Rule
	actions []connFunc
	// forwards holds, at the index of each forward-internal action, what picks its internal
	// endpoint (nil at every other index).
	forwards []forwardFunc
}

// ConnVerdict is what the on_tcp_connect phase decided on a connection.
type ConnVerdict struct {
	// Allow is false when the connection is to be closed unanswered.
	Allow bool
	// Forward, when set (with Allow), is the internal endpoint of Account (the policy's) a
	// forward-internal action hands the connection to, in place of the policy's own endpoint
	// or backend.
	Forward *trafficpolicy.Target
	Account string
}

// connFunc is an action of on_tcp_connect made ready: it reports whether the connection may go
// on; an error closes it too.
type connFunc func(vars map[string]any, client netip.Addr) (bool, error)

// connBuilder makes an action of on_tcp_connect ready from its decoded configuration.
type connBuilder func(a *trafficpolicy.Action, cfg any, o PolicyOptions, results bool) (connFunc, error)

// connActions are the actions edgeplane applies in on_tcp_connect, one entry per type,
// registered from this file or the action's own; a type without one fails the build, naming it.
var connActions = map[string]connBuilder{}

func registerConnAction(typ string, f connBuilder) {
	if _, dup := connActions[typ]; dup {
		panic("enforce: connection action " + typ + " registered twice")
	}
	connActions[typ] = f
}

// NewConnPolicy makes the connection stage of a parsed document with no options (see
// NewConnPolicyWith).
func NewConnPolicy(p *trafficpolicy.Policy) (*ConnPolicy, error) {
	return NewConnPolicyWith(p, PolicyOptions{})
}

// NewConnPolicyWith makes the connection stage of a parsed document with what its actions need
// beyond it (the policy log, the endpoint); an error names the first part of it edgeplane does
// not apply on TLS and TCP edges and binds.
func NewConnPolicyWith(p *trafficpolicy.Policy, o PolicyOptions) (*ConnPolicy, error) {
	for _, ph := range []struct {
		name  string
		rules []*trafficpolicy.Rule
	}{{trafficpolicy.OnHTTPRequest, p.OnHTTPRequest}, {trafficpolicy.OnHTTPResponse, p.OnHTTPResponse},
		{trafficpolicy.OnEventStreamMessage, p.OnEventStreamMessage}} {
		if len(ph.rules) > 0 {
			return nil, fmt.Errorf("%s does not apply to TLS and TCP endpoints and edges (only on_tcp_connect does)", ph.name)
		}
	}
	if err := p.Unavailable(); err != nil {
		return nil, err
	}
	cp, err := newConnPolicy(p.OnTCPConnect, o, p.Reads("actions"), "tcp")
	if err != nil {
		return nil, err
	}
	cp.ja4 = p.Reads("conn.tls.ja4_fingerprint")
	return cp, nil
}

// newConnPolicy makes the on_tcp_connect rules ready to run, for an endpoint or edge of the
// protocol family ("http" for http and https, "tcp" for tcp and tls: forward-internal's targets
// must share it).
func newConnPolicy(rules []*trafficpolicy.Rule, o PolicyOptions, results bool, family string) (*ConnPolicy, error) {
	cp := &ConnPolicy{opts: o}
	for _, r := range rules {
		cr := connRule{rule: r}
		for _, a := range r.Actions {
			if a.Type == "forward-internal" && trafficpolicy.Implemented(a.Type) {
				cfg, err := a.Decode()
				if err != nil {
					return nil, err
				}
				fwd, err := newConnForward(a, cfg.(*trafficpolicy.ForwardInternalConfig), o, family)
				if err != nil {
					return nil, err
				}
				cr.actions = append(cr.actions, nil)
				cr.forwards = append(cr.forwards, fwd)
				continue
			}
			build, ok := connActions[a.Type]
			if !ok || !trafficpolicy.Implemented(a.Type) {
				return nil, notApplied(a, trafficpolicy.OnTCPConnect)
			}
			cfg, err := a.Decode()
			if err != nil {
				return nil, err
			}
			f, err := build(a, cfg, o, results)
			if err != nil {
				return nil, err
			}
			cr.actions = append(cr.actions, f)
			cr.forwards = append(cr.forwards, nil)
		}
		cp.rules = append(cp.rules, cr)
	}
	forgetConfigs(rules)
	return cp, nil
}

func init() {
	registerConnAction("deny", func(*trafficpolicy.Action, any, PolicyOptions, bool) (connFunc, error) {
		return func(map[string]any, netip.Addr) (bool, error) { return false, nil }, nil
	})
	registerConnAction("close-connection", func(*trafficpolicy.Action, any, PolicyOptions, bool) (connFunc, error) {
		return func(map[string]any, netip.Addr) (bool, error) { return false, nil }, nil
	})
	registerConnAction("restrict-ips", func(a *trafficpolicy.Action, cfg any, _ PolicyOptions, _ bool) (connFunc, error) {
		c := cfg.(*trafficpolicy.RestrictIPsConfig)
		if len(c.IPPolicies) > 0 {
			return nil, fmt.Errorf("%s: ip_policies in the restrict-ips action are not applied yet", a.Path)
		}
		f, err := NewIPFilter(c.Allow, c.Deny)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", a.Path, err)
		}
		if c.Enforce != nil && !*c.Enforce {
			return func(map[string]any, netip.Addr) (bool, error) { return true, nil }, nil
		}
		return func(_ map[string]any, client netip.Addr) (bool, error) { return f.AllowConn(client), nil }, nil
	})
	registerConnAction("set-vars", func(a *trafficpolicy.Action, cfg any, _ PolicyOptions, _ bool) (connFunc, error) {
		set, err := compileSetVars(a, cfg.(*trafficpolicy.SetVarsConfig))
		if err != nil {
			return nil, err
		}
		return func(vars map[string]any, _ netip.Addr) (bool, error) { return true, set(vars) }, nil
	})
	registerConnAction("log", func(a *trafficpolicy.Action, cfg any, o PolicyOptions, results bool) (connFunc, error) {
		rec, err := compileLog(a, cfg.(*trafficpolicy.LogConfig), o, results)
		if err != nil {
			return nil, err
		}
		return func(vars map[string]any, _ netip.Addr) (bool, error) { return true, rec(vars) }, nil
	})
}

// Allow runs the phase on a connection from client to server (the listener's address), just
// accepted, for a caller that cannot forward it: a connection a forward-internal action hands to
// an internal endpoint is refused here. A nil policy allows every connection.
func (cp *ConnPolicy) Allow(client, server net.Addr) bool {
	v := cp.Decide(client, server, nil)
	return v.Allow && v.Forward == nil
}

// AllowTLS is Allow for a TLS connection whose ClientHello asked for serverName: the rules'
// conn.tls.sni reads it, as terminate-tls's rules do when the listener applies them.
func (cp *ConnPolicy) AllowTLS(client, server net.Addr, serverName string) bool {
	v := cp.Decide(client, server, &TLSHello{ServerName: serverName})
	return v.Allow && v.Forward == nil
}

// Decide runs the phase on a connection from client to server (the listener's address), just
// accepted: closed, carried, or handed to an internal endpoint. hello is a TLS connection's
// ClientHello (conn.tls.sni, conn.tls.ja4_fingerprint), nil for a TCP connection. A nil policy
// allows every connection.
func (cp *ConnPolicy) Decide(client, server net.Addr, hello *TLSHello) ConnVerdict {
	if cp == nil || len(cp.rules) == 0 {
		return ConnVerdict{Allow: true}
	}
	sni := ""
	if hello != nil {
		sni = hello.ServerName
	}
	var conn trafficpolicy.Conn
	if cp.ja4 {
		conn = connOfHello(hello) // only for a policy reading it: the others pay nothing
	}
	return cp.decide(client.String(), server.String(), sni, time.Now(), conn)
}

// allow is decide's verdict as Allow gives it.
func (cp *ConnPolicy) allow(client, server, sni string, start time.Time) bool {
	v := cp.decide(client, server, sni, start, nil)
	return v.Allow && v.Forward == nil
}

// decide runs the phase on the addresses as host:port strings, for a connection accepted at
// start whose ClientHello asked for sni ("" for none, or a TCP connection). A forward-internal
// action that finds its endpoint ends the phase (no later action runs); one that does not closes
// the connection (on_error halt) or lets the next actions run (continue). conn, when not nil, is
// what conn.tls.ja4_fingerprint reads.
func (cp *ConnPolicy) decide(client, server, sni string, start time.Time, conn trafficpolicy.Conn) ConnVerdict {
	vars := trafficpolicy.ConnVars(client, server)
	trafficpolicy.SetConnStart(vars, start)
	trafficpolicy.AtConnect(vars)
	if sni != "" {
		trafficpolicy.SetServerName(vars, sni)
	}
	if conn != nil {
		trafficpolicy.SetConn(vars, conn)
	}
	if cp.opts.Endpoint != nil {
		trafficpolicy.SetEndpoint(vars, cp.opts.Endpoint)
	}
	addr, _ := netip.ParseAddrPort(client)
	for _, cr := range cp.rules {
		ok, err := cr.rule.Match(vars)
		if err != nil {
			return ConnVerdict{}
		}
		if !ok {
			continue
		}
		for i, act := range cr.actions {
			if fwd := cr.forwards[i]; fwd != nil {
				target, goOn := fwd(vars)
				switch {
				case target != nil:
					return ConnVerdict{Allow: true, Forward: target, Account: cp.opts.Endpoint.Account}
				case !goOn:
					return ConnVerdict{}
				}
				continue
			}
			if ok, err := act(vars, addr.Addr().Unmap()); !ok || err != nil {
				return ConnVerdict{}
			}
		}
	}
	return ConnVerdict{Allow: true}
}
