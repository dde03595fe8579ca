package agents

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestTrafficPolicyJA4OnTLSBind: the on_tcp_connect rules of an agent's tls bind read
// conn.tls.ja4_fingerprint, the fingerprint of the ClientHello the listener read to find the
// endpoint, before the TLS is passed through. Account A's bind denies the fingerprint of Go's
// TLS 1.3 client: that client's connection is closed, its handshake never completing, and A's
// agent sees nothing of it, while a TLS 1.2 client (another fingerprint) reaches the agent.
// Account B's tls bind, without that rule, takes both clients; B's TLS edge with a rule on the
// TLS 1.2 client's fingerprint closes that one and carries the other. On a tcp bind the fingerprint
// reads as empty (no TLS), as on plain HTTP: a rule closing the connections whose fingerprint is
// not empty lets a TCP client through.
func TestTrafficPolicyJA4OnTLSBind(t *testing.T) {
	wa := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "29000-29999")
	wb := wa.asAccount("tenant-b")

	clientTLS := func(name string, version uint16) *tls.Config {
		return &tls.Config{ServerName: name, InsecureSkipVerify: true, MinVersion: version, MaxVersion: version}
	}
	fingerprint := func(version uint16) string {
		return fingerprintOf(t, func(addr string) {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, clientTLS("ja4.example", version))
			if err == nil {
				c.Close()
			}
		})
	}
	fp13, fp12 := fingerprint(tls.VersionTLS13), fingerprint(tls.VersionTLS12)
	if !strings.HasPrefix(fp13, "t13") || !strings.HasPrefix(fp12, "t12") {
		t.Fatalf("the clients' fingerprints as the test's listener reads them: %q and %q", fp13, fp12)
	}

	listen := func(sess ngrok.Session, opts config.Tunnel, cert *tls.Certificate) (string, *atomic.Int32) {
		return listenEcho(t, sess, opts, cert)
	}
	talk := func(c net.Conn) string {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	talkTLS := func(name string, version uint16) string {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", wa.https, clientTLS(name, version))
		if err != nil {
			return "handshake: " + err.Error()
		}
		return talk(c)
	}

	deny := `{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint == '` + fp13 + `'"],"actions":[{"type":"deny"}]}]}`
	_, tokenA := wa.credential()
	sessA := wa.mustConnect(tokenA)
	certA := selfSigned(t, "ja4-tls-a.edgeplane.app")
	_, seenA := listen(sessA, config.TLSEndpoint(config.WithDomain("ja4-tls-a.edgeplane.app"), config.WithTrafficPolicy(deny)), &certA)
	_, tokenB := wb.credential()
	sessB := wb.mustConnect(tokenB)
	certB := selfSigned(t, "ja4-tls-b.edgeplane.app")
	_, seenB := listen(sessB, config.TLSEndpoint(config.WithDomain("ja4-tls-b.edgeplane.app")), &certB)

	if got := talkTLS("ja4-tls-a.edgeplane.app", tls.VersionTLS13); !strings.HasPrefix(got, "handshake: ") || seenA.Load() != 0 {
		t.Errorf("A's bind to the denied fingerprint: got %q, the agent saw %d connections; want the handshake to fail unseen", got, seenA.Load())
	}
	if got := talkTLS("ja4-tls-a.edgeplane.app", tls.VersionTLS12); got != "echo hello" || seenA.Load() != 1 {
		t.Errorf("A's bind to another fingerprint: got %q, the agent saw %d connections; want it carried", got, seenA.Load())
	}
	for i, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		if got := talkTLS("ja4-tls-b.edgeplane.app", version); got != "echo hello" || seenB.Load() != int32(i+1) {
			t.Errorf("B's bind to %x: got %q, B's agent saw %d connections; A's rule is not B's", version, got, seenB.Load())
		}
	}
	if seenA.Load() != 1 {
		t.Errorf("A's agent saw %d connections, want 1", seenA.Load())
	}

	// B's TLS edge (passed through to B's agent) with B's own rule on the other fingerprint:
	// the edge closes that client's connection unseen and carries Go's TLS 1.3 client.
	wb.reserveDomain("ja4-edge-b.example.com")
	_, seenEdge := listen(sessB, config.LabeledTunnel(config.WithLabel("edge", "ja4-edge-b")), &certB)
	group := wb.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "ja4-edge-b"}})
	edge := wb.mustCreate("/edges/tls", map[string]any{"hostports": []string{"ja4-edge-b.example.com:443"}, "backend": map[string]any{"backend_id": group}})
	eventually(t, 5*time.Second, "B's TLS edge carries bytes", func() bool { return talkTLS("ja4-edge-b.example.com", tls.VersionTLS12) == "echo hello" })
	edgeDeny := `{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint == '` + fp12 + `'"],"actions":[{"type":"deny"}]}]}`
	if st := wb.call("PUT", "/edges/tls/"+edge+"/traffic_policy", map[string]any{"value": edgeDeny}, nil); st != 200 {
		t.Fatalf("put B's TLS edge's traffic_policy: %d", st)
	}
	eventually(t, 5*time.Second, "B's TLS edge closes the TLS 1.2 client's connection", func() bool {
		return strings.HasPrefix(talkTLS("ja4-edge-b.example.com", tls.VersionTLS12), "handshake: ")
	})
	before := seenEdge.Load()
	if got := talkTLS("ja4-edge-b.example.com", tls.VersionTLS12); !strings.HasPrefix(got, "handshake: ") || seenEdge.Load() != before {
		t.Errorf("B's TLS edge to the denied fingerprint: got %q, the agent saw %d more connections", got, seenEdge.Load()-before)
	}
	if got := talkTLS("ja4-edge-b.example.com", tls.VersionTLS13); got != "echo hello" || seenEdge.Load() != before+1 {
		t.Errorf("B's TLS edge to another fingerprint: got %q, the agent saw %d more connections; want it carried", got, seenEdge.Load()-before)
	}
	if got := talkTLS("ja4-tls-a.edgeplane.app", tls.VersionTLS12); got != "echo hello" {
		t.Errorf("A's bind after B's edge rule: got %q; B's rule is not A's", got)
	}

	// A tcp bind: no TLS, the fingerprint is empty, and the rule lets the client through.
	tcpURL, seenTCP := listen(sessA, config.TCPEndpoint(config.WithTrafficPolicy(
		`{"on_tcp_connect":[{"expressions":["conn.tls.ja4_fingerprint != ''"],"actions":[{"type":"deny"}]}]}`)), nil)
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(tcpURL, "tcp://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := talk(c); got != "echo hello" || seenTCP.Load() != 1 {
		t.Errorf("a tcp bind whose rule closes non-empty fingerprints: got %q, the agent saw %d connections; want it carried", got, seenTCP.Load())
	}
}
