package plan

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// Hello is what the listener knows of a public connection once its ClientHello is read: what a
// traffic policy's terminate-tls rules may decide on.
type Hello struct {
	Client, Server net.Addr
	// ServerName is the ClientHello's server name (conn.tls.sni).
	ServerName string
	// Start is when the connection was accepted (conn.ts.start); zero for now.
	Start time.Time
}

// ConnTLS is the TLS a connection gets: what is asked of the client, the certificate presented
// (nil: the host's) and, on a tls endpoint or edge, whether it is terminated here.
type ConnTLS struct {
	Policy    TLSPolicy
	Cert      *tls.Certificate
	Terminate bool
}

// TLSSelector applies a traffic policy's terminate-tls actions (trafficpolicy.TerminateTLS) to
// connections: each action's settings are made ready once, and each ClientHello picks the one
// its rules choose.
type TLSSelector struct {
	sel      *trafficpolicy.TLSSelector
	conns    []ConnTLS
	endpoint *trafficpolicy.Endpoint
	// Digest identifies the actions' settings and rules: binds pooled on one endpoint must ask
	// the same of their clients, since a handshake cannot know which of them will serve it.
	Digest [32]byte
}

// NewTLSSelector makes a policy's terminate-tls actions ready (nil when it has none); endpoint is
// what endpoint.* reads, and may be filled in before the first connection.
func NewTLSSelector(p *trafficpolicy.Policy, endpoint *trafficpolicy.Endpoint) (*TLSSelector, error) {
	sel, err := trafficpolicy.TerminateTLS(p)
	if err != nil || sel == nil {
		return nil, err
	}
	s := &TLSSelector{sel: sel, endpoint: endpoint}
	h := sha256.New()
	for _, c := range sel.Choices() {
		h.Write([]byte("terminate-tls\n"))
		for _, e := range c.Rule.Expressions {
			h.Write([]byte(e + "\n"))
		}
		t := c.Settings
		_ = binary.Write(h, binary.BigEndian, []uint16{t.MinVersion, t.MaxVersion, uint16(t.ClientAuth)})
		ct := ConnTLS{Cert: t.Certificate, Terminate: true,
			Policy: TLSPolicy{MinVersion: t.MinVersion, MaxVersion: t.MaxVersion, ClientAuth: t.ClientAuth}}
		if t.Certificate != nil {
			for _, der := range t.Certificate.Certificate {
				h.Write(der)
			}
		}
		for _, ca := range t.ClientCAs {
			ct.Policy.AddClientCA(ca)
			h.Write(ca.Raw)
		}
		ct.Policy.MutualTLS = t.MutualTLS
		s.conns = append(s.conns, ct)
	}
	h.Sum(s.Digest[:0])
	return s, nil
}

// Fixed returns the settings every connection gets when they do not depend on the connection.
func (s *TLSSelector) Fixed() (ConnTLS, bool) {
	if s == nil || s.sel.Fixed() == nil {
		return ConnTLS{}, false
	}
	return s.conns[0], true
}

// Choose returns the settings of the terminate-tls a connection's rules choose; false when
// none applies (the endpoint's own TLS then holds). An expression that fails to evaluate is an
// error, and the handshake is to be refused.
func (s *TLSSelector) Choose(h Hello) (ConnTLS, bool, error) {
	if s == nil {
		return ConnTLS{}, false, nil
	}
	if c, ok := s.Fixed(); ok {
		return c, true, nil
	}
	var client, server string
	if h.Client != nil {
		client = h.Client.String()
	}
	if h.Server != nil {
		server = h.Server.String()
	}
	vars := trafficpolicy.ConnVars(client, server)
	if !h.Start.IsZero() {
		trafficpolicy.SetConnStart(vars, h.Start)
	}
	trafficpolicy.SetServerName(vars, h.ServerName)
	if s.endpoint != nil {
		trafficpolicy.SetEndpoint(vars, s.endpoint)
	}
	i, err := s.sel.Choose(vars)
	if err != nil || i < 0 {
		return ConnTLS{}, false, err
	}
	return s.conns[i], true, nil
}

// AsksClientCerts reports whether one of the actions asks clients for a certificate.
func (s *TLSSelector) AsksClientCerts() bool {
	for _, c := range s.conns {
		if c.Policy.MutualTLS {
			return true
		}
	}
	return false
}

// ConnTLS is the TLS of a connection to the edge, by its ClientHello: the tls_termination and
// mutual_tls modules' when no terminate-tls of its traffic policy applies; else the action's,
// which terminates the connection here (whatever the module's terminate_at), with the module's
// minimum version when it is the higher one and the mutual_tls module's client certificates
// (an edge where both ask for client certificates fails closed when it is built). An error
// refuses the handshake.
func (e *TLSEdge) ConnTLS(h Hello) (ConnTLS, error) {
	own := ConnTLS{Policy: e.TLS, Terminate: e.Terminate}
	c, ok, err := e.Select.Choose(h)
	if err != nil || !ok {
		return own, err
	}
	return withModules(e.TLS, c), nil
}

// withModules applies the edge's modules beside a terminate-tls action's settings c.
func withModules(m TLSPolicy, c ConnTLS) ConnTLS {
	c.Policy.MinVersion = max(c.Policy.MinVersion, m.MinVersion)
	if m.MutualTLS {
		c.Policy.MutualTLS, c.Policy.ClientAuth, c.Policy.ClientCAs, c.Policy.roots = true, m.ClientAuth, m.ClientCAs, m.roots
	}
	c.Terminate = true
	return c
}

// edgeTLSSelector reads the terminate-tls actions of a TLS edge's traffic_policy (nil when it
// has none); the edge fails closed (e.Unenforced) when they cannot apply.
func (b *builder) edgeTLSSelector(e *Edge, hostports []string, m *ep.EndpointTrafficPolicy, mutualTLS bool) *TLSSelector {
	if m == nil || !m.Enabled || e.Unenforced != "" || !strings.Contains(m.Value, "terminate-tls") {
		return nil
	}
	sel, err := b.tlsSelector(e.ID, "tls", hostports, m.Value)
	if err == nil && sel != nil && mutualTLS && sel.AsksClientCerts() {
		err = errors.New("terminate-tls asks for client certificates and the mutual_tls module is on: give one of them")
	}
	if err == nil {
		return sel
	}
	e.Unenforced = fmt.Sprintf("traffic_policy (%v)", err)
	return nil
}

// selectorKey names an edge's terminate-tls rules: its endpoint.* variables are the edge's.
type selectorKey struct {
	account, edge, proto, hostports string
	sum                             [sha256.Size]byte
}

// errNoSelector stands for a document without terminate-tls in the registry, which keeps
// selectors only.
var errNoSelector = errors.New("no terminate-tls")

// tlsSelector returns the terminate-tls rules of an edge's document (nil when it has none),
// compiled once while a plan uses them.
func (b *builder) tlsSelector(edgeID, proto string, hostports []string, doc string) (*TLSSelector, error) {
	k := selectorKey{account: b.s.Account, edge: edgeID, proto: proto, hostports: strings.Join(hostports, ","), sum: sha256.Sum256([]byte(doc))}
	sel, err := b.live.selectors.get(k, func() (*TLSSelector, error) {
		p, err := ep.ParseTrafficPolicy(doc)
		if err != nil {
			return nil, err
		}
		sel, err := NewTLSSelector(p, edgeEndpoint(b.s.Account, edgeID, proto, hostports))
		if err == nil && sel == nil {
			err = errNoSelector
		}
		return sel, err
	})
	if err == errNoSelector {
		return nil, nil
	}
	return sel, err
}
