package enforce

import (
	"crypto/ecdsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// webhookSchemes is every provider of the API's list and how its
// signatures are checked; docs/dataplane.md lists the same table for users.
var webhookSchemes = map[string]webhookScheme{
	"github":             bodyHMAC("X-Hub-Signature-256", "sha256=", sha256.New, hexSig),
	"gitlab":             tokenEqual("X-Gitlab-Token"),
	"stripe":             timestampedHMAC("Stripe-Signature", "t", "v1", sha256.New, 5*time.Minute),
	"slack":              prefixedHMAC("X-Slack-Signature", "v0=", "X-Slack-Request-Timestamp", "v0:", ":", 5*time.Minute),
	"zoom":               prefixedHMAC("X-Zm-Signature", "v0=", "X-Zm-Request-Timestamp", "v0:", ":", defaultTolerance),
	"twilio":             {verify: verifyTwilio},
	"shopify":            bodyHMAC("X-Shopify-Hmac-Sha256", "", sha256.New, b64Sig),
	"svix":               svixScheme,
	"clerk":              svixScheme,
	"brex":               svixScheme,
	"sendgrid":           {verify: verifySendGrid, prepare: sendGridKey},
	"sns":                {verify: verifySNS},
	"zendesk":            {verify: verifyZendesk},
	"hubspot":            {verify: verifyHubSpot},
	"calendly":           timestampedHMAC("Calendly-Webhook-Signature", "t", "v1", sha256.New, defaultTolerance),
	"mux":                timestampedHMAC("Mux-Signature", "t", "v1", sha256.New, 5*time.Minute),
	"box":                {verify: verifyBox},
	"linear":             {verify: verifyLinear},
	"intercom":           bodyHMAC("X-Hub-Signature", "sha1=", sha1.New, hexSig),
	"facebook_graph_api": bodyHMAC("X-Hub-Signature-256", "sha256=", sha256.New, hexSig),
	"facebook_messenger": bodyHMAC("X-Hub-Signature-256", "sha256=", sha256.New, hexSig),
	"instagram":          bodyHMAC("X-Hub-Signature-256", "sha256=", sha256.New, hexSig),
	"whatsapp":           bodyHMAC("X-Hub-Signature-256", "sha256=", sha256.New, hexSig),
	"bitbucket":          bodyHMAC("X-Hub-Signature", "sha256=", sha256.New, hexSig),
	"typeform":           bodyHMAC("Typeform-Signature", "sha256=", sha256.New, b64Sig),
	"twitter":            bodyHMAC("X-Twitter-Webhooks-Signature", "sha256=", sha256.New, b64Sig),
	"sentry":             bodyHMAC("Sentry-Hook-Signature", "", sha256.New, hexSig),
	"heroku":             bodyHMAC("Heroku-Webhook-Hmac-SHA256", "", sha256.New, b64Sig),
	"terraform":          bodyHMAC("X-TFE-Notification-Signature", "", sha512.New, hexSig),
	"launch_darkly":      bodyHMAC("X-LD-Signature", "", sha256.New, hexSig),
	"dropbox":            bodyHMAC("X-Dropbox-Signature", "", sha256.New, hexSig),
	"xero":               bodyHMAC("X-Xero-Signature", "", sha256.New, b64Sig),
	"webex":              bodyHMAC("X-Spark-Signature", "", sha1.New, hexSig),
	"coinbase":           bodyHMAC("X-CC-Webhook-Signature", "", sha256.New, hexSig),
	"alchemy":            bodyHMAC("X-Alchemy-Signature", "", sha256.New, hexSig),
	"pusher":             bodyHMAC("X-Pusher-Signature", "", sha256.New, hexSig),
	"pagerduty":          {verify: listedHMAC("X-PagerDuty-Signature", "v1=")},
	"circleci":           {verify: listedHMAC("Circleci-Signature", "v1=")},
	"square":             {verify: verifySquare},
	"microsoft_teams":    {verify: verifyTeams, prepare: teamsKey},

	"aftership":             anyHeaderHMAC([]string{"Aftership-Hmac-Sha256", "As-Signature-Hmac-Sha256"}, "", sha256.New, b64Sig),
	"airship":               prefixedHMAC("X-UA-Signature", "", "X-UA-Timestamp", "", ":", defaultTolerance),
	"autodesk":              bodyHMAC("X-Adsk-Signature", "sha1hash=", sha1.New, hexSig),
	"bolt":                  bodyHMAC("X-Bolt-Hmac-Sha256", "", sha256.New, b64Sig),
	"buildkite":             timestampedHMAC("X-Buildkite-Signature", "timestamp", "signature", sha256.New, defaultTolerance),
	"castle":                bodyHMAC("X-Castle-Signature", "", sha256.New, b64Sig),
	"chargify":              bodyHMAC("X-Chargify-Webhook-Signature-Hmac-Sha-256", "", sha256.New, hexSig),
	"clearbit":              bodyHMAC("X-Request-Signature", "sha1=", sha1.New, hexSig),
	"contentful":            {verify: verifyContentful},
	"docusign":              anyHeaderHMAC(docuSignHeaders, "", sha256.New, b64Sig),
	"frameio":               prefixedHMAC("X-Frameio-Signature", "v0=", "X-Frameio-Request-Timestamp", "v0:", ":", 5*time.Minute),
	"go1":                   timestampedHMAC("Go1-Signature", "t", "v1", sha256.New, defaultTolerance),
	"graphcms":              {verify: verifyHygraph},
	"hostedhooks":           timestampedHMAC("HostedHooks-Signature", "t", "s", sha256.New, defaultTolerance),
	"jira":                  bodyHMAC("X-Hub-Signature", "sha256=", sha256.New, hexSig),
	"mailchimp":             {verify: verifyMailchimp},
	"mailgun":               {verify: verifyMailgun},
	"modern_treasury":       bodyHMAC("X-Signature", "", sha256.New, hexSig),
	"mongodb":               bodyHMAC("X-Hook-Signature", "sha256=", sha256.New, hexSig),
	"orb":                   {verify: verifyOrb},
	"orbit":                 bodyHMAC("X-Orbit-Signature", "", sha256.New, hexSig),
	"pinwheel":              prefixedHMAC("X-Pinwheel-Signature", "v2=", "X-Timestamp", "v2:", ":", defaultTolerance),
	"plivo":                 {verify: verifyPlivo},
	"signal_sciences":       bodyHMAC("X-SigSci-Signature", "", sha256.New, hexSig),
	"sonatype":              bodyHMAC("X-Nexus-Webhook-Signature", "", sha1.New, hexSig),
	"tiktok":                timestampedHMAC("TikTok-Signature", "t", "s", sha256.New, defaultTolerance),
	"trendmicro_conformity": bodyHMAC("X-Conformity-Signature", "", sha256.New, hexSig),
	"vmware":                {verify: verifyVMware, prepare: vmwareKey},
	"worldline":             bodyHMAC("X-GCS-Signature", "", sha256.New, b64Sig),
}

// listedHMAC is the scheme of PagerDuty and CircleCI: header lists comma-separated signatures,
// those with prefix being the hex HMAC-SHA256 of the body (several during a secret rotation).
func listedHMAC(header, prefix string) func(q *webhookRequest) error {
	return func(q *webhookRequest) error {
		s, err := q.header(header)
		if err != nil {
			return err
		}
		var sigs []string
		for _, p := range strings.Split(s, ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), prefix); ok {
				sigs = append(sigs, v)
			}
		}
		return matchAny(mac(sha256.New, q.secret, q.body), hexSig, sigs...)
	}
}

// svixScheme is Svix's (and the Standard Webhooks') scheme: svix-id, svix-timestamp and
// svix-signature (or the same with the webhook- prefix); the signature list holds "v1,<base64>"
// entries, each an HMAC-SHA256 of "<id>.<timestamp>.<body>" keyed with the base64 part of the
// whsec_ secret; 5 minutes tolerance.
var svixScheme = webhookScheme{
	prepare: func(secret string) (any, error) {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			return nil, errors.New("not whsec_ followed by base64")
		}
		return k, nil
	},
	verify: func(q *webhookRequest) error {
		prefix := "Svix-"
		if q.r.Header.Get("Svix-Signature") == "" && q.r.Header.Get("Webhook-Signature") != "" {
			prefix = "Webhook-"
		}
		id, err := q.header(prefix + "Id")
		if err != nil {
			return err
		}
		ts, err := q.header(prefix + "Timestamp")
		if err != nil {
			return err
		}
		sig, err := q.header(prefix + "Signature")
		if err != nil {
			return err
		}
		t, err := unixTime(ts, false)
		if err != nil {
			return err
		}
		var sigs []string
		for _, s := range strings.Fields(sig) {
			if v, ok := strings.CutPrefix(s, "v1,"); ok {
				sigs = append(sigs, v)
			}
		}
		if err := matchAny(mac(sha256.New, q.key.([]byte), []byte(id+"."+ts+"."), q.body), b64Sig, sigs...); err != nil {
			return err
		}
		return q.fresh(t, 5*time.Minute)
	},
}

// verifyTwilio checks X-Twilio-Signature: the base64 HMAC-SHA1, keyed with the auth token, of
// the URL followed by every POST form parameter (name then value, sorted by name); a JSON body
// is signed through a bodySHA256 query parameter holding its hex SHA-256 instead. Twilio may
// sign the URL with or without the default port, so both are tried.
func verifyTwilio(q *webhookRequest) error {
	sig, err := q.header("X-Twilio-Signature")
	if err != nil {
		return err
	}
	var signed string
	if want := q.r.URL.Query().Get("bodySHA256"); want != "" {
		sum := sha256.Sum256(q.body)
		if !strings.EqualFold(want, hex.EncodeToString(sum[:])) {
			return errors.New("the body does not match its bodySHA256 parameter")
		}
	} else if isForm(q) {
		if signed, err = sortedForm(q.body); err != nil {
			return err
		}
	}
	for _, u := range urlVariants(q) {
		if matchAny(mac(sha1.New, q.secret, []byte(u+signed)), b64Sig, sig) == nil {
			return nil
		}
	}
	return errNoMatch
}

// sendGridKey parses SendGrid's verification key: a base64 DER (or PEM) ECDSA public key.
func sendGridKey(secret string) (any, error) {
	der := []byte(secret)
	if b, _ := pem.Decode(der); b != nil {
		der = b.Bytes
	} else if d, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret)); err == nil {
		der = d
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("not a base64 or PEM public key")
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, errors.New("not an ECDSA public key")
	}
	return pub, nil
}

// verifySendGrid checks SendGrid's signed event webhook: the base64 ASN.1 ECDSA signature in
// X-Twilio-Email-Event-Webhook-Signature over the SHA-256 of the timestamp header followed by
// the body; SendGrid documents no tolerance, so ngrok's default applies.
func verifySendGrid(q *webhookRequest) error {
	sig, ts, t, err := q.signedAt("X-Twilio-Email-Event-Webhook-Signature", "X-Twilio-Email-Event-Webhook-Timestamp", unixSeconds)
	if err != nil {
		return err
	}
	der, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return errNoMatch
	}
	h := sha256.New()
	h.Write([]byte(ts))
	h.Write(q.body)
	if !ecdsa.VerifyASN1(q.key.(*ecdsa.PublicKey), h.Sum(nil), der) {
		return errNoMatch
	}
	return q.fresh(t, defaultTolerance)
}

// verifyZendesk checks X-Zendesk-Webhook-Signature: the base64 HMAC-SHA256 of the
// X-Zendesk-Webhook-Signature-Timestamp header (RFC 3339) followed by the body.
func verifyZendesk(q *webhookRequest) error {
	sig, ts, t, err := q.signedAt("X-Zendesk-Webhook-Signature", "X-Zendesk-Webhook-Signature-Timestamp", func(ts string) (time.Time, error) {
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			return t, fmt.Errorf("the timestamp %q is not RFC 3339", ts)
		}
		return t, nil
	})
	if err != nil {
		return err
	}
	if err := matchAny(mac(sha256.New, q.secret, []byte(ts), q.body), b64Sig, sig); err != nil {
		return err
	}
	return q.fresh(t, defaultTolerance)
}

// verifyHubSpot checks X-HubSpot-Signature-v3: the base64 HMAC-SHA256 of the method, the full
// URL, the body and X-HubSpot-Request-Timestamp (milliseconds), within 5 minutes.
func verifyHubSpot(q *webhookRequest) error {
	sig, ts, t, err := q.signedAt("X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp", unixMillis)
	if err != nil {
		return err
	}
	u := q.url()
	urls := []string{u}
	if d, err := url.PathUnescape(u); err == nil && d != u {
		urls = append(urls, d)
	}
	for _, u := range urls {
		if matchAny(mac(sha256.New, q.secret, []byte(q.r.Method+u), q.body, []byte(ts)), b64Sig, sig) == nil {
			return q.fresh(t, 5*time.Minute)
		}
	}
	return errNoMatch
}

// verifyBox checks BOX-SIGNATURE-PRIMARY or BOX-SIGNATURE-SECONDARY (either may be signed with
// the configured key): the base64 HMAC-SHA256 of the body followed by BOX-DELIVERY-TIMESTAMP
// (RFC 3339), within Box's 10 minutes.
func verifyBox(q *webhookRequest) error {
	ts, err := q.header("Box-Delivery-Timestamp")
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return fmt.Errorf("the timestamp %q is not RFC 3339", ts)
	}
	sigs := []string{q.r.Header.Get("Box-Signature-Primary"), q.r.Header.Get("Box-Signature-Secondary")}
	if sigs[0] == "" && sigs[1] == "" {
		return errors.New("the Box-Signature-Primary header is missing")
	}
	if err := matchAny(mac(sha256.New, q.secret, q.body, []byte(ts)), b64Sig, sigs...); err != nil {
		return err
	}
	return q.fresh(t, 10*time.Minute)
}

// verifyLinear checks Linear-Signature (the hex HMAC-SHA256 of the body) and the body's
// webhookTimestamp (milliseconds), which Linear asks to be within a minute.
func verifyLinear(q *webhookRequest) error {
	sig, err := q.header("Linear-Signature")
	if err != nil {
		return err
	}
	if err := matchAny(mac(sha256.New, q.secret, q.body), hexSig, sig); err != nil {
		return err
	}
	var doc struct {
		WebhookTimestamp *int64 `json:"webhookTimestamp"`
	}
	if json.Unmarshal(q.body, &doc) != nil || doc.WebhookTimestamp == nil {
		return errors.New("the body has no webhookTimestamp")
	}
	return q.fresh(time.UnixMilli(*doc.WebhookTimestamp), time.Minute)
}

// verifySquare checks X-Square-Hmacsha256-Signature: the base64 HMAC-SHA256 of the
// notification URL followed by the body.
func verifySquare(q *webhookRequest) error {
	sig, err := q.header("X-Square-Hmacsha256-Signature")
	if err != nil {
		return err
	}
	return matchAny(mac(sha256.New, q.secret, []byte(q.url()), q.body), b64Sig, sig)
}

// teamsKey decodes an outgoing webhook's security token (base64) into its HMAC key.
func teamsKey(secret string) (any, error) {
	k, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		return nil, errors.New("the security token is not base64")
	}
	return k, nil
}

// verifyTeams checks a Microsoft Teams outgoing webhook: "Authorization: HMAC <base64>", the
// HMAC-SHA256 of the body keyed with the decoded security token.
func verifyTeams(q *webhookRequest) error {
	auth, err := q.header("Authorization")
	if err != nil {
		return err
	}
	sig, ok := strings.CutPrefix(auth, "HMAC ")
	if !ok {
		return errors.New("the Authorization header is not HMAC")
	}
	return matchAny(mac(sha256.New, q.key.([]byte), q.body), b64Sig, sig)
}
