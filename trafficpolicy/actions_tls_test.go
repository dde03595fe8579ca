package trafficpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// selfSigned returns the PEM of a certificate (a CA when ca) and of its key.
func selfSigned(t *testing.T, ca bool) (certPEM, keyPEM string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, DNSNames: []string{"t.example"},
		IsCA: ca, BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := x509.MarshalPKCS8PrivateKey(key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}))
}

// TestTerminateTLSConfig: terminate-tls's configuration is refused as ngrok refuses it, naming
// the field; TerminateTLS reads the settings of a policy's one unconditional terminate-tls.
func TestTerminateTLSConfig(t *testing.T) {
	cert, key := selfSigned(t, false)
	_, otherKey := selfSigned(t, false)
	caPEM, _ := selfSigned(t, true)
	doc := func(cfg map[string]any) string {
		b, _ := json.Marshal(map[string]any{"on_tcp_connect": []any{map[string]any{"actions": []any{map[string]any{"type": "terminate-tls", "config": cfg}}}}})
		return string(b)
	}
	const at = "on_tcp_connect[0].actions[0].config."
	for _, c := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"min_version": "1.1"}, at + "min_version: must be 1.2 or 1.3"},
		{map[string]any{"max_version": "1.4"}, at + "max_version: must be 1.2 or 1.3"},
		{map[string]any{"min_version": "1.3", "max_version": "1.2"}, at + "min_version: 1.3 is above max_version 1.2"},
		{map[string]any{"server_certificate": cert}, at + "server_certificate: give server_certificate and server_private_key together"},
		{map[string]any{"server_certificate": cert, "server_private_key": otherKey}, at + "server_private_key: the certificate and key are not"},
		{map[string]any{"server_certificate": "${vars.c}", "server_private_key": key}, at + "server_certificate: CEL interpolation"},
		{map[string]any{"mutual_tls_certificate_authorities": []string{cert}}, at + "mutual_tls_certificate_authorities[0]: is not a CA certificate"},
		{map[string]any{"mutual_tls_certificate_authorities": []string{"nonsense"}}, at + "mutual_tls_certificate_authorities[0]: is not PEM certificates"},
		{map[string]any{"mutual_tls_certificate_authorities": []string{"ca_2abc"}}, at + "mutual_tls_certificate_authorities[0]: certificate authority ids are not resolved here"},
		{map[string]any{"mutual_tls_verification_strategy": "maybe"}, at + "mutual_tls_verification_strategy: must be one of"},
		{map[string]any{"mutual_tls_verification_strategy": "require-and-verify"}, at + "mutual_tls_certificate_authorities: require-and-verify needs"},
		{map[string]any{"ciphers": []string{"x"}}, `unknown field "ciphers"`},
	} {
		if _, err := Parse(doc(c.cfg)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v:\n  %v\n  want %q", c.cfg, err, c.want)
		}
	}
	if _, err := Parse(`{"on_http_request":[{"actions":[{"type":"terminate-tls"}]}]}`); err == nil || !strings.Contains(err.Error(), "cannot be used in on_http_request") {
		t.Errorf("terminate-tls in on_http_request: %v", err)
	}
	p, err := Parse(doc(map[string]any{"server_certificate": cert, "server_private_key": key, "min_version": "1.3",
		"mutual_tls_certificate_authorities": []string{caPEM}, "mutual_tls_verification_strategy": "require-any"}))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := TerminateTLS(p)
	s := sel.Fixed()
	if err != nil || s == nil || s.MinVersion != tls.VersionTLS13 || s.MaxVersion != tls.VersionTLS13 || s.Certificate == nil ||
		len(s.ClientCAs) != 1 || !s.MutualTLS || s.ClientAuth != tls.RequireAnyClientCert {
		t.Errorf("TerminateTLS: %+v %v", s, err)
	}
	for d, want := range map[string]string{
		`{"on_tcp_connect":[{"expressions":["conn.tls.version == '1.3'"],"actions":[{"type":"terminate-tls"}]}]}`: "before conn.tls.version is known",
		`{"on_tcp_connect":[{"expressions":["vars.x == 'y'"],"actions":[{"type":"terminate-tls"}]}]}`:             "before vars is known",
		`{"on_tcp_connect":[{"actions":[{"type":"terminate-tls"},{"type":"terminate-tls"}]}]}`:                    "one terminate-tls",
	} {
		if _, err := Parse(d); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", d, err, want)
		}
	}
}

// TestTerminateTLSChoose: the terminate-tls of a rule with expressions applies to a connection
// when its rule matches what the ClientHello tells (the server name, the client's address), the
// last matching one winning; a rule that does not match leaves the endpoint's TLS.
func TestTerminateTLSChoose(t *testing.T) {
	p, err := Parse(`{"on_tcp_connect":[
		{"expressions":["conn.tls.sni == 'strict.example.com'"],"actions":[{"type":"terminate-tls","config":{"min_version":"1.3"}}]},
		{"expressions":["conn.client_ip == '192.0.2.7'","endpoint.id == 'ep_1'"],"actions":[{"type":"terminate-tls","config":{"max_version":"1.2"}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := TerminateTLS(p)
	if err != nil || sel.Fixed() != nil {
		t.Fatalf("TerminateTLS: %v, fixed %v", err, sel.Fixed())
	}
	for _, c := range []struct {
		client, sni string
		want        int
	}{
		{"198.51.100.1:4000", "strict.example.com", 0},
		{"198.51.100.1:4000", "other.example.com", -1},
		{"192.0.2.7:4000", "other.example.com", 1},
		{"192.0.2.7:4000", "strict.example.com", 1},
	} {
		vars := ConnVars(c.client, "203.0.113.1:443")
		SetServerName(vars, c.sni)
		SetEndpoint(vars, &Endpoint{ID: "ep_1"})
		if got, err := sel.Choose(vars); err != nil || got != c.want {
			t.Errorf("%s %s: %d %v, want %d", c.client, c.sni, got, err, c.want)
		}
	}
}
