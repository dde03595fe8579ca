package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
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

// tlsTalk opens a TLS connection to the listener from the local address from ("" for any),
// sends a line and returns the agent's answer and the handshake's state; an error is the
// handshake's or the answer's.
func tlsTalk(w *world, from string, cfg *tls.Config) (string, tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := tls.DialWithDialer(d, "tcp", w.https, cfg)
	if err != nil {
		return "", tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "hello\n"); err != nil {
		return "", c.ConnectionState(), err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, c.ConnectionState(), err
}

// conditionalTLSPolicy is a traffic policy applying terminate-tls with cfg when expr holds.
func conditionalTLSPolicy(t *testing.T, expr string, cfg map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"on_tcp_connect": []any{map[string]any{"expressions": []string{expr},
		"actions": []any{map[string]any{"type": "terminate-tls", "config": cfg}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const plainHello = "passthrough=false read \"hello\\n\"\n"

// TestTerminateTLSOnEdges: a TLS edge's traffic policy sets its TLS with terminate-tls. Account
// A's edge is terminated here with the action's certificate, TLS 1.3 only, a client certificate
// of its CA required (a client outside them fails and nothing reaches the backend). A second
// edge of A applies terminate-tls only to the server name its rule matches, the other name
// keeping its tls_termination module's TLS; an agent's https endpoint applies it only to the
// client address its rule matches, as does a tls endpoint (the others' TLS passed through); an
// HTTPS edge takes its route's terminate-tls for its
// handshake. Account B's edges on other names are unaffected. What cannot
// be applied at the ClientHello is refused by the API (400 naming the expression) and as a bind
// (ERR_NGROK_301).
func TestTerminateTLSOnEdges(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	ctx := context.Background()
	ca := newBindCA(t, "edge's server CA")
	serverA, chainA, keyA := ca.issue(t, "tte-a.example.com")
	serverY, chainY, keyY := ca.issue(t, "tte-y.example.com")
	serverH, chainH, keyH := ca.issue(t, "tth-a.example.com")
	clients := newBindCA(t, "edge's client CA")
	client, _, _ := clients.issue(t, "client")
	clientCAs := string(pemChain([][]byte{clients.cert.Raw}))
	strict := func(chain, key []byte) map[string]any {
		cfg := map[string]any{"min_version": "1.3", "mutual_tls_certificate_authorities": []string{clientCAs}}
		if chain != nil {
			cfg["server_certificate"], cfg["server_private_key"] = string(chain), string(key)
		}
		return cfg
	}
	backend := func(w *world, label string) (string, *atomic.Int32) {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(ctx, config.LabeledTunnel(config.WithLabel("edge", label)))
		if err != nil {
			t.Fatalf("labeled tunnel %s: %v", label, err)
		}
		n := acceptPlain(tun)
		return w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": label}}), n
	}
	groupA, reachedA := backend(wa, "tte-a")
	for _, d := range []string{"tte-a.example.com", "tte-x.example.com", "tte-y.example.com"} {
		wa.reserveDomain(d)
	}
	edgeA := wa.mustCreate("/edges/tls", map[string]any{"hostports": []string{"tte-a.example.com:443"},
		"backend": map[string]any{"backend_id": groupA}, "traffic_policy": map[string]any{"value": terminateTLSPolicy(t, strict(chainA, keyA))}})
	wa.mustCreate("/edges/tls", map[string]any{"hostports": []string{"tte-x.example.com:443", "tte-y.example.com:443"},
		"backend": map[string]any{"backend_id": groupA}, "tls_termination": map[string]any{"terminate_at": "edge"},
		"traffic_policy": map[string]any{"value": conditionalTLSPolicy(t, "conn.tls.sni == 'tte-y.example.com'", strict(chainY, keyY))}})
	groupB, _ := backend(wb, "tte-b")
	wb.reserveDomain("tte-b.example.com")
	wb.mustCreate("/edges/tls", map[string]any{"hostports": []string{"tte-b.example.com:443"},
		"backend": map[string]any{"backend_id": groupB}, "tls_termination": map[string]any{"terminate_at": "edge"}})

	// A's edge: the action's certificate, TLS 1.3, a client certificate of its CA.
	withCert := &tls.Config{ServerName: "tte-a.example.com", RootCAs: ca.pool, Certificates: []tls.Certificate{client}}
	var line string
	var st tls.ConnectionState
	eventually(t, 5*time.Second, "A's edge terminates with terminate-tls", func() bool {
		line, st, _ = tlsTalk(wa, "", withCert)
		return line == plainHello
	})
	if st.Version != tls.VersionTLS13 || string(st.PeerCertificates[0].Raw) != string(serverA.Certificate[0]) {
		t.Errorf("A's edge: version %x, the action's certificate %v", st.Version, string(st.PeerCertificates[0].Raw) == string(serverA.Certificate[0]))
	}
	before := reachedA.Load()
	old := withCert.Clone()
	old.MaxVersion = tls.VersionTLS12
	if line, _, err := tlsTalk(wa, "", old); err == nil || line != "" {
		t.Errorf("a TLS 1.2 client of A's edge: %q %v", line, err)
	}
	noCert := &tls.Config{ServerName: "tte-a.example.com", RootCAs: ca.pool}
	if line, _, err := tlsTalk(wa, "", noCert); err == nil || line != "" {
		t.Errorf("a client of A's edge without a certificate: %q %v", line, err)
	}
	if n := reachedA.Load(); n != before {
		t.Errorf("refused clients reached A's backend (%d connections)", n-before)
	}

	// The second edge: terminate-tls on tte-y only; tte-x keeps its module's TLS. It may reach
	// the plan after the first (until then its reserved name's HTTPS answers a plain line 400),
	// so it is waited for by its own answer.
	var err error
	eventually(t, 5*time.Second, "the second edge carries tte-x", func() bool {
		line, st, err = tlsTalk(wa, "", &tls.Config{ServerName: "tte-x.example.com", RootCAs: wa.ca, MaxVersion: tls.VersionTLS12})
		return line == plainHello
	})
	if err != nil || line != plainHello || st.Version != tls.VersionTLS12 {
		t.Errorf("tte-x (no rule matches): %q %v, version %x", line, err, st.Version)
	}
	if line, _, err := tlsTalk(wa, "", &tls.Config{ServerName: "tte-y.example.com", RootCAs: ca.pool}); err == nil || line != "" {
		t.Errorf("tte-y without a client certificate: %q %v", line, err)
	}
	line, st, err = tlsTalk(wa, "", &tls.Config{ServerName: "tte-y.example.com", RootCAs: ca.pool, Certificates: []tls.Certificate{client}})
	if err != nil || line != plainHello || st.Version != tls.VersionTLS13 || string(st.PeerCertificates[0].Raw) != string(serverY.Certificate[0]) {
		t.Errorf("tte-y (its rule matches): %q %v, version %x", line, err, st.Version)
	}

	// B's edge on another name: the host's certificate, TLS 1.2, no client certificate.
	eventually(t, 5*time.Second, "B's edge", func() bool {
		line, st, _ = tlsTalk(wb, "", &tls.Config{ServerName: "tte-b.example.com", RootCAs: wb.ca, MaxVersion: tls.VersionTLS12})
		return line == plainHello
	})
	if st.Version != tls.VersionTLS12 {
		t.Errorf("B's edge: version %x", st.Version)
	}

	// An agent's https endpoint: terminate-tls for the client address its rule matches only.
	_, tokenA := wa.credential()
	sessA := wa.mustConnect(tokenA)
	tun, err := sessA.Listen(ctx, config.HTTPEndpoint(config.WithDomain("tti.edgeplane.app"),
		config.WithTrafficPolicy(conditionalTLSPolicy(t, "conn.client_ip == '127.0.0.2'", strict(nil, nil)))))
	if err != nil {
		t.Fatalf("an https bind with a conditional terminate-tls: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "A") }))
	get := func(from string, cfg *tls.Config) (int, uint16, error) {
		d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := tls.DialWithDialer(d, "tcp", wa.https, cfg)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		resp, err := httpsRequest(c, "tti.edgeplane.app")
		if err != nil {
			return 0, 0, err
		}
		return resp.StatusCode, c.ConnectionState().Version, nil
	}
	plain := &tls.Config{ServerName: "tti.edgeplane.app", RootCAs: wa.ca, MaxVersion: tls.VersionTLS12}
	if code, v, err := get("127.0.0.1", plain); err != nil || code != 200 || v != tls.VersionTLS12 {
		t.Errorf("a client the rule does not match: %d %x %v", code, v, err)
	}
	if code, _, err := get("127.0.0.2", &tls.Config{ServerName: "tti.edgeplane.app", RootCAs: wa.ca}); err == nil {
		t.Errorf("a client the rule matches, without a certificate: %d", code)
	}
	if code, v, err := get("127.0.0.2", &tls.Config{ServerName: "tti.edgeplane.app", RootCAs: wa.ca, Certificates: []tls.Certificate{client}}); err != nil || code != 200 || v != tls.VersionTLS13 {
		t.Errorf("a client the rule matches, with a certificate: %d %x %v", code, v, err)
	}

	// An agent's tls endpoint: terminated here for the client its rule matches, the others'
	// TLS passed through to the agent, which answers with its own certificate.
	agentCert := selfSigned(t, "ttl.edgeplane.app")
	tunL, err := sessA.Listen(ctx, config.TLSEndpoint(config.WithDomain("ttl.edgeplane.app"),
		config.WithTrafficPolicy(conditionalTLSPolicy(t, "conn.client_ip == '127.0.0.2'", map[string]any{}))))
	if err != nil {
		t.Fatalf("a tls bind with a conditional terminate-tls: %v", err)
	}
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tunL}.Accept()
			if err != nil {
				return
			}
			go func() {
				var rc net.Conn = c
				if c.(ngrok.Conn).PassthroughTLS() {
					rc = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{agentCert}})
				}
				defer rc.Close()
				line, _ := bufio.NewReader(rc).ReadString('\n')
				fmt.Fprintf(rc, "passthrough=%v read %q\n", c.(ngrok.Conn).PassthroughTLS(), line)
			}()
		}
	}()
	line, st, err = tlsTalk(wa, "127.0.0.1", &tls.Config{ServerName: "ttl.edgeplane.app", InsecureSkipVerify: true})
	if err != nil || line != "passthrough=true read \"hello\\n\"\n" || string(st.PeerCertificates[0].Raw) != string(agentCert.Certificate[0]) {
		t.Errorf("a client of the tls endpoint its rule does not match: %q %v", line, err)
	}
	line, _, err = tlsTalk(wa, "127.0.0.2", &tls.Config{ServerName: "ttl.edgeplane.app", RootCAs: wa.ca})
	if err != nil || line != plainHello {
		t.Errorf("a client of the tls endpoint its rule matches: %q %v", line, err)
	}

	// HTTPS edges: a route's terminate-tls sets the edge's handshake; B's edge is unaffected.
	routeA := policyRoute(t, wa, "tth-a.example.com")
	policyRoute(t, wb, "tth-b.example.com")
	if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": terminateTLSPolicy(t, strict(chainH, keyH))}, nil); st != 200 {
		t.Fatalf("PUT the route's terminate-tls: %d", st)
	}
	getEdge := func(w *world, cfg *tls.Config) (int, tls.ConnectionState, error) {
		c, err := tls.Dial("tcp", w.https, cfg)
		if err != nil {
			return 0, tls.ConnectionState{}, err
		}
		defer c.Close()
		resp, err := httpsRequest(c, cfg.ServerName)
		if err != nil {
			return 0, c.ConnectionState(), err
		}
		return resp.StatusCode, c.ConnectionState(), nil
	}
	hCert := &tls.Config{ServerName: "tth-a.example.com", RootCAs: ca.pool, Certificates: []tls.Certificate{client}}
	eventually(t, 5*time.Second, "A's HTTPS edge takes its route's terminate-tls", func() bool {
		code, st, _ := getEdge(wa, hCert)
		return code == 200 && st.Version == tls.VersionTLS13 && string(st.PeerCertificates[0].Raw) == string(serverH.Certificate[0])
	})
	if code, _, err := getEdge(wa, &tls.Config{ServerName: "tth-a.example.com", RootCAs: ca.pool}); err == nil {
		t.Errorf("A's HTTPS edge answered a client without a certificate: %d", code)
	}
	// B's edge may reach the plan after A's: waited for by its route's answer.
	var codeB int
	var stB tls.ConnectionState
	eventually(t, 5*time.Second, "B's HTTPS edge answers", func() bool {
		codeB, stB, err = getEdge(wb, &tls.Config{ServerName: "tth-b.example.com", RootCAs: wb.ca, MaxVersion: tls.VersionTLS12})
		return codeB == 200
	})
	if err != nil || codeB != 200 || stB.Version != tls.VersionTLS12 {
		t.Errorf("B's HTTPS edge: %d %x %v", codeB, stB.Version, err)
	}

	// Refusals.
	var e apiError
	if st := wa.call("PUT", "/edges/tls/"+edgeA+"/traffic_policy", map[string]any{"value": conditionalTLSPolicy(t, "conn.tls.version == '1.3'", map[string]any{})}, &e); st != 400 ||
		e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, "on_tcp_connect[0].expressions:") || !strings.Contains(e.Msg, "conn.tls.version") {
		t.Errorf("PUT terminate-tls under an expression reading conn.tls.version: %d %s %q", st, e.ErrorCode, e.Msg)
	}
	if st := wa.call("PUT", "/edges/tls/"+edgeA+"/traffic_policy", map[string]any{"value": terminateTLSPolicy(t, map[string]any{"max_version": "1.4"})}, &e); st != 400 ||
		e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, "config.max_version:") {
		t.Errorf("PUT terminate-tls with max_version 1.4: %d %s %q", st, e.ErrorCode, e.Msg)
	}
	if _, err := sessA.Listen(ctx, config.HTTPEndpoint(config.WithDomain("tti-bad.edgeplane.app"),
		config.WithTrafficPolicy(conditionalTLSPolicy(t, "conn.tls.client.subject.common_name == 'x'", map[string]any{})))); ngrokCode(err) != "ERR_NGROK_301" ||
		!strings.Contains(err.Error(), "conn.tls.client.subject.common_name") {
		t.Errorf("a bind with terminate-tls under an expression reading the client certificate: %v, want ERR_NGROK_301 naming it", err)
	}
}
