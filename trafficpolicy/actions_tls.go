package trafficpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
)

// TerminateTLSConfig is terminate-tls's, as ngrok documents it: the TLS versions accepted
// (min_version 1.2 and max_version 1.3 by default), the certificate and key to present instead
// of the host's (PEM, together), and mutual TLS: the CAs client certificates must chain to (PEM)
// and how they are checked (require-and-verify, the default; require-any takes any certificate
// unverified; request asks for one without requiring it).
type TerminateTLSConfig struct {
	MinVersion                      string   `json:"min_version"`
	MaxVersion                      string   `json:"max_version"`
	ServerPrivateKey                string   `json:"server_private_key"`
	ServerCertificate               string   `json:"server_certificate"`
	MutualTLSCertificateAuthorities []string `json:"mutual_tls_certificate_authorities"`
	MutualTLSVerificationStrategy   string   `json:"mutual_tls_verification_strategy"`
}

// TLSSettings are a terminate-tls action's settings made ready for a TLS listener.
type TLSSettings struct {
	MinVersion, MaxVersion uint16
	// Certificate is the certificate and key to present; nil for the host's.
	Certificate *tls.Certificate
	// ClientCAs are the mutual TLS CAs; MutualTLS is set when a client certificate is asked for,
	// with ClientAuth saying how.
	ClientCAs  []*x509.Certificate
	MutualTLS  bool
	ClientAuth tls.ClientAuthType
}

// Limits of terminate-tls's configuration: a chain of a few certificates and an 8192-bit RSA key
// fit; anything larger would cost memory for the endpoint's life and CPU in every handshake.
const (
	maxServerCertPEM = 64 << 10
	maxServerKeyPEM  = 16 << 10
	maxMutualTLSCAs  = 64
	maxCAPEM         = 64 << 10
)

var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// TLSVerificationStrategies are mutual_tls_verification_strategy's values.
var TLSVerificationStrategies = []string{"require-and-verify", "require-any", "request"}

func init() {
	implemented["terminate-tls"] = decodeTerminateTLS
}

func decodeTerminateTLS(a *Action) (any, error) {
	c := &TerminateTLSConfig{}
	if err := a.decode(c); err != nil {
		return nil, err
	}
	if _, err := c.settings(a.Path + ".config"); err != nil {
		return nil, err
	}
	return c, nil
}

// settings checks the configuration and makes it ready; p is its path, for errors. Values that
// interpolate CEL are refused: the handshake's settings are fixed before any expression can be
// evaluated.
func (c *TerminateTLSConfig) settings(p string) (TLSSettings, error) {
	s := TLSSettings{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13}
	for _, f := range []struct {
		name, value string
		to          *uint16
	}{{"min_version", c.MinVersion, &s.MinVersion}, {"max_version", c.MaxVersion, &s.MaxVersion}} {
		if f.value == "" {
			continue
		}
		n, ok := tlsVersions[f.value]
		if !ok {
			return s, errorf(p+"."+f.name, "must be 1.2 or 1.3, got %q", f.value)
		}
		*f.to = n
	}
	if s.MinVersion > s.MaxVersion {
		return s, errorf(p+".min_version", "%s is above max_version %s", c.MinVersion, c.MaxVersion)
	}
	switch {
	case (c.ServerCertificate == "") != (c.ServerPrivateKey == ""):
		return s, errorf(p+".server_certificate", "give server_certificate and server_private_key together, or neither for the host's certificate")
	case len(c.ServerCertificate) > maxServerCertPEM:
		return s, errorf(p+".server_certificate", "must be at most %d bytes", maxServerCertPEM)
	case len(c.ServerPrivateKey) > maxServerKeyPEM:
		return s, errorf(p+".server_private_key", "must be at most %d bytes", maxServerKeyPEM)
	case Interpolates(c.ServerCertificate) || Interpolates(c.ServerPrivateKey):
		return s, errorf(p+".server_certificate", "CEL interpolation is not applied in the server's certificate and key")
	case c.ServerCertificate != "":
		cert, err := tls.X509KeyPair([]byte(c.ServerCertificate), []byte(c.ServerPrivateKey))
		if err != nil {
			return s, errorf(p+".server_private_key", "the certificate and key are not a PEM certificate chain and its key: %v", err)
		}
		s.Certificate = &cert
	}
	if len(c.MutualTLSCertificateAuthorities) > maxMutualTLSCAs {
		return s, errorf(p+".mutual_tls_certificate_authorities", "at most %d, got %d", maxMutualTLSCAs, len(c.MutualTLSCertificateAuthorities))
	}
	for i, v := range c.MutualTLSCertificateAuthorities {
		at := fmt.Sprintf("%s.mutual_tls_certificate_authorities[%d]", p, i)
		switch {
		case len(v) > maxCAPEM:
			return s, errorf(at, "must be at most %d bytes", maxCAPEM)
		case Interpolates(v):
			return s, errorf(at, "CEL interpolation is not applied in certificate authorities")
		case strings.HasPrefix(v, "ca_") && !strings.Contains(v, "\n"):
			return s, errorf(at, "certificate authority ids are not resolved here: give the CA's PEM certificate")
		}
		cas, err := parseCAs(v)
		if err != nil {
			return s, errorf(at, "%v", err)
		}
		s.ClientCAs = append(s.ClientCAs, cas...)
	}
	strategy := c.MutualTLSVerificationStrategy
	if strategy != "" && !slices.Contains(TLSVerificationStrategies, strategy) {
		return s, errorf(p+".mutual_tls_verification_strategy", "must be one of %s, got %q", strings.Join(TLSVerificationStrategies, ", "), strategy)
	}
	switch {
	case len(s.ClientCAs) > 0 && (strategy == "" || strategy == "require-and-verify"):
		s.MutualTLS, s.ClientAuth = true, tls.RequireAndVerifyClientCert
	case strategy == "require-and-verify":
		return s, errorf(p+".mutual_tls_certificate_authorities", "require-and-verify needs at least one certificate authority")
	case strategy == "require-any":
		s.MutualTLS, s.ClientAuth = true, tls.RequireAnyClientCert
	case strategy == "request":
		s.MutualTLS, s.ClientAuth = true, tls.RequestClientCert
	}
	return s, nil
}

// parseCAs reads PEM CA certificates: at least one, each a CA (basic constraints CA:TRUE).
func parseCAs(s string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %s block, not a certificate", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("is not a certificate: %v", err)
		}
		if !c.IsCA || !c.BasicConstraintsValid {
			return nil, fmt.Errorf("is not a CA certificate (basic constraints CA:TRUE)")
		}
		out = append(out, c)
	}
	if len(out) == 0 || strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("is not PEM certificates")
	}
	return out, nil
}
