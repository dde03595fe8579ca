package enforce

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// githubSignature is GitHub's X-Hub-Signature-256 of body with secret.
func githubSignature(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func webhookDoc(provider, secret string, extra string) string {
	return fmt.Sprintf(`{"on_http_request":[{"expressions":["req.method == 'POST'"],"actions":[{"type":"verify-webhook","config":{"provider":%q,"secret":%q%s}}]}]}`,
		provider, secret, extra)
}

// TestPolicyVerifyWebhook: a request signed the provider's way (GitHub's HMAC of the raw body)
// reaches the upstream with its body intact; a tampered body or a missing signature is answered
// 403 ERR_NGROK_3204 and the upstream never sees it; with enforce: false it goes on anyway; a
// provider that signs its own way (Mailgun, in the body) is verified the same way.
func TestPolicyVerifyWebhook(t *testing.T) {
	const secret, body = "It's a Secret to Everybody", `{"action":"opened","number":1}`
	front, up := policyFront(t, webhookDoc("github", secret, ""), PolicyOptions{})
	resp, got := do(t, "POST", front+"/", body, map[string]string{"X-Hub-Signature-256": githubSignature(secret, body)})
	if resp.StatusCode != 200 || got != "upstream "+body {
		t.Errorf("a signed request: %d %q", resp.StatusCode, got)
	}
	for what, hdr := range map[string]map[string]string{
		"a tampered body":     {"X-Hub-Signature-256": githubSignature(secret, body+" ")},
		"another secret":      {"X-Hub-Signature-256": githubSignature("guess", body)},
		"a missing signature": nil,
	} {
		resp, got := do(t, "POST", front+"/", body, hdr)
		if resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3204" || !strings.Contains(got, "github webhook verification") {
			t.Errorf("%s: %d %q %q", what, resp.StatusCode, resp.Header.Get("ngrok-error-code"), got)
		}
	}
	if up.hits.Load() != 1 {
		t.Errorf("the upstream got %d requests, want only the signed one", up.hits.Load())
	}
	if resp, _ := do(t, "GET", front+"/page", "", nil); resp.StatusCode != 200 {
		t.Errorf("a request the rule does not match: %d", resp.StatusCode)
	}

	front, _ = policyFront(t, webhookDoc("github", secret, `,"enforce":false`), PolicyOptions{})
	if resp, got := do(t, "POST", front+"/", body, nil); resp.StatusCode != 200 || got != "upstream "+body {
		t.Errorf("enforce false, unsigned: %d %q", resp.StatusCode, got)
	}

	front, _ = policyFront(t, webhookDoc("mailgun", secret, ""), PolicyOptions{})
	resp, got = do(t, "POST", front+"/", body, nil)
	if resp.StatusCode != 403 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3204" || !strings.Contains(got, "mailgun webhook verification") {
		t.Errorf("an unsigned Mailgun event: %d %q", resp.StatusCode, got)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	signed := `{"signature":{"timestamp":"` + ts + `","token":"tok","signature":"` + hx(hm(sha256.New, secret, ts+"tok")) + `"},"event-data":{}}`
	if resp, got := do(t, "POST", front+"/", signed, map[string]string{"Content-Type": "application/json"}); resp.StatusCode != 200 || got != "upstream "+signed {
		t.Errorf("a signed Mailgun event: %d %q", resp.StatusCode, got)
	}
}

// TestPolicyVerifyWebhookRefused: a configuration ngrok refuses is refused by Parse; what
// edgeplane cannot apply (an unknown provider, an interpolated secret, a SendGrid key that is
// not one) fails the build naming it.
func TestPolicyVerifyWebhookRefused(t *testing.T) {
	for doc, want := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"verify-webhook","config":{"secret":"s"}}]}]}`:                           "config.provider: is required",
		`{"on_http_request":[{"actions":[{"type":"verify-webhook","config":{"provider":"github"}}]}]}`:                    "config.secret: is required",
		`{"on_http_request":[{"actions":[{"type":"verify-webhook","config":{"provider":"github","secret":"s","x":1}}]}]}`: `unknown field "x"`,
		`{"on_http_response":[{"actions":[{"type":"verify-webhook","config":{"provider":"github","secret":"s"}}]}]}`:      "cannot be used in on_http_response",
	} {
		if _, err := trafficpolicy.Parse(doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	for doc, want := range map[string]string{
		webhookDoc("nosuch", "s", ""):                      `on_http_request[0].actions[0].config: "nosuch" is not a webhook provider`,
		webhookDoc("github", "${req.headers['x'][0]}", ""): "config.secret: CEL interpolation",
		webhookDoc("sendgrid", "not a key", ""):            "sendgrid secret",
	} {
		p, err := trafficpolicy.Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if _, err := NewTrafficPolicy(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
