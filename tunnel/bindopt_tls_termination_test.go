package tunnel

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/pki"
	"github.com/edgeplane/edgeplane/plan"
)

// testCA is a certificate authority made for one test; nothing of it is kept on disk.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pemOf("CERTIFICATE", der)}
}

// issue signs a leaf for name with pub (a new ECDSA key when nil) and returns its PEM and the
// PEM of its key (nil when pub was given).
func (ca *testCA) issue(t testing.TB, name string, pub any) (certPEM, keyPEM []byte) {
	t.Helper()
	if pub == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub = &key.PublicKey
		der, _ := x509.MarshalPKCS8PrivateKey(key)
		keyPEM = pemOf("PRIVATE KEY", der)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("CERTIFICATE", der), keyPEM
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// termOption is a TLSTermination option as ngrok-go sends it: PEM as base64.
func termOption(cert, key, sealed []byte) json.RawMessage {
	o := map[string][]byte{}
	if cert != nil {
		o["cert"] = cert
	}
	if key != nil {
		o["key"] = key
	}
	if sealed != nil {
		o["sealed_key"] = sealed
	}
	b, _ := json.Marshal(o)
	return b
}

// TestTLSTerminationOption: a certificate chain with its key becomes the certificate the
// listener terminates with; no certificate means the host's; and every mistake refuses the bind
// with its code and a message naming the field: a sealed key (3208), half a key pair, PEM that
// is not PEM or is damaged, a key of another certificate, a chain out of order, a certificate or
// key over its bound, an RSA key over 8192 bits (301).
func TestTLSTerminationOption(t *testing.T) {
	ca := newTestCA(t, "termination CA")
	other := newTestCA(t, "another CA")
	leaf, key := ca.issue(t, "tls.example.com", nil)
	_, otherKey := ca.issue(t, "tls.example.com", nil)

	chain := append(append([]byte{}, leaf...), ca.pem...)
	c, err := parseTermination(termOption(chain, key, nil))
	if err != nil || c == nil || len(c.Certificate) != 2 || c.Leaf.Subject.CommonName != "tls.example.com" || c.PrivateKey == nil {
		t.Fatalf("a chain with its key: %+v %v", c, err)
	}
	// A sealed key next to the key itself is ignored, as a sealed client secret is.
	if c, err := parseTermination(termOption(leaf, key, []byte("sealed"))); err != nil || c == nil {
		t.Fatalf("key and sealed_key: %v", err)
	}
	if c, err := parseTermination(json.RawMessage(`{}`)); err != nil || c != nil {
		t.Fatalf("no certificate (the host's): %+v %v", c, err)
	}

	big9000 := &rsa.PublicKey{N: new(big.Int).Lsh(big.NewInt(1), 9000), E: 65537}
	big9000.N.Add(big9000.N, big.NewInt(1))
	bigCert, _ := ca.issue(t, "big.example.com", big9000)
	for name, c := range map[string]struct {
		raw  json.RawMessage
		code int
		text string
	}{
		"sealed key only":       {termOption(leaf, nil, []byte("sealed")), ep.AgentCodeUnsupportedOpt, "sealed_key is encrypted for ngrok's servers"},
		"cert without key":      {termOption(leaf, nil, nil), ep.AgentCodeBadBind, "give both cert and key"},
		"key without cert":      {termOption(nil, key, nil), ep.AgentCodeBadBind, "give both cert and key"},
		"cert not PEM":          {termOption([]byte("not a certificate"), key, nil), ep.AgentCodeBadBind, "cert is not PEM"},
		"cert damaged":          {termOption(leaf[:len(leaf)-30], key, nil), ep.AgentCodeBadBind, "cert holds a PEM block that is truncated"},
		"cert of another type":  {termOption(key, key, nil), ep.AgentCodeBadBind, "not a CERTIFICATE"},
		"key not PEM":           {termOption(leaf, []byte("not a key"), nil), ep.AgentCodeBadBind, "key is not PEM"},
		"key of another cert":   {termOption(leaf, otherKey, nil), ep.AgentCodeBadBind, "key does not match the certificate"},
		"chain out of order":    {termOption(append(append([]byte{}, leaf...), other.pem...), key, nil), ep.AgentCodeBadBind, "was not issued by certificate 2"},
		"cert too large":        {termOption(make([]byte, maxTerminationCertPEM+1), key, nil), ep.AgentCodeBadBind, "cert is 65537 bytes"},
		"key too large":         {termOption(leaf, make([]byte, maxTerminationKeyPEM+1), nil), ep.AgentCodeBadBind, "key is 16385 bytes"},
		"RSA key too large":     {termOption(bigCert, key, nil), ep.AgentCodeBadBind, "9001-bit RSA key"},
		"chain too long":        {termOption([]byte(strings.Repeat(string(leaf), maxTerminationChain+1)), key, nil), ep.AgentCodeBadBind, "at most 8"},
		"not an object":         {json.RawMessage(`"cert"`), ep.AgentCodeBadBind, "not a JSON object"},
		"cert not base64 bytes": {json.RawMessage(`{"cert":"%%%","key":"AA=="}`), ep.AgentCodeBadBind, "not a JSON object"},
	} {
		_, err := parseTermination(c.raw)
		if err == nil || plan.RefusalCode(err) != c.code || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v (code %d), want %d %q", name, err, plan.RefusalCode(err), c.code, c.text)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY-----\n") {
			t.Errorf("%s: the refusal quotes the key", name)
		}
	}
}

// TestTLSSettingsOnBinds: the options reach the bind as its endpoint TLS, refused by protocol
// where they cannot act (termination on an https bind, mutual TLS on http and tcp ones, or on a
// tls bind without termination: ngrok's 1694), and a refusal of a builder keeps its code and
// names the module.
func TestTLSSettingsOnBinds(t *testing.T) {
	ca := newTestCA(t, "client CA")
	leaf, key := ca.issue(t, "tls.example.com", nil)
	mtls, _ := json.Marshal(map[string]any{"mutual_tls_ca": ca.pem})
	term := termOption(leaf, key, nil)
	opts := func(kv ...any) json.RawMessage {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		b, _ := json.Marshal(m)
		return b
	}
	s, be := tlsSettings("tls", opts("TLSTermination", term, "MutualTLSAtEdge", json.RawMessage(mtls)))
	if be != nil || s == nil || !s.terminate || s.cert == nil || !s.policy.MutualTLS || s.policy.ClientCAs == nil {
		t.Fatalf("termination with mutual TLS: %+v %+v", s, be)
	}
	s2, be := tlsSettings("tls", opts("TLSTermination", json.RawMessage(`{}`)))
	if be != nil || s2 == nil || !s2.terminate || s2.cert != nil || s2.policy.MutualTLS || s2.digest == s.digest {
		t.Fatalf("termination with the host's certificate: %+v %+v", s2, be)
	}
	s3, be := tlsSettings("https", opts("MutualTLSCA", json.RawMessage(mtls)))
	if be != nil || s3 == nil || s3.terminate || !s3.policy.MutualTLS {
		t.Fatalf("mutual TLS on https: %+v %+v", s3, be)
	}
	if s, be := tlsSettings("tls", opts("TLSTermination", nil, "MutualTLSAtEdge", nil)); be != nil || s != nil {
		t.Fatalf("null options: %+v %+v", s, be)
	}
	for name, c := range map[string]struct {
		proto string
		raw   json.RawMessage
		code  int
		text  string
	}{
		"termination on https":           {"https", opts("TLSTermination", term), ep.AgentCodeBadBind, "tls_termination applies to tls endpoints only"},
		"mutual TLS on http":             {"http", opts("MutualTLSCA", json.RawMessage(mtls)), ep.AgentCodeBadBind, "a http endpoint has no TLS handshake"},
		"mutual TLS on tcp":              {"tcp", opts("MutualTLSAtEdge", json.RawMessage(mtls)), ep.AgentCodeBadBind, "a tcp endpoint has no TLS handshake"},
		"mutual TLS without termination": {"tls", opts("MutualTLSAtEdge", json.RawMessage(mtls)), codeMutualTLSNeedsTermination, "requires TLS termination at edge"},
		"mutual TLS twice":               {"https", opts("MutualTLSCA", json.RawMessage(mtls), "MutualTLSAtEdge", json.RawMessage(mtls)), ep.AgentCodeBadBind, "once"},
		"sealed key":                     {"tls", opts("TLSTermination", termOption(leaf, nil, []byte("x"))), ep.AgentCodeUnsupportedOpt, "tls_termination: sealed_key"},
		"mismatched key":                 {"tls", opts("TLSTermination", termOption(leaf, ca.pem, nil)), ep.AgentCodeBadBind, "tls_termination: key"},
		"bad CA":                         {"https", opts("MutualTLSCA", map[string]any{"mutual_tls_ca": []byte("x")}), ep.AgentCodeBadBind, "mutual_tls: mutual_tls_ca is not PEM"},
		"options not an object":          {"tls", json.RawMessage(`[1]`), ep.AgentCodeBadBind, "not a JSON object"},
	} {
		_, be := tlsSettings(c.proto, c.raw)
		if be == nil || be.code != c.code || !strings.Contains(be.msg, c.text) {
			t.Errorf("%s: %+v, want %d %q", name, be, c.code, c.text)
		}
	}
	// chain leaves the TLS options to tlsSettings: they are no longer refused as unenforced.
	var o bindOpts
	if _, _, be := o.chain("tls", opts("TLSTermination", term, "MutualTLSAtEdge", json.RawMessage(mtls))); be != nil {
		t.Fatalf("chain refused the TLS options: %+v", be)
	}
}

// FuzzTLSSettings: no bind options, however malformed, make the TLS options panic or be
// accepted with a key that is not the certificate's.
func FuzzTLSSettings(f *testing.F) {
	ca := newTestCA(f, "fuzz CA")
	leaf, key := ca.issue(f, "f.example.com", nil)
	mtls, _ := json.Marshal(map[string]any{"mutual_tls_ca": ca.pem})
	both, _ := json.Marshal(map[string]any{"TLSTermination": termOption(leaf, key, nil), "MutualTLSAtEdge": json.RawMessage(mtls)})
	f.Add("tls", both)
	f.Add("https", []byte(`{"MutualTLSCA":`+string(mtls)+`}`))
	f.Add("tls", []byte(`{"TLSTermination":{"cert":"","key":null,"sealed_key":"AA=="}}`))
	f.Add("tls", []byte(`{"tlstermination":{}}`))
	f.Fuzz(func(t *testing.T, proto string, raw []byte) {
		s, be := tlsSettings(proto, raw)
		if be != nil || s == nil || s.cert == nil {
			return
		}
		signer, ok := s.cert.PrivateKey.(crypto.Signer)
		if !ok || !pki.SamePublicKey(s.cert.Leaf.PublicKey, signer.Public()) {
			t.Fatalf("accepted a key that is not the certificate's")
		}
	})
}
