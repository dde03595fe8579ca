package enforce

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// jwtDoc is a jwt-validation policy in ngrok's shape for the test's issuer and audience, with
// keys from jku.
func jwtDoc(jku string) string {
	return fmt.Sprintf(`
on_http_request:
  - expressions: ["req.url.path != '/public'"]
    actions:
      - type: jwt-validation
        config:
          issuer: {allow_list: [{value: "https://idp.example.com/"}]}
          audience: {allow_list: [{value: "api://edge"}]}
          http:
            tokens: [{type: jwt, method: header, name: Authorization, prefix: "Bearer "}]
          jws:
            allowed_algorithms: [RS256, ES256]
            keys: {sources: {additional_jkus: [%q]}}
`, jku)
}

// TestPolicyJWTValidation: RS256 and ES256 tokens signed by keys of the key set (served by the
// test over TLS) are admitted; a request without a token gets 401 ERR_NGROK_3406, and a wrong
// issuer, audience, algorithm, key or an expired token 401 ERR_NGROK_3401 with an invalid_token
// challenge; the upstream never sees a refused request.
func TestPolicyJWTValidation(t *testing.T) {
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	front, up := policyFront(t, jwtDoc(srv.URL+"/keys"), PolicyOptions{Outbound: srv.Client()})
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for what, tok := range map[string]string{
		"RS256": sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil)),
		"ES256": sign(t, jose.ES256, k.ec, "ec1", "JWT", claimsAt(nil)),
	} {
		if resp, body := do(t, "GET", front+"/", "", auth(tok)); resp.StatusCode != 200 || body != "upstream " {
			t.Errorf("%s: %d %q", what, resp.StatusCode, body)
		}
	}
	resp, _ := do(t, "GET", front+"/", "", nil)
	if resp.StatusCode != 401 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3406" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("no token: %d %v", resp.StatusCode, resp.Header)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	for what, tok := range map[string]string{
		"another issuer":   sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Issuer = "https://evil.example.com/" })),
		"another audience": sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Audience = jwt.Audience{"api://other"} })),
		"expired":          sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Hour)) })),
		"another key":      sign(t, jose.RS256, other, "rsa1", "JWT", claimsAt(nil)),
		"PS256":            sign(t, jose.PS256, k.rsa, "rsa1", "JWT", claimsAt(nil)),
		"garbage":          "not.a.token",
	} {
		resp, _ := do(t, "GET", front+"/", "", auth(tok))
		if resp.StatusCode != 401 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3401" || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("%s: %d %v", what, resp.StatusCode, resp.Header)
		}
	}
	if n := up.hits.Load(); n != 2 {
		t.Errorf("the upstream got %d requests, want the 2 admitted", n)
	}
	if resp, _ := do(t, "GET", front+"/public", "", nil); resp.StatusCode != 200 {
		t.Errorf("a request the rule does not match: %d", resp.StatusCode)
	}
}

// TestPolicyJWTValidationRefused: what ngrok refuses is refused by Parse; without an outbound
// client (an agent's own policy), or with what edgeplane cannot apply, the build fails naming
// why.
func TestPolicyJWTValidationRefused(t *testing.T) {
	good := jwtDoc("https://idp.example.com/jwks")
	for from, to := range map[string]string{
		`issuer: {allow_list: [{value: "https://idp.example.com/"}]}`: `issuer: {allow_list: []}`,
		`type: jwt,`:                `type: opaque,`,
		`method: header,`:           `method: query,`,
		`[RS256, ES256]`:            `[none]`,
		`additional_jkus: [`:        `other_jkus: [`,
		`name: Authorization,`:      ``,
		`audience: {allow_list: [{`: `audience: {allow_list: [{name: x, `,
	} {
		doc := strings.Replace(good, from, to, 1)
		if _, err := trafficpolicy.Parse(doc); err == nil || !strings.Contains(err.Error(), "on_http_request[0].actions[0].config") {
			t.Errorf("%s → %s: %v", from, to, err)
		}
	}
	p, err := trafficpolicy.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTrafficPolicy(p); err == nil || !strings.Contains(err.Error(), "needs the data plane's outbound HTTP client") {
		t.Errorf("without an outbound client: %v", err)
	}
	for doc, want := range map[string]string{
		jwtDoc("http://idp.example.com/jwks"):                  "is not an https URL",
		strings.Replace(good, `[RS256, ES256]`, `[HS256]`, 1):  "HMAC algorithms are not usable",
		strings.Replace(good, `"Bearer "`, `"${req.host}"`, 1): "config.http.tokens: CEL interpolation",
	} {
		p, err := trafficpolicy.Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if _, err := NewTrafficPolicyWith(p, PolicyOptions{Outbound: newJWKSServer(t).Client()}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
