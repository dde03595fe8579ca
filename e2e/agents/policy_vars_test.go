package agents

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.ngrok.com/ngrok/config"
)

// varsPolicy reads the variables and action results filled last: jwt-validation's tokens,
// the parsed user agent, the certificate served, compress-response's choice. Each account
// admits only its own issuer.
func varsPolicy(issuer, jku string) string {
	return fmt.Sprintf(`
on_http_request:
  - expressions: ["req.url.path == '/jwt'"]
    actions:
      - type: jwt-validation
        config:
          issuer: {allow_list: [{value: %q}]}
          http: {tokens: [{type: jwt, method: header, name: Authorization, prefix: "Bearer "}]}
          jws: {allowed_algorithms: [RS256], keys: {sources: {additional_jkus: [%q]}}}
      - type: custom-response
        config: {status_code: 200, body: "sub=${actions.ngrok.jwt_validation.tokens[0].claims.sub} role=${actions.ngrok.jwt_validation.tokens[0].claims.role} kid=${actions.ngrok.jwt_validation.tokens[0].header.kid}"}
  - expressions: ["req.url.path == '/ua' && req.user_agent.is_bot"]
    actions: [{type: deny, config: {status_code: 403}}]
  - expressions: ["req.url.path == '/ua'"]
    actions:
      - type: custom-response
        config: {status_code: 200, body: "${req.user_agent.name} ${req.user_agent.os} mobile=${string(req.user_agent.is_mobile)}"}
  - expressions: ["req.url.path == '/bytes'"]
    actions:
      - type: custom-response
        config: {status_code: 200, body: "${string(conn.bytes_in)} ${string(conn.bytes_out)}"}
  - expressions: ["req.url.path == '/tls'"]
    actions:
      - type: custom-response
        config: {status_code: 200, body: "${conn.tls.server.subject.common_name}|${conn.tls.server.san.dns_names.join(',')}|${conn.tls.server.serial_number}"}
on_http_response:
  - expressions: ["req.url.path == '/big' || req.url.path == '/echo'"]
    actions: [{type: compress-response}]
  - expressions: ["req.url.path == '/big' || req.url.path == '/echo'"]
    actions:
      - type: add-headers
        config: {headers: {x-alg: "${actions.ngrok.compress.negotiated_algorithm}", x-already: "${string(actions.ngrok.compress.already_compressed)}"}}
`, issuer, jku)
}

// TestTrafficPolicyVariablesOnRoutes: two accounts' routes (and https binds), through real agents, read
// jwt-validation's token claims (each account's own issuer only), req.user_agent's parts, the
// certificate edgeplane served (the one the client got), their connection's byte counts and
// compress-response's choice. A plain HTTP bind's policy reading the counts, which the listener
// does not keep for it, fails closed naming why.
func TestTrafficPolicyVariablesOnRoutes(t *testing.T) {
	ca, caFile := newOutboundCA(t, "jwks CA")
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	jwksCert, _ := ca.Issue("127.0.0.1")
	jwks := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Use: "sig"}}})
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{*jwksCert}}}
	jl, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = jwks.ServeTLS(jl, "", "") }()
	defer jwks.Close()
	jku := "https://" + jl.Addr().String() + "/keys"

	wa := start(t, "--outbound-ca", caFile, "--outbound-allow-private") // the key set is on this host
	wb := wa.asAccount("tenant-b")
	hosts := map[string]string{"https://idp-a.example.com/": "vars-a.example.com", "https://idp-b.example.com/": "vars-b.example.com"}
	for issuer, host := range hosts {
		w := wa
		if host == "vars-b.example.com" {
			w = wb
		}
		route := policyRoute(t, w, host)
		if st := w.call("PUT", route+"/traffic_policy", map[string]any{"value": varsPolicy(issuer, jku)}, nil); st != 200 {
			t.Fatalf("put traffic_policy of %s: %d", host, st)
		}
	}
	c := wa.httpsClient()
	do := func(host, path string, hdr map[string]*string) (*http.Response, string) {
		resp, b, err := try(c, "GET", "https://"+host+path, hdr)
		if err != nil {
			t.Fatalf("%s%s: %v", host, path, err)
		}
		return resp, string(b)
	}
	for _, host := range hosts {
		// The route answers before its policy reaches the plan too (its upstream's "who=…"):
		// only the policy's own answer says it is there.
		eventually(t, 5*time.Second, "the policy of "+host+" reaches traffic", func() bool {
			resp, b, err := try(c, "GET", "https://"+host+"/ua", nil)
			return err == nil && resp.StatusCode == 200 && !strings.HasPrefix(string(b), "who=")
		})
	}

	token := func(issuer, sub string) *string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: issuer, Subject: sub, Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)),
			IssuedAt: jwt.NewNumericDate(now)}).Claims(map[string]any{"role": "admin-" + sub}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return ptr("Bearer " + tok)
	}
	for issuer, host := range hosts {
		sub := strings.TrimSuffix(host, ".example.com")
		if resp, body := do(host, "/jwt", map[string]*string{"Authorization": token(issuer, sub)}); resp.StatusCode != 200 || body != "sub="+sub+" role=admin-"+sub+" kid=k1" {
			t.Errorf("%s: its own issuer's token: %d %q", host, resp.StatusCode, body)
		}
		// The other account's issuer is not this route's: refused before any later rule.
		for otherIssuer := range hosts {
			if otherIssuer == issuer {
				continue
			}
			if resp, body := do(host, "/jwt", map[string]*string{"Authorization": token(otherIssuer, "intruder")}); resp.StatusCode != 401 ||
				resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3401" || strings.Contains(body, "intruder") {
				t.Errorf("%s: another account's issuer: %d %q", host, resp.StatusCode, body)
			}
		}

		const edge = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91"
		const iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
		if resp, body := do(host, "/ua", map[string]*string{"User-Agent": ptr(edge)}); resp.StatusCode != 200 || body != "Edge Windows mobile=false" {
			t.Errorf("%s: Edge: %d %q", host, resp.StatusCode, body)
		}
		if resp, body := do(host, "/ua", map[string]*string{"User-Agent": ptr(iphone)}); resp.StatusCode != 200 || body != "Safari iOS mobile=true" {
			t.Errorf("%s: iPhone: %d %q", host, resp.StatusCode, body)
		}
		if resp, _ := do(host, "/ua", map[string]*string{"User-Agent": ptr("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)")}); resp.StatusCode != 403 {
			t.Errorf("%s: Googlebot: %d", host, resp.StatusCode)
		}

		resp, body := do(host, "/tls", nil)
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatalf("%s: no TLS", host)
		}
		leaf := resp.TLS.PeerCertificates[0]
		if want := leaf.Subject.CommonName + "|" + strings.Join(leaf.DNSNames, ",") + "|" + hex.EncodeToString(leaf.SerialNumber.Bytes()); resp.StatusCode != 200 || body != want || !strings.Contains(body, host) {
			t.Errorf("%s: conn.tls.server: %d %q, want the certificate the client got, %q", host, resp.StatusCode, body, want)
		}

		// The bytes of this connection so far: its ClientHello and requests in, the server's
		// handshake (with its certificate) and answers out. Each request on it adds to what came
		// in; what went out never shrinks (an HTTP/2 server's last frames of the previous answer,
		// written by its own goroutine, may not be counted yet when the next request is read).
		bc := wa.httpsClient()
		var lastIn, lastOut int64
		for i := range 2 {
			resp, b, err := try(bc, "GET", "https://"+host+"/bytes", nil)
			var in, out int64
			if n, _ := fmt.Sscanf(string(b), "%d %d", &in, &out); err != nil || resp.StatusCode != 200 || n != 2 || in <= lastIn || out < lastOut || (i == 0 && (in < 300 || out < 500)) {
				t.Errorf("%s: request %d: conn.bytes: %v %q, after %d %d", host, i, err, b, lastIn, lastOut)
			}
			lastIn, lastOut = in, out
		}

		for path, alg := range map[string]string{"/big": "gzip", "/echo": ""} {
			resp, _ := do(host, path, map[string]*string{"Accept-Encoding": ptr("gzip")})
			if resp.Header.Get("X-Alg") != alg || resp.Header.Get("X-Already") != "false" {
				t.Errorf("%s%s: compress results %q %q, want %q", host, path, resp.Header.Get("X-Alg"), resp.Header.Get("X-Already"), alg)
			}
		}
	}

	// An https agent bind's own policy (each account's) reads the same variables: the bind's
	// stage says it reads the counts, so its connections are counted too.
	for name, w := range map[string]*world{"vars-bind-a.edgeplane.app": wa, "vars-bind-b.edgeplane.app": wb} {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name),
			config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"custom-response","config":{"status_code":200,
			  "body":"${req.user_agent.name} ${conn.tls.server.subject.common_name} ${string(conn.bytes_in > 0 && conn.bytes_out > 0)}"}}]}]}`)))
		if err != nil {
			t.Fatalf("https bind %s: %v", name, err)
		}
		serveTunnel(t, tun, actionsUpstream)
		resp, b, err := try(c, "GET", "https://"+name+"/", map[string]*string{"User-Agent": ptr("curl/8.5.0")})
		if err != nil || resp.StatusCode != 200 || resp.TLS == nil || string(b) != "curl "+resp.TLS.PeerCertificates[0].Subject.CommonName+" true" {
			t.Errorf("%s: %v %v %q", name, err, resp, b)
		}
	}

	_, tokenB := wb.credential()
	tun, err := wb.mustConnect(tokenB).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("bytes-b.edgeplane.app"),
		config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(`{"on_http_request":[{"expressions":["conn.bytes_in > 1000000"],"actions":[{"type":"deny"}]}]}`)))
	if err != nil {
		t.Fatalf("http bind: %v", err)
	}
	serveTunnel(t, tun, actionsUpstream)
	resp, b, err := try(wa.httpClient(), "GET", "http://bytes-b.edgeplane.app/echo", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("conn.bytes_in on a plain HTTP bind (counted, under the limit): %v %v %q", err, resp, b)
	}
}
