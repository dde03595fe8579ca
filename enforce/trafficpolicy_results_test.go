package enforce

import (
	"fmt"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestPolicyJWTValidationResults: a rule after jwt-validation reads the tokens it checked:
// where each was found, whether it verified, its JOSE header and its claims (whole numbers as
// int, so exp compares with an int); a token whose signature did not verify shows no claims.
func TestPolicyJWTValidationResults(t *testing.T) {
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	doc := fmt.Sprintf(`
on_http_request:
  - actions:
      - type: jwt-validation
        config:
          issuer: {allow_list: [{value: "https://idp.example.com/"}]}
          http:
            tokens:
              - {type: jwt, method: header, name: X-First}
              - {type: jwt, method: header, name: Authorization, prefix: "Bearer "}
          jws:
            allowed_algorithms: [RS256]
            keys: {sources: {additional_jkus: [%q]}}
  - actions:
      - type: custom-response
        config:
          body: "${size(actions.ngrok.jwt_validation.tokens)} ${actions.ngrok.jwt_validation.tokens[0].name} ${string(actions.ngrok.jwt_validation.tokens[0].verified)} ${size(actions.ngrok.jwt_validation.tokens[0].claims)} ${actions.ngrok.jwt_validation.tokens[1].method} ${actions.ngrok.jwt_validation.tokens[1].claims.sub} ${actions.ngrok.jwt_validation.tokens[1].header.kid} ${actions.ngrok.jwt_validation.tokens[1].header.alg} ${string(actions.ngrok.jwt_validation.tokens[1].claims.exp > 1000000000)} ${string(actions.ngrok.jwt_validation.tokens[1].verified)}"
`, srv.URL+"/keys")
	front, up := policyFront(t, doc, PolicyOptions{Outbound: srv.Client()})
	good := sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))
	bad := sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(func(c *jwt.Claims) { c.Issuer = "https://evil.example.com/" }))
	resp, body := do(t, "GET", front+"/", "", map[string]string{"X-First": bad, "Authorization": "Bearer " + good})
	if want := "2 X-First false 0 header alice rsa1 RS256 true true"; resp.StatusCode != 200 || body != want {
		t.Errorf("results: %d %q, want %q", resp.StatusCode, body, want)
	}
	// A refused request runs no later rule.
	if resp, _ := do(t, "GET", front+"/", "", map[string]string{"Authorization": "Bearer " + bad}); resp.StatusCode != 401 {
		t.Errorf("a refused token: %d", resp.StatusCode)
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// TestPolicyCompressResponseResults: a rule after compress-response reads the coding it chose
// and whether the answer was encoded already, in on_http_response and, for the action in
// on_http_request, in the rules of both phases after it.
func TestPolicyCompressResponseResults(t *testing.T) {
	seen := `"headers":{"x-alg":"${actions.ngrok.compress.negotiated_algorithm}","x-already":"${string(actions.ngrok.compress.already_compressed)}","x-same":"${actions.ngrok.compress_response.negotiated_algorithm}"}`
	front, _ := policyFront(t, `{"on_http_response":[{"actions":[{"type":"compress-response","config":{"algorithms":["gzip","deflate"]}}]},
	  {"actions":[{"type":"add-headers","config":{`+seen+`}}]}]}`, PolicyOptions{})
	for _, c := range []struct{ method, path, accept, alg string }{
		{"GET", "/page", "br, gzip", "gzip"},
		{"GET", "/page", "deflate", "deflate"},
		{"GET", "/page", "br", ""},
		{"POST", "/", "gzip", ""}, // too short to compress
	} {
		resp, _ := do(t, c.method, front+c.path, "", map[string]string{"Accept-Encoding": c.accept})
		if resp.Header.Get("X-Alg") != c.alg || resp.Header.Get("X-Same") != c.alg || resp.Header.Get("X-Already") != "false" ||
			resp.Header.Get("Content-Encoding") != c.alg {
			t.Errorf("%s %s %q: x-alg %q x-already %q encoding %q, want %q", c.method, c.path, c.accept,
				resp.Header.Get("X-Alg"), resp.Header.Get("X-Already"), resp.Header.Get("Content-Encoding"), c.alg)
		}
	}

	front, _ = policyFront(t, `{"on_http_request":[{"actions":[{"type":"compress-response"}]},
	  {"actions":[{"type":"add-headers","config":{"headers":{"x-req-alg":"${actions.ngrok.compress.negotiated_algorithm}"}}}]}],
	  "on_http_response":[{"actions":[{"type":"add-headers","config":{`+seen+`}}]}]}`, PolicyOptions{})
	resp, _ := do(t, "GET", front+"/page", "", map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("X-Alg") != "gzip" || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("the request phase's action, seen in the response phase: %v", resp.Header)
	}
	resp, _ = do(t, "POST", front+"/", "", map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("X-Alg") != "" || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("a short answer is not compressed, and the result says so: %v", resp.Header)
	}
}

// TestPolicyResultsUnset: reading the result of an action that has not run fails the
// evaluation (503 ERR_NGROK_3210 naming it), never an empty value.
func TestPolicyResultsUnset(t *testing.T) {
	front, up := policyFront(t, `{"on_http_request":[{"expressions":["actions.ngrok.jwt_validation.tokens[0].claims.sub == 'alice'"],
	  "actions":[{"type":"deny"}]}]}`, PolicyOptions{})
	resp, body := do(t, "GET", front+"/", "", nil)
	if resp.StatusCode != 503 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3210" || !strings.Contains(body, "jwt_validation") || up.hits.Load() != 0 {
		t.Errorf("%d %q %q", resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
	}
}
