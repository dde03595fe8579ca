package agents

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// hmacHex is the hex HMAC-SHA256 of msg with key.
func hmacHex(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// postSigned POSTs body with headers and returns the status, the body and the error code
// (status 0 and the error when the request fails).
func postSigned(t *testing.T, c *http.Client, url, body string, headers map[string]string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Logf("POST %s: %v", url, err)
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("ngrok-error-code")
}

// echoBody answers with the body the agent received.
func echoBody(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Write(append([]byte("got "), b...))
}

// TestWebhookVerificationEdge: routes of an HTTPS edge verify GitHub and Stripe signatures
// computed here the providers' way; the agent receives the body unchanged; a tampered body, a
// missing signature and an old Stripe timestamp are refused with 403 ERR_NGROK_3204, as is a
// Mailgun event without the signature Mailgun puts in its body.
func TestWebhookVerificationEdge(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("hooks.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "hooks")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(echoBody))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "hooks"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"hooks.example.com:443"}})
	for path, wv := range map[string]map[string]any{
		"/github":  {"provider": "github", "secret": "gh-secret"},
		"/stripe":  {"provider": "stripe", "secret": "whsec_test"},
		"/mailgun": {"provider": "mailgun", "secret": "mg-key"},
	} {
		rid := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": path,
			"backend": map[string]any{"backend_id": group}})
		if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+rid+"/webhook_verification", wv, nil); st != 200 {
			t.Fatalf("PUT webhook_verification %s: %d", path, st)
		}
	}
	c := w.httpsClient()
	body := `{"action":"opened","number":19}`
	gh := map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("gh-secret", body), "Content-Type": "application/json"}
	// Each route is created, then given its module: wait until every route is in the plan with
	// its module (an unsigned request refused on each), not just until one route answers.
	eventually(t, 2*time.Second, "the routes and their modules are in the plan", func() bool {
		for _, path := range []string{"/github", "/stripe", "/mailgun"} {
			if _, _, code := postSigned(t, c, "https://hooks.example.com"+path, body, nil); code != "ERR_NGROK_3204" {
				return false
			}
		}
		return true
	})
	if st, got, _ := postSigned(t, c, "https://hooks.example.com/github", body, gh); st != 200 || got != "got "+body {
		t.Errorf("a signed GitHub delivery: %d %q", st, got)
	}
	stripe := func(at time.Time, b string) map[string]string {
		ts := strconv.FormatInt(at.Unix(), 10)
		return map[string]string{"Stripe-Signature": "t=" + ts + ",v1=" + hmacHex("whsec_test", ts+"."+b)}
	}
	if st, got, _ := postSigned(t, c, "https://hooks.example.com/stripe", body, stripe(time.Now(), body)); st != 200 || got != "got "+body {
		t.Errorf("a signed Stripe event: %d %q", st, got)
	}
	for _, c2 := range []struct {
		what, path, body string
		headers          map[string]string
		want             string
	}{
		{"a tampered GitHub body", "/github", strings.Replace(body, "19", "20", 1), gh, "does not match"},
		{"an unsigned GitHub delivery", "/github", body, nil, "X-Hub-Signature-256 header is missing"},
		{"a tampered Stripe body", "/stripe", strings.Replace(body, "19", "20", 1), stripe(time.Now(), body), "does not match"},
		{"an old Stripe timestamp", "/stripe", body, stripe(time.Now().Add(-10*time.Minute), body), "tolerance"},
		{"an unsigned Mailgun event", "/mailgun", body, nil, "the body has no signature"},
	} {
		st, got, code := postSigned(t, c, "https://hooks.example.com"+c2.path, c2.body, c2.headers)
		if st != 403 || code != "ERR_NGROK_3204" || !strings.Contains(got, c2.want) {
			t.Errorf("%s: %d %s %q, want 403 ERR_NGROK_3204 %q", c2.what, st, code, got, c2.want)
		}
	}
}

// TestWebhookVerificationBind: an agent endpoint asking for webhook verification with ngrok-go's
// config.WithWebhookVerification verifies signatures; a bind whose secret the provider's scheme
// cannot use is refused, naming why.
func TestWebhookVerificationBind(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("gh.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithWebhookVerification("github", "bind-secret")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(echoBody))
	hc := w.httpClient()
	body := `{"zen":"Keep it logically awesome."}`
	sig := map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("bind-secret", body)}
	if st, got, _ := postSigned(t, hc, "http://gh.edgeplane.app/hook", body, sig); st != 200 || got != "got "+body {
		t.Errorf("a signed delivery: %d %q", st, got)
	}
	if st, _, code := postSigned(t, hc, "http://gh.edgeplane.app/hook", body+" ", sig); st != 403 || code != "ERR_NGROK_3204" {
		t.Errorf("a tampered delivery: %d %s", st, code)
	}
	_, err = sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("mg.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithWebhookVerification("vmware", "no-separator")))
	if err == nil || !strings.Contains(err.Error(), "vmware") || !strings.Contains(err.Error(), "<username>::<password>") {
		t.Errorf("a bind with a secret VMware's scheme cannot use: %v", err)
	}
}
