package tunnel

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/store"
)

// TestMutualTLSOption: the CAs of a mutual TLS option must be PEM CA certificates, at least one
// and at most maxClientCAs; each mistake is named.
func TestMutualTLSOption(t *testing.T) {
	a, b := newTestCA(t, "CA a"), newTestCA(t, "CA b")
	option := func(pemText []byte) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"mutual_tls_ca": pemText})
		return raw
	}
	cas, err := parseMutualTLS(option(append(append([]byte{}, a.pem...), b.pem...)))
	if err != nil || len(cas) != 2 || cas[1].Subject.CommonName != "CA b" {
		t.Fatalf("two CAs: %v %v", cas, err)
	}
	leaf, key := a.issue(t, "client", nil)
	for name, c := range map[string]struct {
		raw  json.RawMessage
		text string
	}{
		"empty":            {option(nil), "mutual_tls_ca is empty"},
		"not PEM":          {option([]byte("hello")), "mutual_tls_ca is not PEM"},
		"a key":            {option(key), "not a CERTIFICATE"},
		"not a CA":         {option(leaf), `certificate 1 (CN=client) has no basic constraints`},
		"too many":         {option([]byte(strings.Repeat(string(a.pem), maxClientCAs+1))), "at most 64"},
		"not an object":    {json.RawMessage(`true`), "not a JSON object"},
		"not base64 bytes": {json.RawMessage(`{"mutual_tls_ca":"***"}`), "not a JSON object"},
	} {
		if _, err := parseMutualTLS(c.raw); err == nil || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want %q", name, err, c.text)
		}
	}
}

// TestClientCertGuard: an https bind with mutual TLS checks each request's connection: a
// verified chain ending at one of its CAs passes; no certificate, or a chain of another CA (a
// keep-alive connection made before the bind), is answered 421 ERR_NGROK_3200 and the connection
// is to be closed.
func TestClientCertGuard(t *testing.T) {
	a, b := newTestCA(t, "CA a"), newTestCA(t, "CA b")
	raw, _ := json.Marshal(map[string]any{"MutualTLSCA": map[string]any{"mutual_tls_ca": a.pem}})
	s, be := tlsSettings("https", raw)
	if be != nil {
		t.Fatal(be)
	}
	c := s.guard("https", nil)
	if c == nil || len(c.HTTP) != 1 || c.HTTP[0].Name() != "mutual_tls" {
		t.Fatalf("guard: %+v", c)
	}
	if s.guard("tls", nil) != nil {
		t.Errorf("a tls bind's handshake is its only check; it has no request stage")
	}
	h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("inside")) }))
	leafOf := func(ca *testCA) *x509.Certificate {
		p, _ := ca.issue(t, "client", nil)
		blk, _ := pem.Decode(p)
		leaf, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	for name, c := range map[string]struct {
		state *tls.ConnectionState
		want  int
	}{
		"verified by its CA":       {&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leafOf(a), a.cert}}}, 200},
		"verified by another CA":   {&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leafOf(b), b.cert}}}, 421},
		"a certificate unverified": {&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leafOf(a)}}, 421},
		"no certificate":           {&tls.ConnectionState{}, 421},
		"not TLS":                  {nil, 421},
	} {
		r := httptest.NewRequest("GET", "https://m.example.com/", nil)
		r.TLS = c.state
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", name, w.Code, c.want)
		}
		if c.want == 421 && (w.Header().Get("ngrok-error-code") != "ERR_NGROK_3200" || w.Header().Get("Connection") != "close") {
			t.Errorf("%s: headers %v", name, w.Header())
		}
	}
}

// TestPooledBindsAgreeOnTLS: pooled binds of one endpoint must ask the same of the client's TLS
// (the handshake comes before the choice of a bind), so a pooled bind with other mutual TLS CAs
// or no mutual TLS at all is refused.
func TestPooledBindsAgreeOnTLS(t *testing.T) {
	a, b := newTestCA(t, "CA a"), newTestCA(t, "CA b")
	settings := func(ca *testCA) *endpointTLS {
		raw, _ := json.Marshal(map[string]any{"MutualTLSCA": map[string]any{"mutual_tls_ca": ca.pem}})
		s, be := tlsSettings("https", raw)
		if be != nil {
			t.Fatal(be)
		}
		return s
	}
	r := NewRegistry()
	sess := &session{cred: store.AgentCredential{AccountID: "acct_1"}}
	bind := func(s *endpointTLS) *Tunnel {
		return &Tunnel{sess: sess, proto: "https", host: "pool.example.com", pooled: true, tls: s}
	}
	if conflict, first := r.add(bind(settings(a))); conflict != "" || !first {
		t.Fatalf("first bind: %q", conflict)
	}
	if conflict, _ := r.add(bind(settings(a))); conflict != "" {
		t.Errorf("a pooled bind with the same CA: %q", conflict)
	}
	for name, s := range map[string]*endpointTLS{"another CA": settings(b), "no mutual TLS": nil} {
		if conflict, _ := r.add(bind(s)); conflict != "pool-tls" {
			t.Errorf("a pooled bind with %s: %q, want pool-tls", name, conflict)
		}
	}
}
