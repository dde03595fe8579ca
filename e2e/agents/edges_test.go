package agents

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
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

// mustCreate POSTs body to path and returns the new object's id.
func (w *world) mustCreate(path string, body any) string {
	w.t.Helper()
	var out struct{ ID string }
	if st := w.call("POST", path, body, &out); st != 201 {
		var e map[string]any
		w.call("POST", path, body, &e)
		w.t.Fatalf("POST %s: %d %v", path, st, e)
	}
	return out.ID
}

// edgeUpstream serves a labeled tunnel, answering with what the request and its proxy stream
// looked like to the agent.
func edgeUpstream(t *testing.T, tun net.Listener, name string) {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _ := r.Context().Value(connKey{}).(ngrok.Conn)
			et, proto := -1, ""
			if c != nil {
				et, proto = int(c.EdgeType()), c.Proto()
			}
			fmt.Fprintf(w, "%s path=%s edgetype=%d proto=%s xfp=%s xff=%s", name, r.URL.Path, et, proto,
				r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-For"))
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	go func() { _ = srv.Serve(acceptguard.Listener{Listener: tun}) }()
	t.Cleanup(func() { srv.Close() })
}

type connKey struct{}

// TestHTTPSEdge: an HTTPS edge routes by path (exact beats prefix, the longest prefix wins) to
// every kind of backend, applies ip_restriction, fails closed on a module it does not enforce,
// and takes configuration changes live.
func TestHTTPSEdge(t *testing.T) {
	w := start(t, "--outbound-allow-private") // the static backend is on this host
	_, token := w.credential()
	w.reserveDomain("shop.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "shop")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	edgeUpstream(t, tun, "agent")
	static := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "static path=%s xfh=%s", r.URL.Path, r.Header.Get("X-Forwarded-Host"))
	})}
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = static.Serve(sl) }()
	defer static.Close()

	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "shop"}})
	offline := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "nobody"}})
	fixed := w.mustCreate("/backends/http_response", map[string]any{"body": "fixed", "status_code": 418, "headers": map[string]string{"x-fixed": "1"}})
	stat := w.mustCreate("/backends/static", map[string]any{"address": sl.Addr().String(), "tls": map[string]any{"enabled": false}})
	failover := w.mustCreate("/backends/failover", map[string]any{"backends": []string{offline, stat}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"shop.example.com:443"}})
	route := func(matchType, match, backend string) string {
		return w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": matchType, "match": match,
			"backend": map[string]any{"backend_id": backend}})
	}
	root := route("path_prefix", "/", group)
	route("path_prefix", "/api", stat)
	route("path_prefix", "/api/v2", failover)
	route("exact_path", "/api/v2/ping", fixed)
	noTunnel := route("path_prefix", "/down", offline)

	c := w.httpsClient()
	// Ready once the last route is in the plan (routes were added one by one).
	eventually(t, 5*time.Second, "the edge is in the plan", func() bool { return statusOf(c, "https://shop.example.com/down/x") == 503 })
	cases := []struct {
		path, want string
		status     int
	}{
		{"/", "agent path=/ edgetype=3 proto=https xfp=https xff=127.0.0.1", 200},
		{"/cart", "agent path=/cart edgetype=3", 200},
		{"/api", "static path=/api xfh=shop.example.com", 200}, // the prefix /api
		{"/api/v2/ping", "fixed", 418},                         // the exact path beats the prefixes
		{"/api/v2/x", "static path=/api/v2/x", 200},            // the longest prefix: failover past the offline group
		{"/api/v2/ping/x", "static path=/api/v2/ping/x", 200},  // an exact path is exact
	}
	for _, cs := range cases {
		st, body, h := get(t, c, "https://shop.example.com"+cs.path)
		if st != cs.status || !strings.HasPrefix(body, cs.want) {
			t.Errorf("%s: %d %q, want %d %q", cs.path, st, body, cs.status, cs.want)
		}
		if cs.status == 418 && h.Get("x-fixed") != "1" {
			t.Errorf("%s: the response backend's header is missing", cs.path)
		}
	}
	// Plain HTTP for the edge's host is sent to HTTPS.
	if st, _, h := get(t, w.httpClient(), "http://shop.example.com/cart?x=1"); st != http.StatusPermanentRedirect || h.Get("Location") != "https://shop.example.com/cart?x=1" {
		t.Errorf("plain HTTP to an HTTPS edge: %d %q", st, h.Get("Location"))
	}
	st, body, h := get(t, c, "https://shop.example.com/down/x")
	if st != 503 || h.Get("ngrok-error-code") != "ERR_NGROK_6515" {
		t.Errorf("a tunnel group with no tunnel online: %d %q %q", st, h.Get("ngrok-error-code"), body)
	}

	// ip_restriction on a route: a policy denying the client; then the rule is deleted, live.
	pol := w.mustCreate("/ip_policies", map[string]any{})
	rule := w.mustCreate("/ip_policy_rules", map[string]any{"ip_policy_id": pol, "cidr": "127.0.0.0/8", "action": "deny"})
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+noTunnel+"/ip_restriction", map[string]any{"ip_policy_ids": []string{pol}}, nil); st != 200 {
		t.Fatalf("put ip_restriction: %d", st)
	}
	eventually(t, 2*time.Second, "ip_restriction applied", func() bool {
		st, _, h := get(t, c, "https://shop.example.com/down/x")
		return st == 403 && h.Get("ngrok-error-code") == "ERR_NGROK_3205"
	})
	if st := w.call("DELETE", "/ip_policy_rules/"+rule, nil, nil); st != 204 {
		t.Fatalf("delete rule: %d", st)
	}
	eventually(t, time.Second, "a deleted rule no longer refuses", func() bool {
		st, _, _ := get(t, c, "https://shop.example.com/down/x")
		return st == 503
	})

	// A module the data plane does not enforce yet: the route answers 503 naming it.
	oauth := map[string]any{"provider": map[string]any{"google": map[string]any{}}}
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+noTunnel+"/oauth", oauth, nil); st != 200 {
		t.Fatalf("put oauth: %d", st)
	}
	eventually(t, time.Second, "an unenforced module fails closed", func() bool {
		st, body, h := get(t, c, "https://shop.example.com/down/x")
		return st == 503 && h.Get("ngrok-error-code") == "ERR_NGROK_3210" && strings.Contains(body, "oauth")
	})
	// ...and "enabled": false means it does not act.
	oauth["enabled"] = false
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+noTunnel+"/oauth", oauth, nil); st != 200 {
		t.Fatalf("disable oauth: %d", st)
	}
	eventually(t, time.Second, "a disabled module does not act", func() bool {
		_, _, h := get(t, c, "https://shop.example.com/down/x")
		return h.Get("ngrok-error-code") == "ERR_NGROK_6515"
	})

	// No route matches: 404; the edge deleted: the host has nothing (404 3200 from the plain
	// endpoint lookup, over a certificate still cached).
	if st := w.call("DELETE", "/edges/https/"+edge+"/routes/"+noTunnel, nil, nil); st != 204 {
		t.Fatalf("delete route: %d", st)
	}
	if st := w.call("DELETE", "/edges/https/"+edge+"/routes/"+root, nil, nil); st != 204 {
		t.Fatalf("delete route: %d", st)
	}
	eventually(t, time.Second, "no route matches", func() bool {
		st, body, h := get(t, c, "https://shop.example.com/cart")
		return st == 404 && h.Get("ngrok-error-code") == "ERR_NGROK_3200" && strings.Contains(body, "No route")
	})
	if st := w.call("DELETE", "/edges/https/"+edge, nil, nil); st != 204 {
		t.Fatalf("delete edge: %d", st)
	}
	// "/" already answers 404 (no route matches it): wait for the page of a host with no edge.
	eventually(t, time.Second, "a deleted edge stops serving", func() bool {
		st, body, h := get(t, c, "https://shop.example.com/")
		return st == 404 && h.Get("ngrok-error-code") == "ERR_NGROK_3200" && strings.Contains(body, "is offline")
	})
}

// TestWeightedBackend: a weighted backend spreads requests by weight (within 5% over 10,000
// requests) and never chooses weight 0.
func TestWeightedBackend(t *testing.T) {
	w := start(t)
	w.reserveDomain("w.example.com")
	a := w.mustCreate("/backends/http_response", map[string]any{"body": "a", "status_code": 200})
	b := w.mustCreate("/backends/http_response", map[string]any{"body": "b", "status_code": 200})
	z := w.mustCreate("/backends/http_response", map[string]any{"body": "z", "status_code": 200})
	wb := w.mustCreate("/backends/weighted", map[string]any{"backends": map[string]int{a: 1, b: 3, z: 0}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"w.example.com:443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": wb}})
	c := w.httpsClient()
	eventually(t, 5*time.Second, "the edge is in the plan", func() bool { return statusOf(c, "https://w.example.com/") == 200 })
	const n = 10000
	var counts [3]atomic.Int64
	var done atomic.Int64
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for done.Add(1) <= n {
				resp, err := c.Get("https://w.example.com/")
				if err != nil {
					errs <- err
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				counts[strings.Index("abz", string(body))].Add(1)
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	share := float64(counts[0].Load()) / n
	if share < 0.20 || share > 0.30 || counts[2].Load() != 0 {
		t.Errorf("weights 1:3:0 gave a=%d b=%d z=%d", counts[0].Load(), counts[1].Load(), counts[2].Load())
	}
}

// TestTLSAndTCPEdges: a TLS edge passed through to an agent that terminates TLS itself, one
// terminated at the edge with a minimum version, a TCP edge, and mutual TLS on an HTTPS edge.
func TestTLSAndTCPEdges(t *testing.T) {
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "26000-26999")
	_, token := w.credential()
	for _, d := range []string{"pass.example.com", "term.example.com", "mtls.example.com"} {
		w.reserveDomain(d)
	}
	sess := w.mustConnect(token)
	echoTunnel := func(label string, wrap func(net.Conn) net.Conn) {
		tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", label)))
		if err != nil {
			t.Fatalf("labeled %s: %v", label, err)
		}
		go func() {
			for {
				c, err := acceptguard.Listener{Listener: tun}.Accept()
				if err != nil {
					return
				}
				go func() {
					nc := c.(ngrok.Conn)
					info := fmt.Sprintf("edgetype=%d passthrough=%v ", nc.EdgeType(), nc.PassthroughTLS())
					var rc net.Conn = c
					if wrap != nil {
						rc = wrap(c)
					}
					defer rc.Close()
					buf := make([]byte, 5)
					_, _ = io.ReadFull(rc, buf)
					_, _ = rc.Write([]byte(info + string(buf)))
				}()
			}
		}()
	}
	agentCert := selfSigned(t, "pass.example.com")
	echoTunnel("pass", func(c net.Conn) net.Conn {
		return tls.Server(c, &tls.Config{Certificates: []tls.Certificate{agentCert}})
	})
	echoTunnel("plain", nil)
	pass := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "pass"}})
	plain := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "plain"}})
	w.mustCreate("/edges/tls", map[string]any{"hostports": []string{"pass.example.com:443"}, "backend": map[string]any{"backend_id": pass}})
	w.mustCreate("/edges/tls", map[string]any{"hostports": []string{"term.example.com:443"}, "backend": map[string]any{"backend_id": plain},
		"tls_termination": map[string]any{"terminate_at": "edge", "min_version": "1.3"}})
	var ra struct{ Addr string }
	w.call("POST", "/reserved_addrs", map[string]any{}, &ra)
	w.mustCreate("/edges/tcp", map[string]any{"hostports": []string{ra.Addr}, "backend": map[string]any{"backend_id": plain}})

	// talk sends hello and reads the answer. Readiness probes give up after a second: before an
	// edge is in the plan, its name is still served by the HTTPS listener, which waits for a
	// request header that never comes.
	talk := func(c net.Conn) string {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte("hello"))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	var got string
	eventually(t, 5*time.Second, "the TLS edge passes through", func() bool {
		c, err := tls.Dial("tcp", w.https, &tls.Config{ServerName: "pass.example.com", InsecureSkipVerify: true})
		if err != nil {
			return false
		}
		got = talk(c)
		return got == "edgetype=2 passthrough=false hello" || got == "edgetype=2 passthrough=true hello"
	})
	if got != "edgetype=2 passthrough=true hello" {
		t.Errorf("passthrough TLS edge answered %q", got)
	}
	eventually(t, 5*time.Second, "the terminated TLS edge", func() bool {
		c, err := tls.Dial("tcp", w.https, &tls.Config{ServerName: "term.example.com", RootCAs: w.ca})
		if err != nil {
			return false
		}
		got = talk(c)
		return got != ""
	})
	if got != "edgetype=2 passthrough=false hello" {
		t.Errorf("terminated TLS edge answered %q", got)
	}
	if _, err := tls.Dial("tcp", w.https, &tls.Config{ServerName: "term.example.com", RootCAs: w.ca, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Errorf("TLS 1.2 accepted by an edge whose min_version is 1.3")
	}
	// The TCP edge's listener opens when the plan with the edge is swapped in.
	eventually(t, 5*time.Second, "the TCP edge carries bytes", func() bool {
		tc, err := net.Dial("tcp", ra.Addr)
		if err != nil {
			return false
		}
		got = talk(tc)
		return got == "edgetype=1 passthrough=false hello"
	})

	// Mutual TLS on an HTTPS edge: a client certificate from the module's CA is required.
	caCert, clientCert := clientCA(t)
	ca := w.mustCreate("/certificate_authorities", map[string]any{"ca_pem": caCert})
	group := w.mustCreate("/backends/http_response", map[string]any{"body": "inside", "status_code": 200})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"mtls.example.com:443"},
		"mutual_tls": map[string]any{"certificate_authority_ids": []string{ca}}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})
	with := &http.Client{Transport: &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", w.https) },
		TLSClientConfig: &tls.Config{RootCAs: w.ca, Certificates: []tls.Certificate{clientCert}},
	}}
	eventually(t, 5*time.Second, "mTLS with a client certificate", func() bool {
		resp, err := with.Get("https://mtls.example.com/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if _, err := w.httpsClient().Get("https://mtls.example.com/"); err == nil {
		t.Errorf("an HTTPS edge with mutual TLS served a client without a certificate")
	}
}

// TestEdgeCertificatesAndStaticTLS: an edge's host is served with the certificate uploaded for
// its reserved domain (edgeplane's CA signs one once it is detached), and a static backend with
// tls.enabled is dialled over TLS trusting --outbound-ca.
func TestEdgeCertificatesAndStaticTLS(t *testing.T) {
	ca, caFile := newOutboundCA(t, "test CA")
	upstreamCert, _ := ca.Issue("127.0.0.1")
	tlsUp := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "over tls") }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*upstreamCert}}}
	ul, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = tlsUp.ServeTLS(ul, "", "") }()
	defer tlsUp.Close()

	w := start(t, "--outbound-ca", caFile, "--outbound-allow-private") // the static backend is on this host
	leaf, _ := ca.Issue("up.example.com")
	cert := w.mustCreate("/tls_certificates", map[string]any{"certificate_pem": string(pemChain(leaf.Certificate[:1])),
		"private_key_pem": string(pemKey(t, leaf.PrivateKey))})
	dom := w.mustCreate("/reserved_domains", map[string]any{"domain": "up.example.com", "certificate_id": cert})
	static := w.mustCreate("/backends/static", map[string]any{"address": ul.Addr().String(), "tls": map[string]any{"enabled": true}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"up.example.com:443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": static}})

	trusting := func(pool *x509.CertPool) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", w.https) },
			TLSClientConfig: &tls.Config{RootCAs: pool},
		}}
	}
	eventually(t, 5*time.Second, "the uploaded certificate and the static TLS backend", func() bool {
		resp, err := trusting(ca.Pool()).Get("https://up.example.com/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == "over tls"
	})
	if _, err := w.httpsClient().Get("https://up.example.com/"); err == nil {
		t.Errorf("edgeplane's own CA verified a host that has an uploaded certificate")
	}
	if st := w.call("PATCH", "/reserved_domains/"+dom, map[string]any{"certificate_id": ""}, nil); st != 200 {
		t.Fatalf("detach the certificate: %d", st)
	}
	eventually(t, 3*time.Second, "edgeplane's certificate once the upload is detached", func() bool {
		resp, err := w.httpsClient().Get("https://up.example.com/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestEdgeChangesUnderTraffic: while clients keep requesting, the route's backend and modules
// change over and over; every answer is a backend's answer or a documented error page, never
// another 5xx, and in-flight requests finish.
func TestEdgeChangesUnderTraffic(t *testing.T) {
	w := start(t)
	w.reserveDomain("busy.example.com")
	one := w.mustCreate("/backends/http_response", map[string]any{"body": "one", "status_code": 200})
	two := w.mustCreate("/backends/http_response", map[string]any{"body": "two", "status_code": 200})
	pol := w.mustCreate("/ip_policies", map[string]any{})
	w.mustCreate("/ip_policy_rules", map[string]any{"ip_policy_id": pol, "cidr": "127.0.0.0/8", "action": "allow"})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"busy.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": one}})
	base := "/edges/https/" + edge + "/routes/" + route
	c := w.httpsClient()
	eventually(t, 5*time.Second, "the edge is in the plan", func() bool { return statusOf(c, "https://busy.example.com/") == 200 })
	stop := make(chan struct{})
	type result struct {
		bad  []string
		seen map[string]int
	}
	results := make(chan result, 8)
	for range 8 {
		go func() {
			r := result{seen: map[string]int{}}
			for {
				select {
				case <-stop:
					results <- r
					return
				default:
				}
				resp, err := c.Get("https://busy.example.com/x")
				if err != nil {
					r.bad = append(r.bad, err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code := resp.Header.Get("ngrok-error-code")
				key := fmt.Sprintf("%d %s", resp.StatusCode, code)
				switch {
				case resp.StatusCode == 200 && (string(b) == "one" || string(b) == "two"):
					key = "200 " + string(b)
				case resp.StatusCode == 503 && code == "ERR_NGROK_3210":
				default:
					r.bad = append(r.bad, key+" "+string(b))
				}
				r.seen[key]++
			}
		}()
	}
	for i := range 30 {
		backend := []string{one, two}[i%2]
		w.call("PATCH", base, map[string]any{"backend": map[string]any{"backend_id": backend}}, nil)
		if i%3 == 0 {
			w.call("PUT", base+"/ip_restriction", map[string]any{"ip_policy_ids": []string{pol}}, nil)
		} else {
			w.call("DELETE", base+"/ip_restriction", nil, nil)
		}
		// A policy with an action edgeplane does not apply (saml, which ngrok marks coming soon) fails the route closed.
		if st := w.call("PUT", base+"/traffic_policy", map[string]any{"enabled": i%4 == 0, "value": `{"on_http_request":[{"actions":[{"type":"saml"}]}]}`}, nil); st != 200 {
			t.Fatalf("put the fail-closed traffic policy: %d", st)
		}
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	seen := map[string]int{}
	for range 8 {
		r := <-results
		for _, b := range r.bad {
			t.Errorf("unexpected answer under changes: %s", b)
		}
		for k, n := range r.seen {
			seen[k] += n
		}
	}
	if seen["200 one"] == 0 || seen["200 two"] == 0 {
		t.Errorf("the changes did not reach traffic: %v", seen)
	}
	t.Logf("answers: %v", seen)
}

// TestIPv6RulesAndTLSVersion: ip_restriction decides on an IPv6 client with IPv6 rules (a v4
// allow does not admit it, a v6 deny refuses it, a v6 allow admits it), and an edge's default
// min_version 1.2 refuses a client offering only TLS 1.1.
func TestIPv6RulesAndTLSVersion(t *testing.T) {
	w := start(t, "--https-listen", "[::1]:0")
	w.reserveDomain("six.example.com")
	ok := w.mustCreate("/backends/http_response", map[string]any{"body": "ok", "status_code": 200})
	marker := w.mustCreate("/backends/http_response", map[string]any{"body": "marker", "status_code": 200})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"six.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": ok}})
	pol := w.mustCreate("/ip_policies", map[string]any{})
	v4 := w.mustCreate("/ip_policy_rules", map[string]any{"ip_policy_id": pol, "cidr": "127.0.0.0/8", "action": "allow"})
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+route+"/ip_restriction", map[string]any{"ip_policy_ids": []string{pol}}, nil); st != 200 {
		t.Fatalf("put ip_restriction: %d", st)
	}
	c := w.httpsClient()
	status := func() int {
		resp, err := c.Get("https://six.example.com/")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, 5*time.Second, "a v4 allow rule does not admit a v6 client", func() bool { return status() == 403 })
	v6deny := w.mustCreate("/ip_policy_rules", map[string]any{"ip_policy_id": pol, "cidr": "::1/128", "action": "deny"})
	w.mustCreate("/ip_policy_rules", map[string]any{"ip_policy_id": pol, "cidr": "::/0", "action": "allow"})
	// The route answers 403 before the new rules reach the plan as well: a route created after
	// them, without ip_restriction, answers once the plan holds both rules.
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "exact_path", "match": "/marker", "backend": map[string]any{"backend_id": marker}})
	eventually(t, time.Second, "the v6 rules are in the plan", func() bool {
		resp, err := c.Get("https://six.example.com/marker")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == "marker"
	})
	if st := status(); st != 403 {
		t.Fatalf("a v6 deny beats a v6 allow: %d, want 403", st)
	}
	w.call("DELETE", "/ip_policy_rules/"+v6deny, nil, nil)
	eventually(t, time.Second, "a v6 allow admits the v6 client", func() bool { return status() == 200 })
	w.call("DELETE", "/ip_policy_rules/"+v4, nil, nil)

	old := &http.Client{Transport: &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", w.https) },
		TLSClientConfig: &tls.Config{RootCAs: w.ca, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11},
	}}
	if _, err := old.Get("https://six.example.com/"); err == nil {
		t.Errorf("a TLS 1.1 client was served by an edge whose min_version is 1.2")
	}
	// The same client is served once the edge allows 1.1: the refusal above was the edge's.
	if st := w.call("PUT", "/edges/https/"+edge+"/tls_termination", map[string]any{"min_version": "1.1"}, nil); st != 200 {
		t.Fatalf("put tls_termination: %d", st)
	}
	eventually(t, time.Second, "a TLS 1.1 client served with min_version 1.1", func() bool {
		resp, err := old.Get("https://six.example.com/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// statusOf is the status of a GET, or 0 when the request fails (a host whose TLS is not served
// yet, while a change is on its way to the plan).
func statusOf(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
