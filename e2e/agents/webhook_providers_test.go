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
// serve: an unsigned message is refused, and one whose certificate is elsewhere too. A second
// account verifying GitHub, Stripe, Twilio and Svix with secrets of its own (on a tunnel group of
// the same label) gets its own deliveries on its own agent, and each account refuses the
// deliveries signed with the other's secret.
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
			d, hdr := signDelivery(providers[p], providers[p].secret, tg.url)
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

	// A second account verifies a few of the providers with secrets of its own, on a route of
	// its own edge (whose tunnel group names the same label as A's) and on binds of its own
	// agent. Each account's deliveries reach its own agent only; one signed with the other
	// account's secret is refused on either account's targets.
	b := w.asAccount("hooks-b")
	_, tokenB := b.credential()
	b.reserveDomain("hooks-b.example.com")
	sessB := b.mustConnect(tokenB)
	answerB := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = rw.Write([]byte("account B "))
		echoBody(rw, r)
	})
	edgeTunB, err := sessB.Listen(ctx, config.LabeledTunnel(config.WithLabel("edge", "allhooks")))
	if err != nil {
		t.Fatalf("account B's labeled tunnel: %v", err)
	}
	serveTunnel(t, edgeTunB, answerB)
	groupB := b.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "allhooks"}})
	edgeB := b.mustCreate("/edges/https", map[string]any{"hostports": []string{"hooks-b.example.com:443"}})
	secretsB := map[string]string{"github": "body-secret-b", "stripe": "stamped-secret-b", "twilio": "form-token-b",
		"svix": "whsec_" + b64Of([]byte("account-b-key"))}
	targetsB := map[string][]target{}
	for p, secret := range secretsB {
		rid := b.mustCreate("/edges/https/"+edgeB+"/routes", map[string]any{"match_type": "path_prefix", "match": "/" + p,
			"backend": map[string]any{"backend_id": groupB}})
		if st := b.call("PUT", "/edges/https/"+edgeB+"/routes/"+rid+"/webhook_verification", map[string]any{"provider": p, "secret": secret}, nil); st != 200 {
			t.Fatalf("account B: PUT webhook_verification %s: %d", p, st)
		}
		domain := p + ".hooks-b.edgeplane.app"
		tun, err := sessB.Listen(ctx, config.HTTPEndpoint(config.WithDomain(domain), config.WithScheme(config.SchemeHTTP),
			config.WithWebhookVerification(p, secret)))
		if err != nil {
			t.Fatalf("account B: %s: bind: %v", p, err)
		}
		serveTunnel(t, tun, answerB)
		targetsB[p] = []target{{"edge route", "https://hooks-b.example.com/" + p + "?x=1"}, {"agent bind", "http://" + domain + "/" + p + "?x=1"}}
	}
	eventually(t, 5*time.Second, "account B's routes are in the plan with their module", func() bool {
		for p := range secretsB {
			if _, _, code := postSigned(t, hsc, targetsB[p][0].url, "{}", nil); code != "ERR_NGROK_3204" {
				return false
			}
		}
		return true
	})
	for p, secretB := range secretsB {
		for i, tg := range targetsB[p] {
			d, hdr := signDelivery(providers[p], secretB, tg.url)
			if st, got, _ := postSigned(t, client(tg.url), tg.url, d.body, hdr); st != 200 || got != "account B got "+d.body {
				t.Errorf("account B: %s %s: its own signed delivery: %d %q", p, tg.name, st, got)
			}
			d, hdr = signDelivery(providers[p], providers[p].secret, tg.url)
			if st, got, code := postSigned(t, client(tg.url), tg.url, d.body, hdr); st != 403 || code != "ERR_NGROK_3204" {
				t.Errorf("account B: %s %s: a delivery signed with account A's secret: %d %s %q", p, tg.name, st, code, got)
			}
			tgA := targets[p][i]
			d, hdr = signDelivery(providers[p], secretB, tgA.url)
			if st, got, code := postSigned(t, client(tgA.url), tgA.url, d.body, hdr); st != 403 || code != "ERR_NGROK_3204" {
				t.Errorf("account A: %s %s: a delivery signed with account B's secret: %d %s %q", p, tgA.name, st, code, got)
			}
		}
	}
}

// signDelivery signs a delivery of the test's body to u the provider's way with secret, and
// returns it with the request's headers (its content type included).
func signDelivery(pr whProvider, secret, u string) (whDelivery, map[string]string) {
	d := pr.sign(secret, u, strings.Replace(whBody, "%d", strconv.FormatInt(time.Now().UnixMilli(), 10), 1), time.Now())
	hdr := map[string]string{"Content-Type": "application/json"}
	if d.contentType != "" {
		hdr["Content-Type"] = d.contentType
	}
	for k, v := range d.headers {
		hdr[k] = v
	}
	return d, hdr
}

// target is where a provider's deliveries are sent: an edge route or an agent bind.
type target struct{ name, url string }

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
