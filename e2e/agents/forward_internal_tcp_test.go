package agents

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"

	"github.com/edgeplane/edgeplane/internal/acceptguard"
)

// internalTCPPort is the port of the internal tcp endpoints below: outside the server's TCP
// port range, it is only part of their names.
const internalTCPPort = "20999"

// serveTag answers each connection of tun with tag, the client address the agent was given and
// the 5 bytes the client sent, over the agent's own TLS when cert is set.
func serveTag(t *testing.T, tun net.Listener, tag string, cert *tls.Certificate) {
	t.Helper()
	t.Cleanup(func() { tun.Close() })
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				client := c.RemoteAddr().String()
				if cert != nil {
					c = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
				}
				buf := make([]byte, 5)
				_, _ = io.ReadFull(c, buf)
				_, _ = io.WriteString(c, tag+" "+client+" "+string(buf))
			}()
		}
	}()
}

// TestForwardInternalTCP: forward-internal in on_tcp_connect hands a public TCP or TLS
// connection to its account's internal tcp or tls endpoint, whose agent gets the bytes with the
// real client address. Two accounts each bind tcp://db.internal:20999; each account's public tcp
// endpoint reaches its own. A's policy naming an internal endpoint only B has finds nothing:
// halt closes the connection, continue carries it to A's own agent. An internal tcp endpoint
// opens no public port and takes none of the account's TCP ports; an internal tls endpoint is
// not served by the TLS listener; one with TLS termination gets the client's TLS ended with its
// certificate. TCP and TLS edges' policies forward the same way (B's TLS
// edge naming A's internal tls endpoint continues to B's own). Bad URLs are
// refused by the API (400 naming the field) and at bind (ERR_NGROK_301); internal binds
// without a port, or with the public binding, are refused with their codes.
func TestForwardInternalTCP(t *testing.T) {
	wa := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "20000-20499",
		"--agent-max-tcp-ports-per-account", "3")
	wb := wa.asAccount("tenant-b")
	ctx := context.Background()
	_, tokenA := wa.credential()
	_, tokenB := wb.credential()
	sessA, sessB := wa.mustConnect(tokenA), wb.mustConnect(tokenB)

	internal := func(sess ngrok.Session, opts config.Tunnel, tag string, cert *tls.Certificate) string {
		t.Helper()
		tun, err := sess.Listen(ctx, opts)
		if err != nil {
			t.Fatalf("internal bind %s: %v", tag, err)
		}
		serveTag(t, tun, tag, cert)
		return tun.URL()
	}
	dbURL := "tcp://db.internal:" + internalTCPPort
	if u := internal(sessA, config.TCPEndpoint(config.WithURL(dbURL), config.WithBindings("internal")), "internal-a", nil); u != dbURL {
		t.Errorf("internal tcp endpoint's URL: %q, want %q", u, dbURL)
	}
	internal(sessB, config.TCPEndpoint(config.WithURL(dbURL)), "internal-b", nil)
	internal(sessB, config.TCPEndpoint(config.WithRemoteAddr("only-b.internal:"+internalTCPPort)), "only-b", nil)
	cert := selfSigned(t, "tlsdb.internal")
	internal(sessA, config.TLSEndpoint(config.WithURL("tls://tlsdb.internal")), "internal-tls-a", &cert)

	fwd := func(url, onError string) string {
		return `{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"` + url + `"` + onError + `}}]}]}`
	}
	public := func(sess ngrok.Session, doc, tag string) string {
		t.Helper()
		tun, err := sess.Listen(ctx, config.TCPEndpoint(config.WithTrafficPolicy(doc)))
		if err != nil {
			t.Fatalf("public tcp bind %s: %v", tag, err)
		}
		serveTag(t, tun, tag, nil)
		return strings.TrimPrefix(tun.URL(), "tcp://")
	}
	// Three public ports of A (its quota): the internal endpoints took none.
	fwdA := public(sessA, fwd(dbURL, ""), "public-a")
	haltA := public(sessA, fwd("tcp://only-b.internal:"+internalTCPPort, ""), "public-a")
	contA := public(sessA, fwd("tcp://only-b.internal:${'"+internalTCPPort+"'}", `,"on_error":"continue"`), "public-a")
	fwdB := public(sessB, fwd("tcp://db.internal:${conn.server_port > 0 ? '"+internalTCPPort+"' : '1'}", ""), "public-b")
	tlsA := public(sessB, fwd("tls://tlsdb.internal:443", ""), "public-b") // B names A's tls endpoint: offline

	// talk sends hello on a new connection to addr and reads the answer; also the client's
	// address, which the agent must have been given.
	talk := func(addr string, useTLS bool) (got, client string) {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return "dial: " + err.Error(), ""
		}
		defer c.Close()
		client = c.LocalAddr().String()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if useTLS {
			tc := tls.Client(c, &tls.Config{ServerName: "tlsdb.internal", InsecureSkipVerify: true})
			if err := tc.Handshake(); err != nil {
				return "handshake: " + err.Error(), client
			}
			c = tc
		}
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b), client
	}
	for _, x := range []struct{ addr, tag string }{{fwdA, "internal-a"}, {fwdB, "internal-b"}, {contA, "public-a"}} {
		got, client := talk(x.addr, false)
		if want := x.tag + " " + client + " hello"; got != want {
			t.Errorf("connection to %s: %q, want %q", x.addr, got, want)
		}
	}
	if got, _ := talk(haltA, false); got != "" {
		t.Errorf("A forwarding to B's internal endpoint: %q, want the connection closed", got)
	}
	if got, _ := talk(tlsA, true); !strings.HasPrefix(got, "handshake: ") {
		t.Errorf("B forwarding to A's internal tls endpoint: %q, want the connection closed", got)
	}

	// A's quota of 3 ports holds: a fourth public one is refused.
	if _, err := sessA.Listen(ctx, config.TCPEndpoint()); ngrokCode(err) != "ERR_NGROK_5000" {
		t.Errorf("a fourth public tcp port of A: %v, want ERR_NGROK_5000", err)
	}
	// The TCP edge of A (no backend) forwards to A's internal tls endpoint.
	var ra struct{ Addr string }
	wa.call("POST", "/reserved_addrs", map[string]any{}, &ra)
	edge := wa.mustCreate("/edges/tcp", map[string]any{"hostports": []string{ra.Addr}})
	if st := wa.call("PUT", "/edges/tcp/"+edge+"/traffic_policy", map[string]any{"value": fwd("tls://tlsdb.internal", "")}, nil); st != 200 {
		t.Fatalf("put the edge's traffic_policy: %d", st)
	}
	eventually(t, 5*time.Second, "the TCP edge forwards to A's internal tls endpoint", func() bool {
		got, client := talk(ra.Addr, true)
		return got == "internal-tls-a "+client+" hello"
	})

	// An internal tls endpoint with TLS termination: the listener ends the forwarded client's
	// TLS with the bind's certificate and the agent reads plaintext.
	ca := newBindCA(t, "agent's server CA")
	_, chainPEM, keyPEM := ca.issue(t, "term.internal")
	internal(sessA, config.TLSEndpoint(config.WithURL("tls://term.internal"), config.WithTermination(chainPEM, keyPEM)), "internal-term-a", nil)
	if st := wa.call("PUT", "/edges/tcp/"+edge+"/traffic_policy", map[string]any{"value": fwd("tls://term.internal", "")}, nil); st != 200 {
		t.Fatalf("put the edge's traffic_policy: %d", st)
	}
	eventually(t, 5*time.Second, "the TCP edge forwards to A's terminating internal tls endpoint", func() bool {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ra.Addr, &tls.Config{ServerName: "term.internal", RootCAs: ca.pool})
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b) == "internal-term-a "+c.LocalAddr().String()+" hello"
	})

	// A TLS edge of A (no backend) forwards too, the client's TLS untouched to the agent. B's
	// TLS edge naming the same internal endpoint finds nothing and continues to B's own.
	internal(sessB, config.TLSEndpoint(config.WithURL("tls://own-b.internal")), "internal-tls-b", &cert)
	fwdB2 := `{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"tls://tlsdb.internal","on_error":"continue"}},` +
		`{"type":"forward-internal","config":{"url":"tls://own-b.internal"}}]}]}`
	for _, x := range []struct {
		w               *world
		host, doc, want string
	}{{wa, "fi-tls-a.example.com", fwd("tls://tlsdb.internal", ""), "internal-tls-a"}, {wb, "fi-tls-b.example.com", fwdB2, "internal-tls-b"}} {
		x.w.reserveDomain(x.host)
		tlsEdge := x.w.mustCreate("/edges/tls", map[string]any{"hostports": []string{x.host + ":443"}})
		if st := x.w.call("PUT", "/edges/tls/"+tlsEdge+"/traffic_policy", map[string]any{"value": x.doc}, nil); st != 200 {
			t.Fatalf("put the TLS edge's traffic_policy: %d", st)
		}
		eventually(t, 5*time.Second, "the TLS edge of "+x.host+" forwards to "+x.want, func() bool {
			d := &net.Dialer{Timeout: 10 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", wa.https, &tls.Config{ServerName: x.host, InsecureSkipVerify: true})
			if err != nil {
				return false
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Write([]byte("hello"))
			b, _ := io.ReadAll(c)
			return string(b) == x.want+" "+c.LocalAddr().String()+" hello"
		})
	}

	// No public listener serves an internal endpoint: its port is not open, and the TLS
	// listener does not know its name.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+internalTCPPort, 2*time.Second); err == nil {
		c.Close()
		t.Errorf("the internal tcp endpoint's port %s accepts connections", internalTCPPort)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	if c, err := tls.DialWithDialer(d, "tcp", wa.https, &tls.Config{ServerName: "tlsdb.internal", InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Errorf("the TLS listener served the internal tls endpoint tlsdb.internal")
	}

	// Refusals. The API names the field; an agent's bind gets ERR_NGROK_301 naming it (on B's
	// session: A has no TCP port left).
	var e apiError
	for _, url := range []string{"udp://db.internal:53", "tcp://db.internal", "tcp://db.example.com:1"} {
		if st := wa.call("PUT", "/edges/tcp/"+edge+"/traffic_policy", map[string]any{"value": fwd(url, "")}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" ||
			!strings.Contains(e.Msg, "on_tcp_connect[0].actions[0].config.url:") {
			t.Errorf("PUT forward-internal to %s in on_tcp_connect: %d %s %q, want 400 ERR_NGROK_215 naming the url", url, st, e.ErrorCode, e.Msg)
		}
	}
	for what, x := range map[string]struct {
		sess ngrok.Session
		opts config.Tunnel
		code string
		says string
	}{
		"a bad url":                  {sessB, config.TCPEndpoint(config.WithTrafficPolicy(fwd("http://db.internal", ""))), "ERR_NGROK_301", "config.url"},
		"on_tcp_connect on http":     {sessA, config.HTTPEndpoint(config.WithDomain("fi-http.edgeplane.app"), config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(fwd(dbURL, ""))), "ERR_NGROK_301", "different protocols"},
		"an internal tcp, no port":   {sessA, config.TCPEndpoint(config.WithURL("tcp://noport.internal")), "ERR_NGROK_326", "names no port"},
		"public binding, internal":   {sessA, config.TCPEndpoint(config.WithURL(dbURL), config.WithBindings("public")), "ERR_NGROK_9029", "internal"},
		"internal binding, public":   {sessA, config.TLSEndpoint(config.WithDomain("x.edgeplane.app"), config.WithBindings("internal")), "ERR_NGROK_9029", "internal"},
		"the same internal endpoint": {sessA, config.TCPEndpoint(config.WithURL(dbURL)), "ERR_NGROK_334", "already online"},
	} {
		_, err := x.sess.Listen(ctx, x.opts)
		if ngrokCode(err) != x.code || !strings.Contains(err.Error(), x.says) {
			t.Errorf("bind %s: %v, want %s saying %q", what, err, x.code, x.says)
		}
	}
}
