package enforce

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// The clock of the webhook tests.
var whNow = time.Unix(1_700_000_000, 0)

func hm(h func() hash.Hash, key string, parts ...string) []byte {
	m := hmac.New(h, []byte(key))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hx(b []byte) string  { return hex.EncodeToString(b) }
func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// signer sets the headers (and maybe the URL) of r the provider's way, signing body with
// secret at time t.
type signer func(r *http.Request, body, secret string, t time.Time)

// header signs with one header computed from the body alone.
func header(name string, f func(body, secret string) string) signer {
	return func(r *http.Request, body, secret string, _ time.Time) { r.Header.Set(name, f(body, secret)) }
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// whCases are the implemented providers, each signed in the test the provider's way; stamped
// says the signature covers a timestamp (so an old one must be refused).
var whCases = []struct {
	provider, secret string
	stamped          bool
	sign             signer
}{
	{"github", "gh-secret", false, header("X-Hub-Signature-256", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"GitHub", "gh-secret", false, header("X-Hub-Signature-256", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"gitlab", "gl-token", false, header("X-Gitlab-Token", func(_, s string) string { return s })},
	{"stripe", "whsec_stripe", true, func(r *http.Request, b, s string, t time.Time) {
		r.Header.Set("Stripe-Signature", "t="+unix(t)+",v1="+hx(hm(sha256.New, "other", unix(t)+"."+b))+",v1="+hx(hm(sha256.New, s, unix(t)+"."+b))+",v0=00")
	}},
	{"slack", "slack-secret", true, func(r *http.Request, b, s string, t time.Time) {
		r.Header.Set("X-Slack-Request-Timestamp", unix(t))
		r.Header.Set("X-Slack-Signature", "v0="+hx(hm(sha256.New, s, "v0:"+unix(t)+":"+b)))
	}},
	{"zoom", "zoom-secret", true, func(r *http.Request, b, s string, t time.Time) {
		r.Header.Set("x-zm-request-timestamp", unix(t))
		r.Header.Set("x-zm-signature", "v0="+hx(hm(sha256.New, s, "v0:"+unix(t)+":"+b)))
	}},
	{"twilio", "auth-token", false, func(r *http.Request, b, s string, _ time.Time) {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		// The body is "b=2&a=1&a=0" (see TestWebhookVerification): sorted by name, then value.
		r.Header.Set("X-Twilio-Signature", b64(hm(sha1.New, s, "https://hooks.example.com/sms?x=1"+"a0a1b2")))
	}},
	{"shopify", "shop-secret", false, header("X-Shopify-Hmac-Sha256", func(b, s string) string { return b64(hm(sha256.New, s, b)) })},
	{"svix", "whsec_" + b64([]byte("svix-key")), true, svixSign("svix-")},
	{"clerk", "whsec_" + b64([]byte("clerk-key")), true, svixSign("svix-")},
	{"brex", "whsec_" + b64([]byte("brex-key")), true, svixSign("webhook-")},
	{"zendesk", "zd-secret", true, func(r *http.Request, b, s string, t time.Time) {
		ts := t.UTC().Format(time.RFC3339)
		r.Header.Set("X-Zendesk-Webhook-Signature-Timestamp", ts)
		r.Header.Set("X-Zendesk-Webhook-Signature", b64(hm(sha256.New, s, ts+b)))
	}},
	{"hubspot", "hs-secret", true, func(r *http.Request, b, s string, t time.Time) {
		ts := strconv.FormatInt(t.UnixMilli(), 10)
		r.Header.Set("X-HubSpot-Request-Timestamp", ts)
		r.Header.Set("X-HubSpot-Signature-v3", b64(hm(sha256.New, s, "POST"+"https://hooks.example.com/sms?x=1"+b+ts)))
	}},
	{"calendly", "cal-key", true, func(r *http.Request, b, s string, t time.Time) {
		r.Header.Set("Calendly-Webhook-Signature", "t="+unix(t)+",v1="+hx(hm(sha256.New, s, unix(t)+"."+b)))
	}},
	{"mux", "mux-secret", true, func(r *http.Request, b, s string, t time.Time) {
		r.Header.Set("Mux-Signature", "t="+unix(t)+",v1="+hx(hm(sha256.New, s, unix(t)+"."+b)))
	}},
	{"box", "box-key", true, func(r *http.Request, b, s string, t time.Time) {
		ts := t.UTC().Format(time.RFC3339)
		r.Header.Set("BOX-DELIVERY-TIMESTAMP", ts)
		r.Header.Set("BOX-SIGNATURE-PRIMARY", b64(hm(sha256.New, "other", b+ts)))
		r.Header.Set("BOX-SIGNATURE-SECONDARY", b64(hm(sha256.New, s, b+ts)))
	}},
	{"intercom", "ic-secret", false, header("X-Hub-Signature", func(b, s string) string { return "sha1=" + hx(hm(sha1.New, s, b)) })},
	{"facebook_graph_api", "fb", false, header("X-Hub-Signature-256", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"facebook_messenger", "fb", false, header("X-Hub-Signature-256", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"instagram", "ig", false, header("X-Hub-Signature-256", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"whatsapp", "wa", false, header("X-Hub-Signature-256", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"bitbucket", "bb", false, header("X-Hub-Signature", func(b, s string) string { return "sha256=" + hx(hm(sha256.New, s, b)) })},
	{"typeform", "tf", false, header("Typeform-Signature", func(b, s string) string { return "sha256=" + b64(hm(sha256.New, s, b)) })},
	{"twitter", "tw", false, header("X-Twitter-Webhooks-Signature", func(b, s string) string { return "sha256=" + b64(hm(sha256.New, s, b)) })},
	{"sentry", "se", false, header("Sentry-Hook-Signature", func(b, s string) string { return hx(hm(sha256.New, s, b)) })},
	{"heroku", "he", false, header("Heroku-Webhook-Hmac-SHA256", func(b, s string) string { return b64(hm(sha256.New, s, b)) })},
	{"terraform", "tf-token", false, header("X-TFE-Notification-Signature", func(b, s string) string { return hx(hm(sha512.New, s, b)) })},
	{"launch_darkly", "ld", false, header("X-LD-Signature", func(b, s string) string { return hx(hm(sha256.New, s, b)) })},
	{"dropbox", "db", false, header("X-Dropbox-Signature", func(b, s string) string { return hx(hm(sha256.New, s, b)) })},
	{"xero", "xe", false, header("x-xero-signature", func(b, s string) string { return b64(hm(sha256.New, s, b)) })},
	{"webex", "wx", false, header("X-Spark-Signature", func(b, s string) string { return hx(hm(sha1.New, s, b)) })},
	{"coinbase", "cb", false, header("X-CC-Webhook-Signature", func(b, s string) string { return hx(hm(sha256.New, s, b)) })},
	{"alchemy", "al", false, header("X-Alchemy-Signature", func(b, s string) string { return hx(hm(sha256.New, s, b)) })},
	{"pusher", "pu", false, header("X-Pusher-Signature", func(b, s string) string { return hx(hm(sha256.New, s, b)) })},
	{"pagerduty", "pd", false, header("X-PagerDuty-Signature", func(b, s string) string {
		return "v1=" + hx(hm(sha256.New, "old", b)) + ", v1=" + hx(hm(sha256.New, s, b))
	})},
	{"circleci", "ci", false, header("circleci-signature", func(b, s string) string { return "v1=" + hx(hm(sha256.New, s, b)) })},
	{"square", "sq", false, header("X-Square-Hmacsha256-Signature", func(b, s string) string {
		return b64(hm(sha256.New, s, "https://hooks.example.com/sms?x=1"+b))
	})},
	{"microsoft_teams", b64([]byte("teams-key")), false, header("Authorization", func(b, s string) string {
		return "HMAC " + b64(hm(sha256.New, "teams-key", b))
	})},
}

// svixSign signs the Svix (Standard Webhooks) way, with the header prefix given.
func svixSign(prefix string) signer {
	return func(r *http.Request, b, s string, t time.Time) {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		r.Header.Set(prefix+"id", "msg_1")
		r.Header.Set(prefix+"timestamp", unix(t))
		r.Header.Set(prefix+"signature", "v1,"+b64(hm(sha256.New, "x", "y"))+" v1,"+b64(hm(sha256.New, string(key), "msg_1."+unix(t)+"."+b)))
	}
}

// whServe runs one request through a stage, reporting what the next handler received.
func whServe(t *testing.T, v *WebhookVerification, r *http.Request) (*httptest.ResponseRecorder, string, bool) {
	t.Helper()
	var got string
	reached := false
	w := httptest.NewRecorder()
	v.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, reached = string(b), true
	})).ServeHTTP(w, r)
	return w, got, reached
}

func whRequest(body string) *http.Request {
	r := httptest.NewRequest("POST", "https://hooks.example.com/sms?x=1", strings.NewReader(body))
	return r
}

// refused checks a refusal's status and error code.
func refused(t *testing.T, what string, w *httptest.ResponseRecorder, reached bool, status int) {
	t.Helper()
	if reached || w.Code != status || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3204" {
		t.Errorf("%s: reached=%v %d %q, want %d ERR_NGROK_3204", what, reached, w.Code, w.Header().Get("ngrok-error-code"), status)
	}
}

// TestWebhookVerification: for every implemented provider, a request signed the provider's way
// reaches the upstream with its body intact; a tampered body, a missing signature and (for
// signed timestamps) an old timestamp or one from the future are refused with 403.
func TestWebhookVerification(t *testing.T) {
	for _, c := range whCases {
		v, err := NewWebhookVerification(c.provider, c.secret, WebhookOptions{Now: func() time.Time { return whNow }})
		if err != nil {
			t.Fatalf("%s: %v", c.provider, err)
		}
		body := `{"event":"ping","webhookTimestamp":1}`
		if c.provider == "twilio" {
			body = "b=2&a=1&a=0"
		}
		sign := func(body string, at time.Time) *http.Request {
			r := whRequest(body)
			c.sign(r, body, c.secret, at)
			return r
		}
		r := sign(body, whNow.Add(-30*time.Second))
		w, got, reached := whServe(t, v, r)
		if !reached || got != body || w.Code != 200 {
			t.Errorf("%s: a signed request: reached=%v %d %q %q", c.provider, reached, w.Code, got, w.Body.String())
		}
		tampered := sign(body, whNow)
		if c.provider == "gitlab" { // GitLab sends the token, not a signature of the body
			tampered.Header.Set("X-Gitlab-Token", "wrong")
		}
		tampered.Body = io.NopCloser(strings.NewReader(strings.NewReplacer("ping", "pong", "=2", "=3").Replace(body)))
		w, _, reached = whServe(t, v, tampered)
		refused(t, c.provider+": a tampered body", w, reached, 403)
		if !strings.Contains(w.Body.String(), strings.ToLower(c.provider)) {
			t.Errorf("%s: the refusal does not name the provider: %s", c.provider, w.Body.String())
		}
		w, _, reached = whServe(t, v, whRequest(body))
		refused(t, c.provider+": no signature", w, reached, 403)
		if c.stamped {
			for _, at := range []time.Time{whNow.Add(-time.Hour), whNow.Add(time.Hour)} {
				w, _, reached = whServe(t, v, sign(body, at))
				refused(t, c.provider+": timestamp "+at.String(), w, reached, 403)
				if !strings.Contains(w.Body.String(), "tolerance") {
					t.Errorf("%s: an old timestamp's refusal: %s", c.provider, w.Body.String())
				}
			}
		}
	}
}

// TestWebhookProvidersCovered: every provider the API accepts has a scheme, and every scheme
// a known-good vector (TestWebhookVectors, and SendGrid's and SNS's own).
func TestWebhookProvidersCovered(t *testing.T) {
	vectors := map[string]bool{"sendgrid": true, "sns": true}
	for _, c := range webhookVectors {
		vectors[c.provider] = true
	}
	for _, p := range ep.WebhookProviders {
		if _, ok := webhookSchemes[p]; !ok {
			t.Errorf("%s: no entry in webhookSchemes", p)
		}
		if !vectors[p] {
			t.Errorf("%s: no known-good vector", p)
		}
	}
	if len(webhookSchemes) != len(ep.WebhookProviders) {
		t.Errorf("webhookSchemes has %d entries, the API %d providers", len(webhookSchemes), len(ep.WebhookProviders))
	}
}

// TestWebhookRefusals: bodies over the limit get 413; an unreadable body 400; bad
// configuration is a build error.
func TestWebhookRefusals(t *testing.T) {
	gh, _ := NewWebhookVerification("github", "s", WebhookOptions{})
	big := whRequest("")
	big.ContentLength = MaxWebhookBody + 1
	w, _, reached := whServe(t, gh, big)
	refused(t, "a declared oversized body", w, reached, 413)
	big = whRequest(strings.Repeat("x", MaxWebhookBody+1))
	big.ContentLength = -1
	w, _, reached = whServe(t, gh, big)
	refused(t, "a streamed oversized body", w, reached, 413)
	bad := whRequest("")
	bad.Body = io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{}))
	w, _, reached = whServe(t, gh, bad)
	refused(t, "an unreadable body", w, reached, 400)
	r := whRequest("{}")
	r.Header.Set("X-Hub-Signature-256", hx(hm(sha256.New, "s", "{}")))
	w, _, reached = whServe(t, gh, r)
	refused(t, "a signature without its prefix", w, reached, 403)

	for _, c := range []struct{ provider, secret, want string }{
		{"nosuch", "s", "not a webhook provider"},
		{"github", "", "needs a secret"},
		{"sendgrid", "not a key", "not a base64 or PEM public key"},
		{"sendgrid", b64(rsaPublicDER(t)), "not an ECDSA public key"},
		{"svix", "whsec_!!", "not whsec_"},
		{"microsoft_teams", "!!", "not base64"},
		{"vmware", "user:pass", "<username>::<password>"},
		{"vmware", "::pass", "<username>::<password>"},
	} {
		if _, err := NewWebhookVerification(c.provider, c.secret, WebhookOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.provider, c.secret, err, c.want)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestWebhookSendGrid: SendGrid's ECDSA signature over timestamp and body, with the public key
// as SendGrid shows it (base64 DER); tampered, unsigned, stale and garbled requests refused.
func TestWebhookSendGrid(t *testing.T) {
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	v, err := NewWebhookVerification("sendgrid", b64(der), WebhookOptions{Now: func() time.Time { return whNow }})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(body string, at time.Time) *http.Request {
		r := whRequest(body)
		d := sha256.Sum256([]byte(unix(at) + body))
		sig, _ := ecdsa.SignASN1(rand.Reader, priv, d[:])
		r.Header.Set("X-Twilio-Email-Event-Webhook-Timestamp", unix(at))
		r.Header.Set("X-Twilio-Email-Event-Webhook-Signature", b64(sig))
		return r
	}
	body := `[{"event":"delivered"}]`
	if w, got, reached := whServe(t, v, sign(body, whNow)); !reached || got != body {
		t.Errorf("a signed event: %d %q", w.Code, w.Body.String())
	}
	r := sign(body, whNow)
	r.Body = io.NopCloser(strings.NewReader(`[{"event":"bounce"}]`))
	w, _, reached := whServe(t, v, r)
	refused(t, "a tampered SendGrid body", w, reached, 403)
	w, _, reached = whServe(t, v, sign(body, whNow.Add(-10*time.Minute)))
	refused(t, "an old SendGrid timestamp", w, reached, 403)
	r = sign(body, whNow)
	r.Header.Set("X-Twilio-Email-Event-Webhook-Signature", "%%%")
	w, _, reached = whServe(t, v, r)
	refused(t, "a garbled SendGrid signature", w, reached, 403)
	r = sign(body, whNow)
	r.Header.Set("X-Twilio-Email-Event-Webhook-Timestamp", "soon")
	w, _, reached = whServe(t, v, r)
	refused(t, "a SendGrid timestamp that is no number", w, reached, 403)
	w, _, reached = whServe(t, v, whRequest(body))
	refused(t, "an unsigned SendGrid event", w, reached, 403)
}

// TestWebhookLinear: Linear's body signature and its webhookTimestamp within a minute.
func TestWebhookLinear(t *testing.T) {
	v, _ := NewWebhookVerification("linear", "lin", WebhookOptions{Now: func() time.Time { return whNow }})
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{fmt.Sprintf(`{"action":"create","webhookTimestamp":%d}`, whNow.Add(-20*time.Second).UnixMilli()), true},
		{fmt.Sprintf(`{"action":"create","webhookTimestamp":%d}`, whNow.Add(-5*time.Minute).UnixMilli()), false},
		{`{"action":"create"}`, false},
	} {
		r := whRequest(c.body)
		r.Header.Set("Linear-Signature", hx(hm(sha256.New, "lin", c.body)))
		w, _, reached := whServe(t, v, r)
		if c.ok && !reached {
			t.Errorf("%s: refused: %s", c.body, w.Body.String())
		} else if !c.ok {
			refused(t, c.body, w, reached, 403)
		}
	}
}

// TestWebhookTwilioJSON: a JSON body is signed through its bodySHA256 URL parameter.
func TestWebhookTwilioJSON(t *testing.T) {
	v, _ := NewWebhookVerification("twilio", "tok", WebhookOptions{})
	body := `{"MessageStatus":"sent"}`
	sum := sha256.Sum256([]byte(body))
	u := "https://hooks.example.com/status?bodySHA256=" + hx(sum[:])
	r := httptest.NewRequest("POST", u, strings.NewReader(body))
	r.Header.Set("X-Twilio-Signature", b64(hm(sha1.New, "tok", "https://hooks.example.com:443/status?bodySHA256="+hx(sum[:]))))
	if w, _, reached := whServe(t, v, r); !reached {
		t.Errorf("a JSON body signed with the port: %s", w.Body.String())
	}
	r = httptest.NewRequest("POST", u, strings.NewReader(`{"MessageStatus":"failed"}`))
	r.Header.Set("X-Twilio-Signature", b64(hm(sha1.New, "tok", u)))
	w, _, reached := whServe(t, v, r)
	refused(t, "a JSON body that does not match bodySHA256", w, reached, 403)
}

// TestWebhookMalformedHeaders: signature headers that are partial or garbled are refused with
// 403, naming what is wrong.
func TestWebhookMalformedHeaders(t *testing.T) {
	for _, c := range []struct {
		provider, secret string
		headers          map[string]string
		want             string
	}{
		{"stripe", "s", map[string]string{"Stripe-Signature": "v1=00"}, "lacks t= or v1="},
		{"stripe", "s", map[string]string{"Stripe-Signature": "t=soon,v1=00"}, "not a number"},
		{"slack", "s", map[string]string{"X-Slack-Signature": "v0=00"}, "X-Slack-Request-Timestamp header is missing"},
		{"slack", "s", map[string]string{"X-Slack-Signature": "v0=00", "X-Slack-Request-Timestamp": "x"}, "not a number"},
		{"slack", "s", map[string]string{"X-Slack-Signature": "v1=00", "X-Slack-Request-Timestamp": "1"}, `does not start with "v0="`},
		{"zendesk", "s", map[string]string{"X-Zendesk-Webhook-Signature": "AA=="}, "Timestamp header is missing"},
		{"zendesk", "s", map[string]string{"X-Zendesk-Webhook-Signature": "AA==", "X-Zendesk-Webhook-Signature-Timestamp": "yesterday"}, "not RFC 3339"},
		{"hubspot", "s", map[string]string{"X-HubSpot-Signature-v3": "AA=="}, "X-HubSpot-Request-Timestamp header is missing"},
		{"hubspot", "s", map[string]string{"X-HubSpot-Signature-v3": "AA==", "X-HubSpot-Request-Timestamp": "x"}, "not a number"},
		{"box", "s", map[string]string{"Box-Signature-Primary": "AA=="}, "Box-Delivery-Timestamp header is missing"},
		{"box", "s", map[string]string{"Box-Delivery-Timestamp": "x"}, "not RFC 3339"},
		{"box", "s", map[string]string{"Box-Delivery-Timestamp": "2023-11-14T22:13:20Z"}, "Box-Signature-Primary header is missing"},
		{"svix", "whsec_AAAA", map[string]string{"svix-signature": "v1,AA=="}, "Svix-Id header is missing"},
		{"svix", "whsec_AAAA", map[string]string{"svix-signature": "v1,AA==", "svix-id": "m"}, "Svix-Timestamp header is missing"},
		{"svix", "whsec_AAAA", map[string]string{"svix-signature": "v1,AA==", "svix-id": "m", "svix-timestamp": "x"}, "not a number"},
		{"microsoft_teams", "AAAA", map[string]string{"Authorization": "Bearer x"}, "not HMAC"},
		{"twilio", "s", map[string]string{"X-Twilio-Signature": "AA==", "Content-Type": "application/x-www-form-urlencoded"}, "does not parse"},
		{"sendgrid", b64(ecKeyDER(t)), map[string]string{"X-Twilio-Email-Event-Webhook-Signature": "AA=="}, "Timestamp header is missing"},
		{"linear", "s", map[string]string{"Linear-Signature": hx(hm(sha256.New, "s", "%zz"))}, "no webhookTimestamp"},
		{"airship", "s", map[string]string{"X-UA-Signature": "00"}, "X-UA-Timestamp header is missing"},
		{"frameio", "s", map[string]string{"X-Frameio-Signature": "v1=00", "X-Frameio-Request-Timestamp": "1"}, `does not start with "v0="`},
		{"pinwheel", "s", map[string]string{"X-Pinwheel-Signature": "v2=00", "X-Timestamp": "soon"}, "not a number"},
		{"orb", "s", map[string]string{"X-Orb-Signature": "v1=00"}, "X-Orb-Timestamp header is missing"},
		{"orb", "s", map[string]string{"X-Orb-Signature": "v1=00", "X-Orb-Timestamp": "yesterday"}, "not ISO 8601"},
		{"graphcms", "s", map[string]string{"gcms-signature": "sign=AA=="}, "lacks sign=, env= or t="},
		{"graphcms", "s", map[string]string{"gcms-signature": "sign=AA==, env=master, t=x"}, "not a number"},
		{"contentful", "s", map[string]string{"X-Contentful-Signature": "00"}, "X-Contentful-Timestamp header is missing"},
		{"contentful", "s", map[string]string{"X-Contentful-Signature": "00", "X-Contentful-Timestamp": "x"}, "not a number"},
		{"mailgun", "s", nil, "not a Mailgun event"},
		{"mailgun", "s", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "does not parse"},
		{"plivo", "s", map[string]string{"X-Plivo-Signature-V3": "AA=="}, "X-Plivo-Signature-V3-Nonce header is missing"},
		{"plivo", "s", map[string]string{"X-Plivo-Signature-V2": "AA=="}, "X-Plivo-Signature-V2-Nonce header is missing"},
		{"mailchimp", "s", map[string]string{"X-Mandrill-Signature": "AA==", "Content-Type": "application/x-www-form-urlencoded"}, "does not parse"},
		{"vmware", "u::p", map[string]string{"Authorization": "Bearer x"}, "does not carry the configured username and password"},
		{"docusign", "s", nil, "X-DocuSign-Signature-1 header is missing"},
		{"buildkite", "s", map[string]string{"X-Buildkite-Signature": "signature=00"}, "lacks timestamp= or signature="},
	} {
		v, err := NewWebhookVerification(c.provider, c.secret, WebhookOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.provider, err)
		}
		r := whRequest("%zz")
		for k, val := range c.headers {
			r.Header.Set(k, val)
		}
		w, _, reached := whServe(t, v, r)
		refused(t, c.provider+" "+c.want, w, reached, 403)
		if !strings.Contains(w.Body.String(), quoteHTML(c.want)) {
			t.Errorf("%s: %s, want %q", c.provider, w.Body.String(), c.want)
		}
	}
}

// quoteHTML escapes quotes the way the error page does.
func quoteHTML(s string) string { return strings.ReplaceAll(s, `"`, "&#34;") }

// ecKeyDER is a fresh P-256 public key in DER.
func ecKeyDER(t *testing.T) []byte {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
