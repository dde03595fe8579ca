package ingress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"testing"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/plan"
)

// tlsEndpoint is an online endpoint as the listener sees it, with only its TLS settings.
type tlsEndpoint struct {
	policy plan.TLSPolicy
	cert   *tls.Certificate
}

func (e *tlsEndpoint) ID() string            { return "tn_test" }
func (e *tlsEndpoint) AccountID() string     { return "acct_test" }
func (e *tlsEndpoint) Chain() *enforce.Chain { return nil }
func (e *tlsEndpoint) DecideConn(net.Conn, *enforce.TLSHello) enforce.ConnVerdict {
	return enforce.ConnVerdict{Allow: true}
}
func (e *tlsEndpoint) HTTPHandler(build func() http.Handler) http.Handler { return build() }
func (e *tlsEndpoint) Passthrough() bool                                  { return false }
func (e *tlsEndpoint) TLSFor(plan.Hello) (plan.ConnTLS, error) {
	return plan.ConnTLS{Policy: e.policy, Cert: e.cert}, nil
}
func (e *tlsEndpoint) Dial(context.Context, string, string, string, bool) (net.Conn, error) {
	return nil, net.ErrClosed
}

// TestConfigForClient: the HTTPS handshake's configuration is chosen by server name: an https
// endpoint with mutual TLS requires and verifies a client certificate from its CAs (whatever
// the case or trailing dot of the name), one without asks nothing of the listener's base, and a
// certificate of the endpoint's own replaces the host's.
func TestConfigForClient(t *testing.T) {
	ca := testCA(t)
	own, _ := ca.Issue("own.example.com")
	pool := x509.NewCertPool()
	endpoints := map[string]Endpoint{
		"m.example.com":   &tlsEndpoint{policy: plan.TLSPolicy{MutualTLS: true, ClientCAs: pool}},
		"o.example.com":   &tlsEndpoint{},
		"own.example.com": &tlsEndpoint{cert: own},
	}
	s := New(Config{Certificate: func(string) (*tls.Certificate, error) { return nil, ErrUnknownName }})
	s.SetLookup(func(proto, host string) Endpoint {
		if proto != "https" {
			return nil
		}
		return endpoints[host]
	})
	for _, name := range []string{"m.example.com", "M.Example.COM."} {
		c, err := s.configForClient(&tls.ClientHelloInfo{ServerName: name})
		if err != nil || c == nil || c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs != pool || c.GetCertificate == nil {
			t.Errorf("%s: %+v %v", name, c, err)
		}
	}
	for _, name := range []string{"o.example.com", "none.example.com", ""} {
		if c, err := s.configForClient(&tls.ClientHelloInfo{ServerName: name}); err != nil || c != nil {
			t.Errorf("%q asks nothing of the base: %+v %v", name, c, err)
		}
	}
	c, err := s.configForClient(&tls.ClientHelloInfo{ServerName: "own.example.com"})
	if err != nil || c == nil || c.GetCertificate != nil || len(c.Certificates) != 1 || c.ClientAuth != tls.NoClientCert {
		t.Errorf("an endpoint's own certificate: %+v %v", c, err)
	}
	if s.tlsBase.GetCertificate == nil || s.tlsBase.Certificates != nil || s.tlsBase.ClientAuth != tls.NoClientCert {
		t.Errorf("the listener's base was changed")
	}
}
