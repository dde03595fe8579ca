package ingress

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// ACME challenges for managed certificates: the HTTP listener answers HTTP-01 requests and the
// TLS listener TLS-ALPN-01 handshakes for the names whose certificates edgeplane is ordering,
// before any endpoint or edge routing. A request or handshake for a name with no challenge in
// progress is routed as usual, so an agent's application can still answer its own challenges.

// acmeALPN is the ALPN protocol of TLS-ALPN-01 (RFC 8737).
const acmeALPN = "acme-tls/1"

// acmeHTTPPrefix is the path of HTTP-01 answers (RFC 8555 §8.3).
const acmeHTTPPrefix = "/.well-known/acme-challenge/"

// ACMEAnswers are the challenge answers the listeners give.
type ACMEAnswers struct {
	// HTTP01 returns the key authorization to serve for host and token, if a challenge is in
	// progress.
	HTTP01 func(host, token string) (string, bool)
	// TLSALPN01 returns the certificate answering a TLS-ALPN-01 challenge for host, or nil.
	TLSALPN01 func(host string) *tls.Certificate
}

// SetACME sets how ACME challenges are answered; call it before serving starts.
func (s *Server) SetACME(a ACMEAnswers) { s.acme = a }

// answerHTTP01 answers an HTTP-01 request for host, and reports whether it did.
func (s *Server) answerHTTP01(w http.ResponseWriter, r *http.Request, host string) bool {
	token, ok := strings.CutPrefix(r.URL.Path, acmeHTTPPrefix)
	if !ok || s.acme.HTTP01 == nil || token == "" || r.Method != http.MethodGet {
		return false
	}
	keyAuth, ok := s.acme.HTTP01(host, token)
	if !ok {
		return false
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, keyAuth)
	return true
}

// answerALPN completes a TLS-ALPN-01 handshake for sni, when the client offers acme-tls/1 alone
// and a challenge for sni is in progress, and reports whether it took the connection.
func (s *Server) answerALPN(c net.Conn, sni string, protos []string) bool {
	if len(protos) != 1 || protos[0] != acmeALPN || s.acme.TLSALPN01 == nil || sni == "" {
		return false
	}
	cert := s.acme.TLSALPN01(sni)
	if cert == nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(s.headerTimeout()))
	conn := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{acmeALPN}, MinVersion: tls.VersionTLS12})
	_ = conn.Handshake()
	return true
}
