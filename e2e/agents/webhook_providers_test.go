package agents

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"golang.ngrok.com/ngrok/config"
)

// TestWebhookProvidersLive: for every provider of the API's list, a delivery signed the
// provider's way reaches the agent with its body unchanged, through an HTTPS edge route's
// webhook_verification module and through an agent endpoint bound with ngrok-go's
// WithWebhookVerification; the same delivery with its signature garbled is refused with 403
// ERR_NGROK_3204 on both. SendGrid is signed with an ECDSA key made here. SNS messages are
// verified by a certificate fetched only from sns.<region>.amazonaws.com, which a test cannot
// serve: an unsigned message is refused, and one whose certificate is elsewhere too.
func TestWebhookProvidersLive(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("hooks.example.com")
	w.reserveDomain("hooks2.example.com")
	sess := w.mustConnect(token)
	ctx := context.Background()
	edgeTun, err := sess.Listen(ctx, config.LabeledTunnel(config.WithLabel("edge", "allhooks")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, edgeTun, http.HandlerFunc(echoBody))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "allhooks"}})
	// An edge takes at most 64 routes: the providers are spread over two.
	edges := map[string]string{}
	for _, host := range []string{"hooks.example.com", "hooks2.example.com"} {
		edges[host] = w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	}

	sgKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sgDER, _ := x509.MarshalPKIXPublicKey(&sgKey.PublicKey)
	providers := map[string]whProvider{}
	for p, s := range liveProviders {
		providers[p] = s
	}
	providers["sendgrid"] = whProvider{secret: b64Of(sgDER), sign: func(_, _, b string, now time.Time) whDelivery {
		ts := strconv.FormatInt(now.Unix(), 10)
		d := sha256.Sum256([]byte(ts + b))
		sig, _ := ecdsa.SignASN1(rand.Reader, sgKey, d[:])
		return whDelivery{body: b, headers: map[string]string{"X-Twilio-Email-Event-Webhook-Timestamp": ts, "X-Twilio-Email-Event-Webhook-Signature": b64Of(sig)}}
	}}
	for _, p := range ep.WebhookProviders {
		if _, ok := providers[p]; !ok && p != "sns" {
			t.Errorf("%s: no live case", p)
		}
	}

	hc, hsc := w.httpClient(), w.httpsClient()
	type target struct{ name, url string }
	targets := map[string][]target{}
	for i, p := range ep.WebhookProviders {
		secret := providers[p].secret
		host := "hooks.example.com"
		if i%2 == 1 {
			host = "hooks2.example.com"
		}
		edge := edges[host]
		rid := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/" + p,
			"backend": map[string]any{"backend_id": group}})
		if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+rid+"/webhook_verification", map[string]any{"provider": p, "secret": secret}, nil); st != 200 {
			t.Fatalf("PUT webhook_verification %s: %d", p, st)
		}
		domain := strings.ReplaceAll(p, "_", "-") + ".hooks.edgeplane.app"
		tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain(domain), config.WithScheme(config.SchemeHTTP),
			config.WithWebhookVerification(p, secret)))
		if err != nil {
			t.Fatalf("%s: bind: %v", p, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(echoBody))
		targets[p] = []target{{"edge route", "https://" + host + "/" + p + "?x=1"}, {"agent bind", "http://" + domain + "/" + p + "?x=1"}}
	}
	client := func(u string) *http.Client {
		if strings.HasPrefix(u, "https:") {
			return hsc
		}
		return hc
	}
	eventually(t, 5*time.Second, "every route is in the plan with its module", func() bool {
		for _, p := range ep.WebhookProviders {
			if _, _, code := postSigned(t, hsc, targets[p][0].url, "{}", nil); code != "ERR_NGROK_3204" {
				return false
			}
		}
		return true
	})
	for _, p := range ep.WebhookProviders {
		for _, tg := range targets[p] {
			if p == "sns" {
				msg := `{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:us-east-1:1:t","Message":"hi","Timestamp":"2026-01-01T00:00:00Z","SignatureVersion":"2","Signature":"AAAA","SigningCertURL":"https://evil.example/cert.pem"}`
				if st, got, code := postSigned(t, client(tg.url), tg.url, msg, nil); st != 403 || code != "ERR_NGROK_3204" || !strings.Contains(got, "amazonaws.com") {
					t.Errorf("sns %s: a certificate off the SNS hosts: %d %s %q", tg.name, st, code, got)
				}
				continue
			}
			pr := providers[p]
			d := pr.sign(pr.secret, tg.url, strings.Replace(whBody, "%d", strconv.FormatInt(time.Now().UnixMilli(), 10), 1), time.Now())
			hdr := map[string]string{"Content-Type": "application/json"}
			if d.contentType != "" {
				hdr["Content-Type"] = d.contentType
			}
			for k, v := range d.headers {
				hdr[k] = v
			}
			if st, got, _ := postSigned(t, client(tg.url), tg.url, d.body, hdr); st != 200 || got != "got "+d.body {
				t.Errorf("%s %s: a signed delivery: %d %q", p, tg.name, st, got)
			}
			bad := whDelivery{body: d.body, headers: map[string]string{}}
			for k, v := range hdr {
				bad.headers[k] = v
			}
			if len(d.headers) == 0 { // Mailgun signs in the body
				bad.body = strings.Replace(d.body, `"token":"tok"`, `"token":"tok2"`, 1)
			}
			for k, v := range d.headers {
				if strings.Contains(strings.ToLower(k), "timestamp") || strings.HasSuffix(k, "Nonce") {
					continue
				}
				bad.headers[k] = garble(v)
			}
			if st, _, code := postSigned(t, client(tg.url), tg.url, bad.body, bad.headers); st != 403 || code != "ERR_NGROK_3204" {
				t.Errorf("%s %s: a garbled signature: %d %s", p, tg.name, st, code)
			}
		}
	}
}

// garble changes one character of a signature header, inside its signature: the tenth from
// the end (the last ones may be base64 padding, or bits the decoding ignores).
func garble(v string) string {
	i := max(len(v)-10, 0)
	c := byte('0')
	if v[i] == '0' {
		c = '1'
	}
	return v[:i] + string(c) + v[i+1:]
}
