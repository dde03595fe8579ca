package agents

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// bindCA is a certificate authority made for one test, for client certificates (mutual TLS)
// and for the certificates an agent gives for TLS termination.
type bindCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newBindCA(t *testing.T, name string) *bindCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &bindCA{cert: cert, key: key, pool: pool}
}

// issue signs a certificate for name (a server name, or a client's) and returns it with the PEM
// of its chain (leaf, then the CA) and of its key.
func (ca *bindCA) issue(t *testing.T, name string) (cert tls.Certificate, chainPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pemChain([][]byte{der, ca.cert.Raw}), pemKey(t, key)
}

// httpsRequest sends one GET for host on conn (a TLS connection to the listener) and returns
// the response, or the error that came instead of one.
func httpsRequest(conn net.Conn, host string) (*http.Response, error) {
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestBindTLSMutualTLS: an https endpoint bound with WithMutualTLSCA asks for a client
// certificate in the handshake of its name, naming the agent's CA, and lets through only a
// client whose certificate that CA signed. A client without one, or with another CA's, fails the
// handshake (TLS 1.3 alerts "certificate required" and "unknown certificate authority", as an
// HTTPS edge with mutual_tls does) and nothing reaches the agent. Another name on the same
// listener asks for no certificate. A keep-alive connection opened before the bind, which was
// never asked for a certificate, gets 421 ERR_NGROK_3200 for its next request. A pooled bind
// with other CAs, or none, is refused with ERR_NGROK_334.
func TestBindTLSMutualTLS(t *testing.T) {
	w := start(t, "--public-idle-timeout", "10m")
	w.reserveDomain("late.example.com")
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()
	ca, stranger := newBindCA(t, "agent's client CA"), newBindCA(t, "another CA")
	good, _, _ := ca.issue(t, "good client")
	bad, _, _ := stranger.issue(t, "stranger")

	var reached atomic.Int32
	inside := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = rw.Write([]byte("inside"))
	})
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("mtls.edgeplane.app"), config.WithMutualTLSCA(ca.cert)))
	if err != nil {
		t.Fatalf("listen with mutual TLS: %v", err)
	}
	serveTunnel(t, tun, inside)
	open, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("open.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen without mutual TLS: %v", err)
	}
	serveTunnel(t, open, http.HandlerFunc(hello))

	// dial makes a TLS connection for name presenting cert (none when nil); asked is nil when
	// the server asked for no client certificate, else the names of the CAs it asked one of.
	dial := func(name string, cert *tls.Certificate) (c net.Conn, asked [][]byte, err error) {
		conf := &tls.Config{ServerName: name, RootCAs: w.ca, NextProtos: []string{"http/1.1"},
			GetClientCertificate: func(req *tls.CertificateRequestInfo) (*tls.Certificate, error) {
				asked = append([][]byte{}, req.AcceptableCAs...)
				if cert == nil {
					return &tls.Certificate{}, nil
				}
				return cert, nil
			}}
		c, err = tls.Dial("tcp", w.https, conf)
		return c, asked, err
	}
	c, asked, err := dial("mtls.edgeplane.app", &good)
	if err != nil {
		t.Fatalf("handshake with the CA's client certificate: %v", err)
	}
	if len(asked) != 1 || !bytes.Equal(asked[0], ca.cert.RawSubject) {
		t.Errorf("the handshake asked for a certificate of %d CAs, want the agent's CA only", len(asked))
	}
	resp, err := httpsRequest(c, "mtls.edgeplane.app")
	c.Close()
	if err != nil || resp.StatusCode != 200 || reached.Load() != 1 {
		t.Fatalf("a client with the CA's certificate: %v %v (reached %d)", resp, err, reached.Load())
	}

	for _, refused := range []struct {
		what string
		cert *tls.Certificate
		want string
	}{
		{"no certificate", nil, "tls: certificate required"},
		{"another CA's certificate", &bad, "tls: unknown certificate authority"},
	} {
		c, _, err := dial("mtls.edgeplane.app", refused.cert)
		if err == nil {
			err = serverAlert(c)
		}
		if err == nil || !strings.Contains(err.Error(), refused.want) {
			t.Errorf("%s: %v, want the handshake to fail with %q", refused.what, err, refused.want)
		}
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("refused clients reached the agent: %d requests", n)
	}

	// Client certificates are asked for by name: another endpoint asks none.
	c, asked, err = dial("open.edgeplane.app", nil)
	if err != nil || asked != nil {
		t.Fatalf("an endpoint without mutual TLS: %v (asked %d CAs)", err, len(asked))
	}
	resp, err = httpsRequest(c, "open.edgeplane.app")
	c.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an endpoint without mutual TLS: %v %v", resp, err)
	}

	// A connection made while the name had no endpoint was never asked for a certificate: once
	// the endpoint binds with mutual TLS, its next request is sent to connect again.
	var early net.Conn
	eventually(t, 5*time.Second, "the reserved name gets a certificate", func() bool {
		early, _, err = dial("late.example.com", nil)
		return err == nil
	})
	defer early.Close()
	if resp, err := httpsRequest(early, "late.example.com"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("the reserved name before its bind: %v %v", resp, err)
	}
	late, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("late.example.com"), config.WithMutualTLSCA(ca.cert)))
	if err != nil {
		t.Fatalf("listen late.example.com: %v", err)
	}
	serveTunnel(t, late, inside)
	resp, err = httpsRequest(early, "late.example.com")
	if err != nil || resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3200" || !resp.Close {
		t.Fatalf("a request on a connection made before the bind: %v %v", resp, err)
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("the request of the early connection reached the agent")
	}
	c, _, err = dial("late.example.com", &good)
	if err != nil {
		t.Fatalf("dial late.example.com with a certificate: %v", err)
	}
	resp, err = httpsRequest(c, "late.example.com")
	c.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a new connection with the certificate: %v %v", resp, err)
	}

	// The handshake comes before the choice of a pooled bind, so pooled binds must agree on it.
	pooled := func(cas ...*x509.Certificate) error {
		opts := []config.HTTPEndpointOption{config.WithDomain("pool.edgeplane.app"), config.WithPoolingEnabled(true)}
		if cas != nil {
			opts = append(opts, config.WithMutualTLSCA(cas...))
		}
		tun, err := sess.Listen(ctx, config.HTTPEndpoint(opts...))
		if err == nil {
			t.Cleanup(func() { tun.Close() })
		}
		return err
	}
	if err := pooled(ca.cert); err != nil {
		t.Fatalf("the first pooled bind: %v", err)
	}
	if err := pooled(ca.cert); err != nil {
		t.Errorf("a pooled bind with the same CA: %v", err)
	}
	for what, cas := range map[string][]*x509.Certificate{"another CA": {stranger.cert}, "no mutual TLS": nil} {
		if err := pooled(cas...); ngrokCode(err) != "ERR_NGROK_334" || !strings.Contains(err.Error(), "other TLS settings") {
			t.Errorf("a pooled bind with %s: %v, want ERR_NGROK_334 naming the TLS settings", what, err)
		}
	}
}

// serverAlert returns the error of the first read on c, a client connection whose handshake
// the client saw complete: with TLS 1.3 the client's side is over before the server has checked
// its certificate, and the server's refusal comes as an alert with the first read. Nothing is
// written first (bytes the server never reads would make its close a reset, which could
// overtake the alert).
func serverAlert(c net.Conn) error {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err
}

// acceptPlain answers each connection of a tls endpoint with whether its proxy header said
// PassthroughTLS and the first line it read, quoted: a terminated endpoint's agent gets
// plaintext. It returns the count of connections the agent got.
func acceptPlain(tun ngrok.Tunnel) *atomic.Int32 {
	var n atomic.Int32
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "passthrough=%v read %q\n", c.(ngrok.Conn).PassthroughTLS(), line)
			}()
		}
	}()
	return &n
}

// TestBindTLSTermination: a tls endpoint bound with WithTermination is terminated by edgeplane
// with the agent's certificate, and the agent reads the client's plaintext (PassthroughTLS
// false); with WithTLSTermination() and no certificate, edgeplane presents its CA's for the
// name. Termination with mutual TLS asks the client for a certificate of the agent's CA. Mutual
// TLS without termination is refused with ERR_NGROK_1694, and a key of another certificate with
// ERR_NGROK_301 naming the key.
func TestBindTLSTermination(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()
	ca := newBindCA(t, "agent's server CA")
	server, chainPEM, keyPEM := ca.issue(t, "term.edgeplane.app")

	own, err := sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("term.edgeplane.app"), config.WithTermination(chainPEM, keyPEM)))
	if err != nil {
		t.Fatalf("listen with termination: %v", err)
	}
	acceptPlain(own)
	talk := func(name string, conf *tls.Config) (*tls.Conn, string, error) {
		conf.ServerName = name
		c, err := tls.Dial("tcp", w.https, conf)
		if err != nil {
			return nil, "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "hello\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		return c, line, err
	}
	c, got, err := talk("term.edgeplane.app", &tls.Config{RootCAs: ca.pool})
	if err != nil {
		t.Fatalf("a client of the terminated endpoint: %v", err)
	}
	if peer := c.ConnectionState().PeerCertificates; len(peer) != 2 || !bytes.Equal(peer[0].Raw, server.Certificate[0]) {
		t.Errorf("the client saw %d certificates, want the agent's chain", len(peer))
	}
	if got != "passthrough=false read \"hello\\n\"\n" {
		t.Errorf("the agent answered %q, want the plaintext line", got)
	}

	auto, err := sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("auto.edgeplane.app"), config.WithTLSTermination()))
	if err != nil {
		t.Fatalf("listen with termination and no certificate: %v", err)
	}
	acceptPlain(auto)
	if _, got, err := talk("auto.edgeplane.app", &tls.Config{RootCAs: w.ca}); err != nil || got != "passthrough=false read \"hello\\n\"\n" {
		t.Errorf("termination with edgeplane's certificate: %q %v", got, err)
	}

	clients := newBindCA(t, "agent's client CA")
	client, _, _ := clients.issue(t, "client")
	_, mchain, mkey := ca.issue(t, "mterm.edgeplane.app")
	mutual, err := sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("mterm.edgeplane.app"),
		config.WithTermination(mchain, mkey), config.WithMutualTLSCA(clients.cert)))
	if err != nil {
		t.Fatalf("listen with termination and mutual TLS: %v", err)
	}
	reached := acceptPlain(mutual)
	if _, got, err := talk("mterm.edgeplane.app", &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{client}}); err != nil ||
		got != "passthrough=false read \"hello\\n\"\n" {
		t.Errorf("a client with a certificate of the agent's CA: %q %v", got, err)
	}
	c, err = tls.Dial("tcp", w.https, &tls.Config{ServerName: "mterm.edgeplane.app", RootCAs: ca.pool})
	if err == nil {
		err = serverAlert(c)
	}
	if err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
		t.Errorf("a client without a certificate: %v, want the handshake to fail with \"certificate required\"", err)
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("the agent got %d connections, want only the one with a certificate", n)
	}

	_, err = sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("pass.edgeplane.app"), config.WithMutualTLSCA(clients.cert)))
	if code := ngrokCode(err); code != "ERR_NGROK_1694" {
		t.Errorf("mutual TLS on a passed-through tls endpoint: %v, want ERR_NGROK_1694", err)
	}
	_, _, otherKey := ca.issue(t, "mismatch.edgeplane.app")
	_, err = sess.Listen(ctx, config.TLSEndpoint(config.WithDomain("mismatch.edgeplane.app"), config.WithTermination(chainPEM, otherKey)))
	if code := ngrokCode(err); code != "ERR_NGROK_301" || !strings.Contains(err.Error(), "key does not match the certificate") {
		t.Errorf("termination with another certificate's key: %v, want ERR_NGROK_301 naming the key", err)
	}
}
