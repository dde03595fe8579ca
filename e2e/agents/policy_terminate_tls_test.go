package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// terminateTLSPolicy is a traffic policy whose on_tcp_connect runs terminate-tls with cfg.
func terminateTLSPolicy(t *testing.T, cfg map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"on_tcp_connect": []any{map[string]any{"actions": []any{
		map[string]any{"type": "terminate-tls", "config": cfg}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTerminateTLSAction: agents' traffic policies set their endpoints' TLS with terminate-tls.
// Account A's tls endpoint is terminated by edgeplane with the policy's certificate, TLS 1.3 only
// (a TLS 1.2 client fails the handshake), and the agent reads the plaintext; account B's https
// endpoint presents its own certificate, TLS 1.2 at most, and requires client certificates of
// its CA (a client without one fails the handshake and nothing reaches the agent). A
// configuration ngrok refuses is refused by the API (400 ERR_NGROK_215) and as a bind
// (ERR_NGROK_301), naming the field, as is terminate-tls where it cannot apply.
func TestTerminateTLSAction(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	ctx := context.Background()
	ca := newBindCA(t, "agent's server CA")
	serverA, chainA, keyA := ca.issue(t, "tt-a.edgeplane.app")
	_, chainB, keyB := ca.issue(t, "tt-b.edgeplane.app")
	clients := newBindCA(t, "agent's client CA")
	client, _, _ := clients.issue(t, "client")

	_, tokenA := wa.credential()
	sessA := wa.mustConnect(tokenA)
	tunA, err := sessA.Listen(ctx, config.TLSEndpoint(config.WithDomain("tt-a.edgeplane.app"), config.WithTrafficPolicy(terminateTLSPolicy(t,
		map[string]any{"server_certificate": string(chainA), "server_private_key": string(keyA), "min_version": "1.3"}))))
	if err != nil {
		t.Fatalf("A's tls bind with terminate-tls: %v", err)
	}
	acceptPlain(tunA)
	_, tokenB := wb.credential()
	tunB, err := wb.mustConnect(tokenB).Listen(ctx, config.HTTPEndpoint(config.WithDomain("tt-b.edgeplane.app"), config.WithTrafficPolicy(terminateTLSPolicy(t,
		map[string]any{"server_certificate": string(chainB), "server_private_key": string(keyB), "max_version": "1.2",
			"mutual_tls_certificate_authorities": []string{string(pemChain([][]byte{clients.cert.Raw}))}}))))
	if err != nil {
		t.Fatalf("B's https bind with terminate-tls: %v", err)
	}
	var reachedB atomic.Int32
	serveTunnel(t, tunB, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reachedB.Add(1)
		fmt.Fprint(w, "B")
	}))

	// A: terminated with the policy's certificate, TLS 1.3 only, plaintext to the agent.
	c, err := tls.Dial("tcp", wa.https, &tls.Config{ServerName: "tt-a.edgeplane.app", RootCAs: ca.pool})
	if err != nil {
		t.Fatalf("a client of A's endpoint: %v", err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "hello\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	st := c.ConnectionState()
	c.Close()
	if line != "passthrough=false read \"hello\\n\"\n" || st.Version != tls.VersionTLS13 || string(st.PeerCertificates[0].Raw) != string(serverA.Certificate[0]) {
		t.Errorf("A's endpoint: %q, version %x, the policy's certificate %v", line, st.Version, string(st.PeerCertificates[0].Raw) == string(serverA.Certificate[0]))
	}
	if c, err := tls.Dial("tcp", wa.https, &tls.Config{ServerName: "tt-a.edgeplane.app", RootCAs: ca.pool, MaxVersion: tls.VersionTLS12}); err == nil {
		c.Close()
		t.Error("a TLS 1.2 client completed a handshake with A's TLS 1.3 endpoint")
	}

	// B: its certificate, TLS 1.2, a client certificate of its CA required.
	c, err = tls.Dial("tcp", wa.https, &tls.Config{ServerName: "tt-b.edgeplane.app", RootCAs: ca.pool, Certificates: []tls.Certificate{client}})
	if err != nil {
		t.Fatalf("a client with a certificate of B's CA: %v", err)
	}
	resp, err := httpsRequest(c, "tt-b.edgeplane.app")
	if v := c.ConnectionState().Version; err != nil || resp.StatusCode != 200 || v != tls.VersionTLS12 {
		t.Errorf("B's endpoint with a client certificate: %v %v, version %x", err, resp, v)
	}
	c.Close()
	before := reachedB.Load()
	if c, err := tls.Dial("tcp", wa.https, &tls.Config{ServerName: "tt-b.edgeplane.app", RootCAs: ca.pool}); err == nil {
		if _, err := httpsRequest(c, "tt-b.edgeplane.app"); err == nil {
			t.Error("a client without a certificate got an answer from B's endpoint")
		}
		c.Close()
	}
	if reachedB.Load() != before {
		t.Error("a client without a certificate reached B's agent")
	}

	// Refusals, naming the field or the reason.
	route := policyRoute(t, wa, "tt-route.example.com")
	var e apiError
	if st := wa.call("PUT", route+"/traffic_policy", map[string]any{"value": terminateTLSPolicy(t, map[string]any{"min_version": "1.1"})}, &e); st != 400 ||
		e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, "on_tcp_connect[0].actions[0].config.min_version:") {
		t.Errorf("PUT terminate-tls with min_version 1.1: %d %s %q", st, e.ErrorCode, e.Msg)
	}
	if st := wa.call("PUT", route+"/traffic_policy", map[string]any{"value": terminateTLSPolicy(t, map[string]any{"server_certificate": string(chainA), "server_private_key": string(keyB)})}, &e); st != 400 ||
		!strings.Contains(e.Msg, "config.server_private_key:") {
		t.Errorf("PUT terminate-tls with another certificate's key: %d %s %q", st, e.ErrorCode, e.Msg)
	}
	for name, x := range map[string]struct {
		opts config.TLSEndpointOption
		doc  string
		want string
	}{
		"with-expr": {config.WithTrafficPolicy(`{"on_tcp_connect":[{"expressions":["conn.tls.version == '1.3'"],"actions":[{"type":"terminate-tls"}]}]}`), "", "before conn.tls.version is known"},
		"strategy":  {config.WithTrafficPolicy(terminateTLSPolicy(t, map[string]any{"mutual_tls_verification_strategy": "maybe"})), "", "config.mutual_tls_verification_strategy"},
		"both":      {config.WithTermination(chainA, keyA), terminateTLSPolicy(t, map[string]any{}), "give one of them"},
	} {
		opts := []config.TLSEndpointOption{config.WithDomain("tt-" + name + ".edgeplane.app"), x.opts}
		if x.doc != "" {
			opts = append(opts, config.WithTrafficPolicy(x.doc))
		}
		if _, err := sessA.Listen(ctx, config.TLSEndpoint(opts...)); ngrokCode(err) != "ERR_NGROK_301" || !strings.Contains(err.Error(), x.want) {
			t.Errorf("bind %s: %v, want ERR_NGROK_301 naming %q", name, err, x.want)
		}
	}
	if _, err := sessA.Listen(ctx, config.HTTPEndpoint(config.WithDomain("tt-http.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithTrafficPolicy(terminateTLSPolicy(t, map[string]any{})))); ngrokCode(err) != "ERR_NGROK_301" || !strings.Contains(err.Error(), "terminate-tls") {
		t.Errorf("an http bind with terminate-tls: %v, want ERR_NGROK_301 naming terminate-tls", err)
	}
}
