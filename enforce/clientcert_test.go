package enforce

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"testing"
)

// The mutual TLS headers: the leaf's values in ngrok's header names, lists joined, the serial in
// decimal, a value that would break a header (CR, LF) made safe, an absent value not sent, and
// every ngrok-mtls-* header the client sent removed (in any case, with underscores for hyphens),
// also without a certificate.
func TestSetClientCertHeaders(t *testing.T) {
	serial, _ := new(big.Int).SetString("123456789012345678901234567890", 10)
	leaf := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "evil\r\nX-Injected: 1"},
		DNSNames: []string{"a.test", "b.test"}}
	h := http.Header{"Ngrok-Mtls-Email-Addresses": {"spoof@test"}, "Ngrok-Mtls-Whatever": {"x"}, "Other": {"kept"}}
	h["ngrok-mtls-serial-number"] = []string{"1"}  // a non-canonical spelling
	h["Ngrok_mtls_subject_cn"] = []string{"admin"} // underscores: CGI's NGROK_MTLS_SUBJECT_CN
	h["NGROK-MTLS_SERIAL_NUMBER"] = []string{"1"}
	SetClientCertHeaders(h, &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
	want := http.Header{"Ngrok-Mtls-Subject-Cn": {"evil  X-Injected: 1"}, "Ngrok-Mtls-Subject-Alt-Name-Dns": {"a.test, b.test"},
		"Ngrok-Mtls-Serial-Number": {"123456789012345678901234567890"}, "Other": {"kept"}}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if len(h[k]) != 1 || h[k][0] != v[0] {
			t.Fatalf("%s: %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
	spoofed := http.Header{"Ngrok-Mtls-Subject-Cn": {"admin"}, "Ngrok_mtls_subject_cn": {"admin"}}
	SetClientCertHeaders(spoofed, nil)
	if len(spoofed) != 0 {
		t.Fatalf("without a certificate: %v, want the client's removed", spoofed)
	}
}
