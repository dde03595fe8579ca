package agents

// How each webhook provider signs a delivery, written here from the provider's published
// algorithm (not from edgeplane's code), for the live tests of webhook verification.

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// whDelivery is a webhook as a provider sends it: its body, content type and headers.
type whDelivery struct {
	body, contentType string
	headers           map[string]string
}

// whProvider signs deliveries the provider's way, at now, for a request to u.
type whProvider struct {
	secret string
	sign   func(secret, u, body string, now time.Time) whDelivery
}

func mac(h func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

var (
	hexOf = hex.EncodeToString
	b64Of = base64.StdEncoding.EncodeToString
)

const (
	whBody = `{"id":"evt_1","type":"ping","webhookTimestamp":%d}`
	whForm = "To=%2B15005550006&Digits=1234&CallSid=CA1"
)

// onBody signs the JSON body alone: header carries prefix and the encoded HMAC.
func onBody(header, prefix string, h func() hash.Hash, enc func([]byte) string) whProvider {
	return whProvider{secret: "body-secret", sign: func(s, _, b string, _ time.Time) whDelivery {
		return whDelivery{body: b, headers: map[string]string{header: prefix + enc(mac(h, []byte(s), b))}}
	}}
}

// stamped signs msg(t, body) with HMAC-SHA256 in hex, sig(t, hex) giving the headers.
func stamped(msg func(ts, b string) string, headers func(ts, sig string) map[string]string) whProvider {
	return whProvider{secret: "stamped-secret", sign: func(s, _, b string, now time.Time) whDelivery {
		ts := strconv.FormatInt(now.Unix(), 10)
		return whDelivery{body: b, headers: headers(ts, hexOf(mac(sha256.New, []byte(s), msg(ts, b))))}
	}}
}

func dotted(ts, b string) string { return ts + "." + b }

// tParams is a t=…,<key>=… header.
func tParams(header, tKey, key string) func(ts, sig string) map[string]string {
	return func(ts, sig string) map[string]string {
		return map[string]string{header: tKey + "=" + ts + "," + key + "=" + sig}
	}
}

// sortedForm is a form's names and values, sorted, as Twilio, Mailchimp and Plivo sign them.
func sortedForm(f string) string {
	v, _ := url.ParseQuery(f)
	var keys []string
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, val := range v[k] {
			b.WriteString(k + val)
		}
	}
	return b.String()
}

// formSigned signs the URL and the sorted form with HMAC-SHA1 in base64, in header.
func formSigned(header string) whProvider {
	return whProvider{secret: "form-token", sign: func(s, u, _ string, _ time.Time) whDelivery {
		return whDelivery{body: whForm, contentType: "application/x-www-form-urlencoded",
			headers: map[string]string{header: b64Of(mac(sha1.New, []byte(s), u+sortedForm(whForm)))}}
	}}
}

// standardWebhooks signs the Svix way, with the header prefix given.
func standardWebhooks(prefix string) whProvider {
	return whProvider{secret: "whsec_" + b64Of([]byte("standard-webhooks-key")), sign: func(s, _, b string, now time.Time) whDelivery {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		ts := strconv.FormatInt(now.Unix(), 10)
		return whDelivery{body: b, headers: map[string]string{prefix + "id": "msg_1", prefix + "timestamp": ts,
			prefix + "signature": "v1," + b64Of(mac(sha256.New, key, "msg_1."+ts+"."+b))}}
	}}
}

// liveProviders signs for every provider but SendGrid and SNS (see TestWebhookProvidersLive),
// each from the provider's published algorithm.
var liveProviders = map[string]whProvider{
	"github":      onBody("X-Hub-Signature-256", "sha256=", sha256.New, hexOf),
	"stripe":      stamped(dotted, tParams("Stripe-Signature", "t", "v1")),
	"calendly":    stamped(dotted, tParams("Calendly-Webhook-Signature", "t", "v1")),
	"mux":         stamped(dotted, tParams("Mux-Signature", "t", "v1")),
	"go1":         stamped(dotted, tParams("Go1-Signature", "t", "v1")),
	"hostedhooks": stamped(dotted, tParams("HostedHooks-Signature", "t", "s")),
	"tiktok":      stamped(dotted, tParams("TikTok-Signature", "t", "s")),
	"buildkite":   stamped(dotted, tParams("X-Buildkite-Signature", "timestamp", "signature")),
	"slack": stamped(func(ts, b string) string { return "v0:" + ts + ":" + b }, func(ts, sig string) map[string]string {
		return map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=" + sig}
	}),
	"zoom": stamped(func(ts, b string) string { return "v0:" + ts + ":" + b }, func(ts, sig string) map[string]string {
		return map[string]string{"X-Zm-Request-Timestamp": ts, "X-Zm-Signature": "v0=" + sig}
	}),
	"frameio": stamped(func(ts, b string) string { return "v0:" + ts + ":" + b }, func(ts, sig string) map[string]string {
		return map[string]string{"X-Frameio-Request-Timestamp": ts, "X-Frameio-Signature": "v0=" + sig}
	}),
	"pinwheel": stamped(func(ts, b string) string { return "v2:" + ts + ":" + b }, func(ts, sig string) map[string]string {
		return map[string]string{"X-Timestamp": ts, "X-Pinwheel-Signature": "v2=" + sig}
	}),
	"airship": stamped(func(ts, b string) string { return ts + ":" + b }, func(ts, sig string) map[string]string {
		return map[string]string{"X-UA-Timestamp": ts, "X-UA-Signature": sig}
	}),
	"shopify":               onBody("X-Shopify-Hmac-Sha256", "", sha256.New, b64Of),
	"intercom":              onBody("X-Hub-Signature", "sha1=", sha1.New, hexOf),
	"facebook_graph_api":    onBody("X-Hub-Signature-256", "sha256=", sha256.New, hexOf),
	"facebook_messenger":    onBody("X-Hub-Signature-256", "sha256=", sha256.New, hexOf),
	"instagram":             onBody("X-Hub-Signature-256", "sha256=", sha256.New, hexOf),
	"whatsapp":              onBody("X-Hub-Signature-256", "sha256=", sha256.New, hexOf),
	"bitbucket":             onBody("X-Hub-Signature", "sha256=", sha256.New, hexOf),
	"jira":                  onBody("X-Hub-Signature", "sha256=", sha256.New, hexOf),
	"mongodb":               onBody("X-Hook-Signature", "sha256=", sha256.New, hexOf),
	"typeform":              onBody("Typeform-Signature", "sha256=", sha256.New, b64Of),
	"twitter":               onBody("X-Twitter-Webhooks-Signature", "sha256=", sha256.New, b64Of),
	"sentry":                onBody("Sentry-Hook-Signature", "", sha256.New, hexOf),
	"launch_darkly":         onBody("X-LD-Signature", "", sha256.New, hexOf),
	"dropbox":               onBody("X-Dropbox-Signature", "", sha256.New, hexOf),
	"coinbase":              onBody("X-CC-Webhook-Signature", "", sha256.New, hexOf),
	"alchemy":               onBody("X-Alchemy-Signature", "", sha256.New, hexOf),
	"pusher":                onBody("X-Pusher-Signature", "", sha256.New, hexOf),
	"chargify":              onBody("X-Chargify-Webhook-Signature-Hmac-Sha-256", "", sha256.New, hexOf),
	"modern_treasury":       onBody("X-Signature", "", sha256.New, hexOf),
	"orbit":                 onBody("X-Orbit-Signature", "", sha256.New, hexOf),
	"signal_sciences":       onBody("X-SigSci-Signature", "", sha256.New, hexOf),
	"trendmicro_conformity": onBody("X-Conformity-Signature", "", sha256.New, hexOf),
	"heroku":                onBody("Heroku-Webhook-Hmac-SHA256", "", sha256.New, b64Of),
	"xero":                  onBody("X-Xero-Signature", "", sha256.New, b64Of),
	"aftership":             onBody("Aftership-Hmac-Sha256", "", sha256.New, b64Of),
	"bolt":                  onBody("X-Bolt-Hmac-Sha256", "", sha256.New, b64Of),
	"castle":                onBody("X-Castle-Signature", "", sha256.New, b64Of),
	"docusign":              onBody("X-DocuSign-Signature-1", "", sha256.New, b64Of),
	"worldline":             onBody("X-GCS-Signature", "", sha256.New, b64Of),
	"terraform":             onBody("X-TFE-Notification-Signature", "", sha512.New, hexOf),
	"webex":                 onBody("X-Spark-Signature", "", sha1.New, hexOf),
	"sonatype":              onBody("X-Nexus-Webhook-Signature", "", sha1.New, hexOf),
	"autodesk":              onBody("X-Adsk-Signature", "sha1hash=", sha1.New, hexOf),
	"clearbit":              onBody("X-Request-Signature", "sha1=", sha1.New, hexOf),
	"pagerduty":             onBody("X-PagerDuty-Signature", "v1=", sha256.New, hexOf),
	"circleci":              onBody("Circleci-Signature", "v1=", sha256.New, hexOf),
	"linear":                onBody("Linear-Signature", "", sha256.New, hexOf),
	"svix":                  standardWebhooks("svix-"),
	"clerk":                 standardWebhooks("svix-"),
	"brex":                  standardWebhooks("webhook-"),
	"twilio":                formSigned("X-Twilio-Signature"),
	"mailchimp":             formSigned("X-Mandrill-Signature"),
	"gitlab": {secret: "gitlab-token", sign: func(s, _, b string, _ time.Time) whDelivery {
		return whDelivery{body: b, headers: map[string]string{"X-Gitlab-Token": s}}
	}},
	"vmware": {secret: "ws1-user::ws1-pass", sign: func(_, _, b string, _ time.Time) whDelivery {
		return whDelivery{body: b, headers: map[string]string{"Authorization": "Basic " + b64Of([]byte("ws1-user:ws1-pass"))}}
	}},
	"microsoft_teams": {secret: b64Of([]byte("teams-key")), sign: func(_, _, b string, _ time.Time) whDelivery {
		return whDelivery{body: b, headers: map[string]string{"Authorization": "HMAC " + b64Of(mac(sha256.New, []byte("teams-key"), b))}}
	}},
	"square": {secret: "square-key", sign: func(s, u, b string, _ time.Time) whDelivery {
		return whDelivery{body: b, headers: map[string]string{"X-Square-Hmacsha256-Signature": b64Of(mac(sha256.New, []byte(s), u+b))}}
	}},
	"zendesk": {secret: "zendesk-secret", sign: func(s, _, b string, now time.Time) whDelivery {
		ts := now.UTC().Format(time.RFC3339)
		return whDelivery{body: b, headers: map[string]string{"X-Zendesk-Webhook-Signature-Timestamp": ts, "X-Zendesk-Webhook-Signature": b64Of(mac(sha256.New, []byte(s), ts+b))}}
	}},
	"box": {secret: "box-key", sign: func(s, _, b string, now time.Time) whDelivery {
		ts := now.UTC().Format(time.RFC3339)
		return whDelivery{body: b, headers: map[string]string{"Box-Delivery-Timestamp": ts, "Box-Signature-Primary": b64Of(mac(sha256.New, []byte(s), b+ts))}}
	}},
	"hubspot": {secret: "hubspot-secret", sign: func(s, u, b string, now time.Time) whDelivery {
		ts := strconv.FormatInt(now.UnixMilli(), 10)
		return whDelivery{body: b, headers: map[string]string{"X-HubSpot-Request-Timestamp": ts, "X-HubSpot-Signature-v3": b64Of(mac(sha256.New, []byte(s), "POST"+u+b+ts))}}
	}},
	"orb": {secret: "orb-secret", sign: func(s, _, b string, now time.Time) whDelivery {
		ts := now.UTC().Format("2006-01-02T15:04:05.000000")
		return whDelivery{body: b, headers: map[string]string{"X-Orb-Timestamp": ts, "X-Orb-Signature": "v1=" + hexOf(mac(sha256.New, []byte(s), "v1:"+ts+":"+b))}}
	}},
	"graphcms": {secret: "hygraph-secret", sign: func(s, _, b string, now time.Time) whDelivery {
		doc, _ := json.Marshal(struct {
			Body            string
			EnvironmentName string
			TimeStamp       int64
		}{b, "master", now.UnixMilli()})
		return whDelivery{body: b, headers: map[string]string{"gcms-signature": "sign=" + b64Of(mac(sha256.New, []byte(s), string(doc))) + ", env=master, t=" + strconv.FormatInt(now.UnixMilli(), 10)}}
	}},
	"contentful": {secret: strings.Repeat("c", 64), sign: func(s, u, b string, now time.Time) whDelivery {
		ts := strconv.FormatInt(now.UnixMilli(), 10)
		pu, _ := url.Parse(u)
		// The path's query is escaped twice by Contentful's signing library (x=1 → x%253D1).
		path := pu.Path + "?" + strings.ReplaceAll(url.QueryEscape(pu.RawQuery), "%", "%25")
		canonical := "POST\n" + path + "\nx-contentful-signed-headers:x-contentful-signed-headers,x-contentful-timestamp;x-contentful-timestamp:" + ts + "\n" + b
		return whDelivery{body: b, headers: map[string]string{"X-Contentful-Timestamp": ts, "X-Contentful-Signed-Headers": "x-contentful-signed-headers,x-contentful-timestamp",
			"X-Contentful-Signature": hexOf(mac(sha256.New, []byte(s), canonical))}}
	}},
	"mailgun": {secret: "mailgun-key", sign: func(s, _, _ string, now time.Time) whDelivery {
		ts := strconv.FormatInt(now.Unix(), 10)
		return whDelivery{body: `{"signature":{"timestamp":"` + ts + `","token":"tok","signature":"` + hexOf(mac(sha256.New, []byte(s), ts+"tok")) + `"},"event-data":{"event":"delivered"}}`}
	}},
	"plivo": {secret: "plivo-token", sign: func(s, u, _ string, _ time.Time) whDelivery {
		// The URL, its sorted query, "." and the sorted form pairs, then "." and the nonce.
		signed := u + "." + sortedForm(whForm) + ".nonce-1"
		return whDelivery{body: whForm, contentType: "application/x-www-form-urlencoded",
			headers: map[string]string{"X-Plivo-Signature-V3-Nonce": "nonce-1", "X-Plivo-Signature-V3": b64Of(mac(sha256.New, []byte(s), signed))}}
	}},
}
