package enforce

import (
	"crypto/tls"
	"net/http"
	"strings"
)

// MisdirectedClientCert answers a request whose connection was not made with a client
// certificate the endpoint or edge accepts (its mutual TLS was turned on, or its CAs changed,
// after the keep-alive connection's handshake): 421 with ERR_NGROK_3200 and Connection: close,
// so the client connects again and that handshake asks for the certificate.
func MisdirectedClientCert(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	ErrorPage(w, r, http.StatusMisdirectedRequest, 3200,
		"This connection was not made with a client certificate this endpoint accepts (mutual TLS); connect again and present one.")
}

// The headers ngrok's mutual TLS module adds to the upstream request about the client's
// certificate (ngrok's "Upstream Headers" of mutual TLS).
const (
	HeaderMTLSSubjectCN = "Ngrok-Mtls-Subject-Cn"
	HeaderMTLSDNSNames  = "Ngrok-Mtls-Subject-Alt-Name-Dns"
	HeaderMTLSEmails    = "Ngrok-Mtls-Email-Addresses"
	HeaderMTLSSerial    = "Ngrok-Mtls-Serial-Number"
)

// SetClientCertHeaders tells the upstream about the client certificate of a connection that
// passed mutual TLS: the leaf's subject common name, its DNS and email subject alternative
// names (each list joined with ", ", the form of a header repeated) and its serial number in
// decimal. The ngrok-mtls-* headers the client sent (in every spelling that folds to one, see
// HeaderNameHasPrefix) are removed first, so the upstream only ever sees the ones edgeplane set; a value the
// certificate lacks is not sent.
func SetClientCertHeaders(h http.Header, state *tls.ConnectionState) {
	for k := range h {
		if HeaderNameHasPrefix(k, clientCertHeaderPrefix) {
			delete(h, k)
		}
	}
	if state == nil || len(state.PeerCertificates) == 0 {
		return
	}
	leaf := state.PeerCertificates[0]
	set := func(name string, values []string) {
		var kept []string
		for _, v := range values {
			if v = headerValue(v); v != "" {
				kept = append(kept, v)
			}
		}
		if len(kept) > 0 {
			h.Set(name, strings.Join(kept, ", "))
		}
	}
	set(HeaderMTLSSubjectCN, []string{leaf.Subject.CommonName})
	set(HeaderMTLSDNSNames, leaf.DNSNames)
	set(HeaderMTLSEmails, leaf.EmailAddresses)
	if leaf.SerialNumber != nil {
		set(HeaderMTLSSerial, []string{leaf.SerialNumber.String()})
	}
}
