package agents

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.ngrok.com/ngrok/config"
)

// outboundKeys is a key set served over TLS on 127.0.0.1 (for the names 127.0.0.1 and
// localhost) by a CA only caFile trusts, and a signer of tokens its key verifies.
type outboundKeys struct {
	addr, caFile string
	fetches      *atomic.Int32
	sign         func() string
}

func serveOutboundKeys(t *testing.T, issuer, audience string) outboundKeys {
	t.Helper()
	ca, caFile := newOutboundCA(t, "outbound test CA")
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	cert, err := ca.Issue("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Use: "sig"}}})
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	sign := func() string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: issuer, Audience: jwt.Audience{audience}, Subject: "alice",
			Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)), IssuedAt: jwt.NewNumericDate(now)}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	return outboundKeys{addr: ln.Addr().String(), caFile: caFile, fetches: &fetches, sign: sign}
}

// jwtEdge gives the world's account an HTTPS edge on host whose route validates tokens against
// the key set at jwks and sends what passes to a labeled tunnel of its own agent, and a second
// route, /static, to a static backend at staticAddr.
func (w *world) jwtEdge(t *testing.T, host, label, jwks, staticAddr, issuer, audience string) {
	t.Helper()
	_, token := w.credential()
	w.reserveDomain(host)
	tun, err := w.mustConnect(token).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", label)))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprint(rw, "agent "+label) }))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": label}})
	static := w.mustCreate("/backends/static", map[string]any{"address": staticAddr, "tls": map[string]any{"enabled": false}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/static",
		"backend": map[string]any{"backend_id": static}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+route+"/jwt_validation", map[string]any{
		"issuer":   map[string]any{"allow_list": []any{map[string]any{"value": issuer}}},
		"audience": map[string]any{"allow_list": []any{map[string]any{"value": audience}}},
		"http":     map[string]any{"tokens": []any{map[string]any{"type": "jwt", "method": "header", "name": "Authorization", "prefix": "Bearer "}}},
		"jws": map[string]any{"allowed_algorithms": []string{"RS256"},
			"keys": map[string]any{"sources": map[string]any{"additional_jkus": []string{jwks}}}},
	}, nil); st != 200 {
		t.Fatalf("put jwt_validation: %d", st)
	}
}

// TestOutboundGuard: the URLs an account configures reach no loopback, private or link-local
// address unless the operator started edgeplane with --outbound-allow-private. Two accounts on
// one server point their routes' key sets at this host, account A by address (127.0.0.1) and
// account B by a name that resolves to it (localhost), and their static backends at it; a third
// route of A's asks the cloud metadata address. By default each request with a valid token gets
// 401 ERR_NGROK_3401 naming the class refused (loopback, link-local), each static route 502
// ERR_NGROK_8012 naming it, and the key set server never sees a connection; an agent bind's
// http-request action to this host (on_error halt) is answered 502 ERR_NGROK_3210 naming it.
// With the flag, or its environment variable, the same configuration serves both accounts'
// agents.
func TestOutboundGuard(t *testing.T) {
	const issuer, audience = "https://idp.example.com/", "api://outbound"
	keys := serveOutboundKeys(t, issuer, audience)
	_, port, _ := net.SplitHostPort(keys.addr)
	static := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "static") })}
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = static.Serve(sl) }()
	t.Cleanup(func() { static.Close() })
	svc := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "granted") })}
	svcLn, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = svc.Serve(svcLn) }()
	t.Cleanup(func() { svc.Close() })

	for _, c := range []struct {
		name  string
		allow bool
		flag  []string
		env   []string
	}{
		{"default", false, nil, nil},
		{"flag", true, []string{"--outbound-allow-private"}, nil},
		{"environment", true, nil, []string{"EDGEPLANE_OUTBOUND_ALLOW_PRIVATE=true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			allow := c.allow
			a := startOn(t, filepath.Join(t.TempDir(), "edgeplane.db"), c.env, "", append([]string{"--outbound-ca", keys.caFile}, c.flag...)...)
			b := a.asAccount("outbound-b")
			a.jwtEdge(t, "jwt-a.example.com", "out-a", "https://"+keys.addr+"/keys", sl.Addr().String(), issuer, audience)
			b.jwtEdge(t, "jwt-b.example.com", "out-b", "https://localhost:"+port+"/keys", "localhost:"+strings.Split(sl.Addr().String(), ":")[1], issuer, audience)

			// A bind's http-request action asks a service on this host and halts when it fails.
			_, tokenB := b.credential()
			htun, err := b.mustConnect(tokenB).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("hr-b.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
				config.WithTrafficPolicy(`{"on_http_request":[{"actions":[
				  {"type":"http-request","config":{"url":"http://`+svcLn.Addr().String()+`/check","on_error":"halt"}},
				  {"type":"add-headers","config":{"headers":{"x-grant":"${actions.ngrok.http_request.res.body}"}}}]}]}`)))
			if err != nil {
				t.Fatalf("http-request bind: %v", err)
			}
			serveTunnel(t, htun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "agent grant="+r.Header.Get("X-Grant")) }))

			c := a.httpsClient()
			call := func(url, auth string) (int, string, string) {
				req, _ := http.NewRequest("GET", url, nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := c.Do(req)
				if err != nil {
					return 0, err.Error(), "" // the name's certificate is not ready yet
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body), resp.Header.Get("ngrok-error-code")
			}
			for _, host := range []string{"jwt-a.example.com", "jwt-b.example.com"} {
				eventually(t, 5*time.Second, host+"'s jwt_validation is in the plan", func() bool {
					st, _, code := call("https://"+host+"/api", "")
					return st == 401 && code == "ERR_NGROK_3406"
				})
			}
			token := keys.sign()
			for _, host := range []string{"jwt-a.example.com", "jwt-b.example.com"} {
				label := "out-" + host[4:5]
				st, body, code := call("https://"+host+"/api", token)
				sst, sbody, scode := call("https://"+host+"/static", "")
				if allow {
					if st != 200 || body != "agent "+label {
						t.Errorf("%s with a valid token, allowed: %d %s %q", host, st, code, body)
					}
					if sst != 200 || sbody != "static" {
						t.Errorf("%s's static backend, allowed: %d %s %q", host, sst, scode, sbody)
					}
					continue
				}
				if st != 401 || code != "ERR_NGROK_3401" || !strings.Contains(body, "a loopback address") || !strings.Contains(body, "--outbound-allow-private") {
					t.Errorf("%s with a valid token: %d %s %q, want 401 ERR_NGROK_3401 naming the loopback refusal", host, st, code, body)
				}
				if sst != 502 || scode != "ERR_NGROK_8012" || !strings.Contains(sbody, "a loopback address") || strings.Contains(sbody, "127.0.0.1") {
					t.Errorf("%s's static backend: %d %s %q, want 502 ERR_NGROK_8012 naming the loopback refusal, not the address", host, sst, scode, sbody)
				}
			}
			hc := a.httpClient()
			st, body, h := get(t, hc, "http://hr-b.edgeplane.app/")
			switch {
			case allow && (st != 200 || body != "agent grant=granted"):
				t.Errorf("http-request, allowed: %d %q", st, body)
			case !allow && (st != 502 || h.Get("ngrok-error-code") != "ERR_NGROK_3210" || !strings.Contains(body, "a loopback address")):
				t.Errorf("http-request: %d %s %q, want 502 ERR_NGROK_3210 naming the loopback refusal", st, h.Get("ngrok-error-code"), body)
			}
			if allow {
				return
			}
			if n := keys.fetches.Load(); n != 0 {
				t.Errorf("the key set was fetched %d times while refused", n)
			}
			// The cloud metadata address: link-local, refused before any packet is sent.
			a.jwtEdge(t, "jwt-meta.example.com", "out-meta", "https://169.254.169.254/latest/keys", "169.254.169.254:80", issuer, audience)
			eventually(t, 5*time.Second, "the metadata route is in the plan", func() bool {
				st, _, code := call("https://jwt-meta.example.com/api", "")
				return st == 401 && code == "ERR_NGROK_3406"
			})
			if st, body, code := call("https://jwt-meta.example.com/api", token); st != 401 || code != "ERR_NGROK_3401" || !strings.Contains(body, "a link-local address") {
				t.Errorf("a key set at the metadata address: %d %s %q, want 401 ERR_NGROK_3401 naming the link-local refusal", st, code, body)
			}
			if st, body, code := call("https://jwt-meta.example.com/static", ""); st != 502 || code != "ERR_NGROK_8012" || !strings.Contains(body, "a link-local address") {
				t.Errorf("a static backend at the metadata address: %d %s %q, want 502 ERR_NGROK_8012 naming the link-local refusal", st, code, body)
			}
		})
	}
}
