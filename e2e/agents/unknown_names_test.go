package agents

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// handshake runs a TLS client handshake for name on the TLS listener, trusting edgeplane's CA,
// at most at version max (0: the newest), and returns its error.
func (w *world) handshake(t *testing.T, name string, max uint16) error {
	t.Helper()
	c, err := net.DialTimeout("tcp", w.https, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: w.ca, MaxVersion: max, InsecureSkipVerify: name == ""})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tc.HandshakeContext(ctx)
}

// TestUnknownTLSNames: on the TLS listener a handshake for a name edgeplane serves nothing for
// (or for no name) ends with the unrecognized_name alert, in TLS 1.3 and 1.2, not
// internal_error; a name under the service domain with nothing online gets a certificate for it
// and the "endpoint offline" page (404 ERR_NGROK_3200), as over plain HTTP. Account A's https
// endpoint and account B's TLS endpoint (passed through to its agent) keep their own.
func TestUnknownTLSNames(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	if err := listenAnswer(t, w.mustConnect(tokenA), "on-a.edgeplane.app", "A"); err != nil {
		t.Fatalf("A's bind: %v", err)
	}
	tun, err := b.mustConnect(tokenB).Listen(context.Background(), config.TLSEndpoint(config.WithDomain("tls-b.edgeplane.app")))
	if err != nil {
		t.Fatalf("B's TLS bind: %v", err)
	}
	go func() {
		for {
			c, err := tun.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("B's agent speaks first\n"))
			c.Close()
		}
	}()

	for _, name := range []string{"nobody.example.org", "edgeplane.app", "x.not-edgeplane.app", ""} {
		for _, max := range []uint16{0, tls.VersionTLS12} {
			err := w.handshake(t, name, max)
			if err == nil || !strings.Contains(err.Error(), "remote error: tls: unrecognized name") {
				t.Errorf("a handshake for %q (max version %x): %v, want the unrecognized_name alert", name, max, err)
			}
		}
	}

	c := w.httpsClient()
	for _, name := range []string{"parked.edgeplane.app", "a.b.edgeplane.app"} {
		if err := w.handshake(t, name, 0); err != nil {
			t.Errorf("a handshake for the offline name %s: %v, want a certificate for it", name, err)
		}
		st, body, h := get(t, c, "https://"+name+"/")
		if st != 404 || h.Get("Ngrok-Error-Code") != "ERR_NGROK_3200" || !strings.Contains(body, "offline") {
			t.Errorf("the offline name %s: %d %s %q", name, st, h.Get("Ngrok-Error-Code"), body)
		}
	}
	if st, body, _ := get(t, c, "https://on-a.edgeplane.app/"); st != 200 || body != "A" {
		t.Errorf("A's endpoint: %d %q", st, body)
	}
	conn, err := net.DialTimeout("tcp", w.https, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// B's agent gets the ClientHello untouched and answers in plaintext: the client's handshake
	// fails on it, which shows the connection reached the agent, not edgeplane's TLS.
	tc := tls.Client(conn, &tls.Config{ServerName: "tls-b.edgeplane.app", RootCAs: w.ca})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil || !strings.Contains(err.Error(), "does not look like a TLS handshake") {
		t.Errorf("B's TLS endpoint: %v, want its agent's plaintext", err)
	}
}
