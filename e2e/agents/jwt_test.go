package agents

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.ngrok.com/ngrok/config"
)

// TestEdgeJWTValidation: a route's jwt_validation fetches its key set over https from a server
// whose certificate only --outbound-ca trusts; RS256 and ES256 tokens signed by the set's keys
// reach the agent (with their Authorization header), a request without a token gets 401
// ERR_NGROK_3406, and tokens of the wrong issuer, audience or algorithm, or expired, get 401
// ERR_NGROK_3401 with an invalid_token challenge and never reach the agent.
func TestEdgeJWTValidation(t *testing.T) {
	ca, caFile := newOutboundCA(t, "jwks CA")
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwksCert, _ := ca.Issue("127.0.0.1")
	jwks := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &rsaKey.PublicKey, KeyID: "r1", Use: "sig"}, {Key: &ecKey.PublicKey, KeyID: "e1", Use: "sig"}}})
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{*jwksCert}}}
	jl, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = jwks.ServeTLS(jl, "", "") }()
	defer jwks.Close()

	w := start(t, "--outbound-ca", caFile, "--outbound-allow-private") // the key set is on this host
	_, token := w.credential()
	w.reserveDomain("jwt.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "jwt")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "agent auth=%t", strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ey"))
	}))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "jwt"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"jwt.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	const issuer, audience = "https://idp.example.com/", "api://jwt-edge"
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+route+"/jwt_validation", map[string]any{
		"issuer":   map[string]any{"allow_list": []any{map[string]any{"value": issuer}}},
		"audience": map[string]any{"allow_list": []any{map[string]any{"value": audience}}},
		"http":     map[string]any{"tokens": []any{map[string]any{"type": "jwt", "method": "header", "name": "Authorization", "prefix": "Bearer "}}},
		"jws": map[string]any{"allowed_algorithms": []string{"RS256", "ES256"},
			"keys": map[string]any{"sources": map[string]any{"additional_jkus": []string{"https://" + jl.Addr().String() + "/keys"}}}},
	}, nil); st != 200 {
		t.Fatalf("put jwt_validation: %d", st)
	}

	c := w.httpsClient()
	call := func(auth string) (int, string, http.Header, error) {
		req, _ := http.NewRequest("GET", "https://jwt.example.com/api", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header, nil
	}
	eventually(t, 5*time.Second, "jwt_validation is in the plan", func() bool {
		st, _, h, err := call("")
		return err == nil && st == 401 && h.Get("ngrok-error-code") == "ERR_NGROK_3406"
	})

	signed := func(alg jose.SignatureAlgorithm, key any, kid string, edit func(*jwt.Claims)) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		cl := jwt.Claims{Issuer: issuer, Audience: jwt.Audience{audience}, Subject: "alice",
			Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)), IssuedAt: jwt.NewNumericDate(now)}
		if edit != nil {
			edit(&cl)
		}
		tok, err := jwt.Signed(s).Claims(cl).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	for name, auth := range map[string]string{
		"RS256": signed(jose.RS256, rsaKey, "r1", nil),
		"ES256": signed(jose.ES256, ecKey, "e1", nil),
	} {
		if st, body, _, err := call(auth); err != nil || st != 200 || body != "agent auth=true" {
			t.Errorf("%s: %d %q %v, want the agent's answer", name, st, body, err)
		}
	}
	for name, auth := range map[string]string{
		"wrong issuer":    signed(jose.RS256, rsaKey, "r1", func(c *jwt.Claims) { c.Issuer = "https://other.example.com/" }),
		"wrong audience":  signed(jose.ES256, ecKey, "e1", func(c *jwt.Claims) { c.Audience = jwt.Audience{"api://other"} }),
		"alg not allowed": signed(jose.PS256, rsaKey, "r1", nil),
		"expired":         signed(jose.RS256, rsaKey, "r1", func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Hour)) }),
	} {
		st, body, h, err := call(auth)
		if err != nil || st != 401 || h.Get("ngrok-error-code") != "ERR_NGROK_3401" ||
			!strings.Contains(h.Get("WWW-Authenticate"), `error="invalid_token"`) || strings.Contains(body, "agent") {
			t.Errorf("%s: %d %q %q %v, want 401 ERR_NGROK_3401 with an invalid_token challenge", name, st, h.Get("ngrok-error-code"), h.Get("WWW-Authenticate"), err)
		}
	}
}
