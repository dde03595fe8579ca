package trafficpolicy

import (
	"slices"
	"strings"
)

// TLSSelector is a policy's terminate-tls actions, as the listener applies them: each one's
// settings with the rule it is in, evaluated when the client's ClientHello has been read and
// before the handshake is answered. A rule's expressions can then read only what is known at
// that moment (HelloVariables); the actions of the rules that match run in order, so the last
// matching terminate-tls sets the handshake, and none matching leaves the endpoint's own TLS.
type TLSSelector struct {
	choices []TLSChoice
}

// TLSChoice is one terminate-tls action: its rule and its settings.
type TLSChoice struct {
	Rule     *Rule
	Settings TLSSettings
}

// helloVariables are the variables known when a ClientHello has been read: the connection's
// addresses and start, the server name asked for, the endpoint and the time. What the handshake
// or the rules before decide (conn.tls.version, the client's certificate, vars, actions) is not.
var helloVariables = map[string]bool{
	"conn.client_ip": true, "conn.client_port": true, "conn.server_ip": true, "conn.server_port": true,
	"conn.ts.start": true, "conn.tls.sni": true, "time.now": true,
}

// knownAtHello reports whether an expression reading the variable name can be evaluated when
// the ClientHello has been read.
func knownAtHello(name string) bool {
	return helloVariables[name] || strings.HasPrefix(name, "endpoint.")
}

// TerminateTLS returns the terminate-tls actions of a policy's on_tcp_connect phase (nil when it
// has none). A rule holding one may have expressions reading only what is known at the
// ClientHello (the client's and server's addresses, conn.ts.start, conn.tls.sni, endpoint.*,
// time.now); one reading anything else is refused, naming the variable, rather than applied to
// connections its expressions would have excluded. A rule has at most one terminate-tls.
func TerminateTLS(p *Policy) (*TLSSelector, error) {
	var sel *TLSSelector
	for _, r := range p.OnTCPConnect {
		if err := checkTerminateTLSRule(r); err != nil {
			return nil, err
		}
		for _, a := range r.Actions {
			if a.Type != "terminate-tls" {
				continue
			}
			cfg, err := a.Decode()
			if err != nil {
				return nil, err
			}
			s, err := cfg.(*TerminateTLSConfig).settings(a.Path + ".config")
			if err != nil {
				return nil, err
			}
			if sel == nil {
				sel = &TLSSelector{}
			}
			sel.choices = append(sel.choices, TLSChoice{Rule: r, Settings: s})
		}
	}
	return sel, nil
}

// checkTerminateTLSRule refuses a rule with terminate-tls that cannot be applied at the
// ClientHello: two of them, or expressions reading what is not known then.
func checkTerminateTLSRule(r *Rule) error {
	seen := false
	for _, a := range r.Actions {
		if a.Type != "terminate-tls" {
			continue
		}
		if seen {
			return errorf(a.Path, "a rule has one terminate-tls action")
		}
		seen = true
		for _, name := range r.reads {
			if !knownAtHello(name) {
				return errorf(r.Path+".expressions", "terminate-tls is applied when the ClientHello is read, before %s is known: its rule's expressions may read only conn.client_ip, conn.client_port, conn.server_ip, conn.server_port, conn.ts.start, conn.tls.sni, endpoint.* and time.now", name)
			}
		}
	}
	return nil
}

// Choices are the selector's actions, in the document's order.
func (t *TLSSelector) Choices() []TLSChoice { return slices.Clone(t.choices) }

// Fixed returns the settings when they do not depend on the connection (one action, in a rule
// without expressions), else nil.
func (t *TLSSelector) Fixed() *TLSSettings {
	if t == nil || len(t.choices) != 1 || len(t.choices[0].Rule.Expressions) > 0 {
		return nil
	}
	return &t.choices[0].Settings
}

// Choose returns the index of the action whose settings a connection with the variables vars
// (ConnVars, SetConnStart, SetServerName, SetEndpoint) gets: the last whose rule matches, or -1
// when none does. An expression that fails to evaluate is an error: the handshake is refused
// rather than given settings its rule may not have meant.
func (t *TLSSelector) Choose(vars map[string]any) (int, error) {
	chosen := -1
	if t == nil {
		return chosen, nil
	}
	for i, c := range t.choices {
		ok, err := c.Rule.Match(vars)
		if err != nil {
			return -1, err
		}
		if ok {
			chosen = i
		}
	}
	return chosen, nil
}
