package enforce

import (
	"crypto/tls"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/ja4"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// hello13 is a TLS 1.3 ClientHello as a browser sends it; hello12 one of a client that offers
// TLS 1.2 only, with another fingerprint.
func hello13() *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{
		SupportedVersions: []uint16{0x0304, 0x0303},
		CipherSuites:      []uint16{0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f},
		Extensions:        []uint16{0x0000, 0x0010, 0x000a, 0x000b, 0x000d, 0x002b, 0x0033},
		SignatureSchemes:  []tls.SignatureScheme{0x0403, 0x0804, 0x0401},
		SupportedProtos:   []string{"h2", "http/1.1"},
		ServerName:        "db.example.com",
	}
}

func hello12() *tls.ClientHelloInfo {
	h := hello13()
	h.SupportedVersions = []uint16{0x0303}
	h.CipherSuites = []uint16{0xc02b, 0xc02f}
	h.SupportedProtos = nil
	return h
}

func connPolicy(t *testing.T, doc string) *ConnPolicy {
	t.Helper()
	p, err := trafficpolicy.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewConnPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestConnPolicyJA4: the on_tcp_connect rules of a TLS edge or endpoint read the fingerprint of
// the ClientHello the listener read as conn.tls.ja4_fingerprint, so that a rule closes the
// connections of one client and lets another's through; a TCP connection reads it as empty (no
// TLS, as plain HTTP does), and a TLS connection whose ClientHello the caller does not have fails
// closed rather than reading as one without TLS.
func TestConnPolicyJA4(t *testing.T) {
	fp13, fp12 := ja4.Fingerprint(hello13()), ja4.Fingerprint(hello12())
	if fp13 == fp12 || fp13 == "" {
		t.Fatalf("the test's hellos: %q and %q", fp13, fp12)
	}
	client, server := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}
	deny := connPolicy(t, `{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint == '`+fp13+`'"],"actions":[{"type":"deny"}]}]}`)
	if !deny.ja4 {
		t.Fatal("a policy reading the fingerprint does not say so")
	}
	if v := deny.Decide(client, server, &TLSHello{ServerName: "db.example.com", Info: hello13()}); v.Allow {
		t.Errorf("the denied fingerprint's connection was carried: %+v", v)
	}
	if v := deny.Decide(client, server, &TLSHello{ServerName: "db.example.com", Info: hello12()}); !v.Allow || v.Forward != nil {
		t.Errorf("another fingerprint's connection: %+v, want carried", v)
	}
	if v := deny.Decide(client, server, nil); !v.Allow {
		t.Error("a TCP connection was closed: its fingerprint must read as empty, not fail")
	}
	if deny.AllowTLS(client, server, "db.example.com") {
		t.Error("a TLS connection without its ClientHello was carried: it must fail closed")
	}
	empty := connPolicy(t, `{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint == ''"],"actions":[{"type":"deny"}]}]}`)
	if empty.Allow(client, server) {
		t.Error("a TCP connection's fingerprint does not read as empty")
	}
	if !empty.Decide(client, server, &TLSHello{Info: hello12()}).Allow {
		t.Error("a TLS connection without a server name read an empty fingerprint")
	}
	// forward-internal by fingerprint, on the policy's own account.
	fwd, err := trafficpolicy.Parse(`{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint == '` + fp12 + `'"],"actions":[{"type":"forward-internal","config":{"url":"tls://old-clients.internal"}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	online := onlineInternal{"acct_a": {{Scheme: "tls", Host: "old-clients.internal", Port: 443}}}
	fcp, err := NewConnPolicyWith(fwd, PolicyOptions{Internal: online, Endpoint: &trafficpolicy.Endpoint{Account: "acct_a"}})
	if err != nil {
		t.Fatal(err)
	}
	if v := fcp.Decide(client, server, &TLSHello{Info: hello12()}); !v.Allow || v.Forward == nil || v.Account != "acct_a" {
		t.Errorf("the old client's connection: %+v, want forwarded to acct_a's internal endpoint", v)
	}
	if v := fcp.Decide(client, server, &TLSHello{Info: hello13()}); !v.Allow || v.Forward != nil {
		t.Errorf("another client's connection: %+v, want carried", v)
	}
}

// TestConnPolicyJA4NotRead: a policy that does not read the fingerprint never asks for it (a
// ClientHello-less TLS connection is carried, where a policy reading it fails closed).
func TestConnPolicyJA4NotRead(t *testing.T) {
	cp := connPolicy(t, `{"on_tcp_connect":[{"expressions":["conn.tls.sni == 'closed.example.com'"],"actions":[{"type":"deny"}]}]}`)
	if cp.ja4 {
		t.Fatal("a policy not reading the fingerprint says it does")
	}
	client, server := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}
	if !cp.AllowTLS(client, server, "open.example.com") {
		t.Error("a connection the rule does not name was closed")
	}
}

// fingerprintedTestConn is a connection the listener fingerprinted (ingress's fingerprintedConn).
type fingerprintedTestConn struct {
	net.Conn
	fp string
}

func (c fingerprintedTestConn) JA4() (string, bool) { return c.fp, true }
func (c fingerprintedTestConn) NetConn() net.Conn   { return c.Conn }

// TestHTTPSConnectJA4: an https endpoint's (or an HTTPS route's) on_tcp_connect rules read the
// fingerprint the listener took of the connection's ClientHello, as its HTTP phases do.
func TestHTTPSConnectJA4(t *testing.T) {
	fp := ja4.Fingerprint(hello13())
	p, err := trafficpolicy.Parse(`{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint == '` + fp + `'"],"actions":[{"type":"deny"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTrafficPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	if !tp.ConnReads().JA4 {
		t.Fatal("the listener is not asked to fingerprint the policy's connections")
	}
	ask := func(fp string) ConnVerdict {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		r := httptest.NewRequest("GET", "https://app.example.com/", nil)
		tc := tls.Server(fingerprintedTestConn{Conn: a, fp: fp}, &tls.Config{})
		return tp.connect(r.WithContext(WithConn(r.Context(), &ConnInfo{Conn: tc, Start: time.Now()})))
	}
	if ask(fp).Allow {
		t.Error("the denied fingerprint's connection was carried")
	}
	if !ask(ja4.Fingerprint(hello12())).Allow {
		t.Error("another fingerprint's connection was closed")
	}
}
