package tunnel

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/pki"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// codeMutualTLSNeedsTermination is ngrok's refusal of mutual TLS at the edge on a tls endpoint
// whose TLS the edge does not terminate ("Mutual TLS at edge requires TLS termination at edge").
const codeMutualTLSNeedsTermination = 1694

// maxClientCAs bounds the CA certificates of one bind's mutual TLS option (the bind message is
// bounded too; this keeps the pool, and the CA names sent in every handshake, small).
const maxClientCAs = 64

// endpointTLS is what a bind asks of its public clients' TLS: client certificates from the
// agent's CAs (the mutual_tls module of an https bind, or of a tls bind terminated here) and, for
// a tls bind, TLS terminated here with the agent's own certificate or the host's. The public
// listener applies it with the same code as an edge's TLS policy (plan.TLSPolicy). The
// certificate's private key lives only here, in memory, for as long as the bind.
type endpointTLS struct {
	// terminate is set for a tls bind with TLS termination: the listener terminates the client's
	// TLS and the agent gets the plaintext (PassthroughTLS false).
	terminate bool
	policy    plan.TLSPolicy
	// cert is the agent's certificate and key for a terminated tls bind; nil presents the
	// host's certificate (edgeplane's CA's, or the reserved domain's).
	cert *tls.Certificate
	// digest identifies these settings: every pooled bind of an endpoint must ask the same,
	// since a handshake cannot know which of them will serve the connection.
	digest [32]byte
	// sel is set when a traffic policy's terminate-tls depends on the connection (a rule with
	// expressions): each ClientHello then chooses the settings (connTLS), and the fields above
	// are unused.
	sel *plan.TLSSelector
}

// parseMutualTLS reads a MutualTLSCA or MutualTLSAtEdge option ({mutual_tls_ca: base64 of
// concatenated PEM certificates}, what ngrok-go's WithMutualTLSCA sends) into the pool client
// certificates must chain to. Every certificate must be a CA certificate, as the API requires
// of an uploaded certificate authority.
func parseMutualTLS(raw json.RawMessage) ([]*x509.Certificate, error) {
	var o struct {
		CA []byte `json:"mutual_tls_ca"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, errors.New("the option is not a JSON object with mutual_tls_ca (base64 of PEM CA certificates)")
	}
	if len(o.CA) == 0 {
		return nil, errors.New("mutual_tls_ca is empty: give at least one CA certificate")
	}
	cas, err := pki.ParseCertificates(string(o.CA))
	if err != nil {
		return nil, fmt.Errorf("mutual_tls_ca %v", err)
	}
	if len(cas) > maxClientCAs {
		return nil, fmt.Errorf("mutual_tls_ca holds %d certificates; at most %d are accepted", len(cas), maxClientCAs)
	}
	for i, ca := range cas {
		if why := pki.CACheck(ca); why != "" {
			return nil, fmt.Errorf("mutual_tls_ca certificate %d (%s) %s", i+1, certName(ca), why)
		}
	}
	return cas, nil
}

func certName(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return "CN=" + c.Subject.CommonName
	}
	return "subject " + c.Subject.String()
}

// tlsSettings builds the endpointTLS of a bind from its mutual TLS and TLS termination options;
// nil when it has neither. Mutual TLS needs the listener to terminate the TLS: an https bind
// always is; a tls bind only with TLS termination (else ngrok's 1694), and an http or tcp bind
// has no TLS to ask a certificate in.
func tlsSettings(proto string, raw json.RawMessage) (*endpointTLS, *bindError) {
	return tlsSettingsFor(proto, raw, nil)
}

// tlsSettingsFor is tlsSettings for a bind whose endpoint.* variables read endpoint.
func tlsSettingsFor(proto string, raw json.RawMessage, endpoint *trafficpolicy.Endpoint) (*endpointTLS, *bindError) {
	fields, berr := optionFields(raw)
	if berr != nil {
		return nil, berr
	}
	var mtls, term json.RawMessage
	for _, name := range []string{"mutualtlsca", "mutualtlsatedge"} {
		if v := fields[name]; present(v) {
			if mtls != nil {
				return nil, refuse(ep.AgentCodeBadBind, "mutual_tls: give the CA certificates once, in MutualTLSCA or MutualTLSAtEdge.")
			}
			mtls = v
		}
	}
	if v := fields["tlstermination"]; present(v) {
		term = v
	}
	if v := fields["trafficpolicy"]; present(v) && (proto == "https" || proto == "tls") {
		if s, berr := policyTLSSettings(proto, v, mtls != nil || term != nil, endpoint); s != nil || berr != nil {
			return s, berr
		}
	}
	if mtls == nil && term == nil {
		return nil, nil
	}
	if term != nil && proto != "tls" {
		return nil, refuse(ep.AgentCodeBadBind, "tls_termination applies to tls endpoints only (an https endpoint's TLS is always terminated by edgeplane).")
	}
	if mtls != nil && proto != "https" && proto != "tls" {
		return nil, refuse(ep.AgentCodeBadBind, "mutual_tls applies to https endpoints and to tls endpoints whose TLS edgeplane terminates; a %s endpoint has no TLS handshake to ask a client certificate in.", proto)
	}
	if mtls != nil && proto == "tls" && term == nil {
		return nil, refuse(codeMutualTLSNeedsTermination, "Mutual TLS at edge requires TLS termination at edge: add TLS termination to the endpoint "+
			"(ngrok-go: config.WithTLSTermination() or config.WithTermination(certPEM, keyPEM)) so edgeplane can ask for client certificates, or verify them in the agent.")
	}
	s := &endpointTLS{terminate: term != nil, policy: plan.TLSPolicy{MinVersion: tls.VersionTLS12}}
	h := sha256.New()
	if s.terminate {
		cert, err := parseTermination(term)
		if err != nil {
			return nil, refuse(plan.RefusalCode(err), "tls_termination: %v", err)
		}
		s.cert = cert
		h.Write([]byte("terminate\n"))
		if cert != nil {
			for _, der := range cert.Certificate {
				h.Write(der)
			}
		}
	}
	if mtls != nil {
		cas, err := parseMutualTLS(mtls)
		if err != nil {
			return nil, refuse(ep.AgentCodeBadBind, "mutual_tls: %v", err)
		}
		h.Write([]byte("mutual_tls\n"))
		for _, ca := range cas {
			s.policy.AddClientCA(ca)
			h.Write(ca.Raw)
		}
	}
	h.Sum(s.digest[:0])
	return s, nil
}

// guard puts the request-time check of an https bind's mutual TLS in front of its chain. The
// listener asks for the certificate in the handshake, by the connection's server name; a
// keep-alive connection made before the bind (when the name had no endpoint, or another one)
// was never asked, so each request also shows that its connection's certificate chains to one
// of this bind's CAs.
func (s *endpointTLS) guard(proto string, c *enforce.Chain) *enforce.Chain {
	if s == nil || (!s.policy.MutualTLS && s.sel == nil) || proto != "https" {
		return c
	}
	if c == nil {
		c = &enforce.Chain{}
	}
	c.HTTP = append([]enforce.Stage{&clientCertGuard{tls: s}}, c.HTTP...)
	return c
}

// clientCertGuard is the mutual_tls stage of an https bind: a request passes when its
// connection's handshake verified a client certificate chain ending at one of the bind's CAs
// (plan.TLSPolicy.Admits, which HTTPS edges use too), with the ngrok-mtls-* headers about that
// certificate (the client's own removed). Any other is answered 421 with
// ERR_NGROK_3200, as a request on a connection made for another name is: the client connects
// again, and that handshake asks for the certificate.
type clientCertGuard struct {
	tls *endpointTLS
}

func (g *clientCertGuard) Name() string { return "mutual_tls" }

func (g *clientCertGuard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		policy, mtls := g.tls.requestPolicy(r)
		if !mtls {
			next.ServeHTTP(w, r)
			return
		}
		if policy.Admits(r.TLS) {
			enforce.SetClientCertHeaders(r.Header, r.TLS) // what ngrok's mutual TLS tells the upstream
			next.ServeHTTP(w, r)
			return
		}
		enforce.MisdirectedClientCert(w, r)
	})
}
