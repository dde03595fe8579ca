package enforce

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
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
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// notYet is the reason of a provider whose signing scheme edgeplane has not implemented.
const notYet = "its signing scheme is not implemented"

// webhookSchemes is every provider of the API's list and how its
// signatures are checked; docs/dataplane.md lists the same table for users.
var webhookSchemes = map[string]webhookScheme{
	"github":             bodyHMAC("X-Hub-Signature-256", "sha256=", sha256.New, hexSig),
	"gitlab":             tokenEqual("X-Gitlab-Token"),
	"stripe":             timestampedHMAC("Stripe-Signature", "t", "v1", sha256.New, 5*time.Minute),
	"slack":              versionedHMAC("X-Slack-Signature", "X-Slack-Request-Timestamp", sha256.New, 5*time.Minute),
	"zoom":               versionedHMAC("X-Zm-Signature", "X-Zm-Request-Timestamp", sha256.New, defaultTolerance),
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

	"aftership": failsClosed(notYet), "airship": failsClosed(notYet), "autodesk": failsClosed(notYet),
	"bolt": failsClosed(notYet), "buildkite": failsClosed(notYet), "castle": failsClosed(notYet),
	"chargify": failsClosed(notYet), "clearbit": failsClosed(notYet), "contentful": failsClosed(notYet),
	"docusign": failsClosed(notYet), "frameio": failsClosed(notYet), "go1": failsClosed(notYet),
	"graphcms": failsClosed(notYet), "hostedhooks": failsClosed(notYet), "jira": failsClosed(notYet),
	"mailchimp": failsClosed(notYet), "mailgun": failsClosed(notYet),
	"modern_treasury": failsClosed(notYet), "mongodb": failsClosed(notYet), "orb": failsClosed(notYet),
	"orbit": failsClosed(notYet), "pinwheel": failsClosed(notYet), "plivo": failsClosed(notYet),
	"signal_sciences": failsClosed(notYet), "sonatype": failsClosed(notYet), "tiktok": failsClosed(notYet),
	"trendmicro_conformity": failsClosed(notYet), "vmware": failsClosed(notYet), "worldline": failsClosed(notYet),
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
	u := q.url()
	urls := []string{u}
	if host, port, ok := strings.Cut(q.r.Host, ":"); ok && (port == "443" || port == "80") {
		urls = append(urls, strings.Replace(u, q.r.Host, host, 1))
	} else if !ok {
		port := "443"
		if q.r.TLS == nil {
			port = "80"
		}
		urls = append(urls, strings.Replace(u, q.r.Host, q.r.Host+":"+port, 1))
	}
	var signed string
	if want := q.r.URL.Query().Get("bodySHA256"); want != "" {
		sum := sha256.Sum256(q.body)
		if !strings.EqualFold(want, hex.EncodeToString(sum[:])) {
			return errors.New("the body does not match its bodySHA256 parameter")
		}
	} else if ct := q.r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		form, err := url.ParseQuery(string(q.body))
		if err != nil {
			return errors.New("the form body does not parse")
		}
		names := make([]string, 0, len(form))
		for k := range form {
			names = append(names, k)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, k := range names {
			vs := form[k]
			sort.Strings(vs)
			for _, v := range vs {
				b.WriteString(k + v)
			}
		}
		signed = b.String()
	}
	for _, u := range urls {
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
	sig, err := q.header("X-Twilio-Email-Event-Webhook-Signature")
	if err != nil {
		return err
	}
	ts, err := q.header("X-Twilio-Email-Event-Webhook-Timestamp")
	if err != nil {
		return err
	}
	t, err := unixTime(ts, false)
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
	sig, err := q.header("X-Zendesk-Webhook-Signature")
	if err != nil {
		return err
	}
	ts, err := q.header("X-Zendesk-Webhook-Signature-Timestamp")
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return fmt.Errorf("the timestamp %q is not RFC 3339", ts)
	}
	if err := matchAny(mac(sha256.New, q.secret, []byte(ts), q.body), b64Sig, sig); err != nil {
		return err
	}
	return q.fresh(t, defaultTolerance)
}

// verifyHubSpot checks X-HubSpot-Signature-v3: the base64 HMAC-SHA256 of the method, the full
// URL, the body and X-HubSpot-Request-Timestamp (milliseconds), within 5 minutes.
func verifyHubSpot(q *webhookRequest) error {
	sig, err := q.header("X-HubSpot-Signature-v3")
	if err != nil {
		return err
	}
	ts, err := q.header("X-HubSpot-Request-Timestamp")
	if err != nil {
		return err
	}
	t, err := unixTime(ts, true)
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

// snsCertHost is the only host pattern SNS signing certificates are fetched from.
var snsCertHost = regexp.MustCompile(`^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`)

// snsCerts fetches and caches SNS signing certificates by URL.
type snsCerts struct {
	client *http.Client
	// allowHost says which certificate hosts are trusted: snsCertHost, or a test's server.
	allowHost func(host string) bool
	mu        sync.Mutex
	byURL     map[string]*x509.Certificate
}

func newSNSCerts(c *http.Client) *snsCerts {
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	return &snsCerts{client: c, allowHost: snsCertHost.MatchString, byURL: map[string]*x509.Certificate{}}
}

// get returns the certificate at raw, fetching it once; only https URLs on the SNS host pattern
// ending in .pem are fetched.
func (c *snsCerts) get(q *webhookRequest, raw string) (*x509.Certificate, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || !c.allowHost(u.Host) || !strings.HasSuffix(u.Path, ".pem") || u.User != nil {
		return nil, fmt.Errorf("the SigningCertURL %q is not an https .pem URL on sns.<region>.amazonaws.com", raw)
	}
	c.mu.Lock()
	cert := c.byURL[raw]
	c.mu.Unlock()
	if cert != nil {
		return cert, nil
	}
	req, _ := http.NewRequestWithContext(q.r.Context(), "GET", raw, nil)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, errors.New("the signing certificate could not be fetched")
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	b, _ := pem.Decode(data)
	if resp.StatusCode != 200 || b == nil {
		return nil, fmt.Errorf("the signing certificate could not be fetched (status %d)", resp.StatusCode)
	}
	if cert, err = x509.ParseCertificate(b.Bytes); err != nil {
		return nil, errors.New("the signing certificate does not parse")
	}
	c.mu.Lock()
	if len(c.byURL) >= 32 {
		clear(c.byURL)
	}
	c.byURL[raw] = cert
	c.mu.Unlock()
	return cert, nil
}

// verifySNS checks an SNS message (the JSON body): its RSA signature (SignatureVersion 1:
// SHA1, 2: SHA256) over the message's fields, by the certificate at SigningCertURL. SNS
// documents no tolerance (a retried message keeps its Timestamp), so none is applied.
func verifySNS(q *webhookRequest) error {
	var m map[string]any
	if json.Unmarshal(q.body, &m) != nil {
		return errors.New("the body is not an SNS message")
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	var keys []string
	switch str("Type") {
	case "Notification":
		keys = []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	case "SubscriptionConfirmation", "UnsubscribeConfirmation":
		keys = []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	default:
		return fmt.Errorf("the message type %q is not one SNS sends", str("Type"))
	}
	var b strings.Builder
	for _, k := range keys {
		if _, ok := m[k]; ok || k != "Subject" {
			b.WriteString(k + "\n" + str(k) + "\n")
		}
	}
	var h crypto.Hash
	switch str("SignatureVersion") {
	case "1":
		h = crypto.SHA1
	case "2":
		h = crypto.SHA256
	default:
		return fmt.Errorf("the SignatureVersion %q is not 1 or 2", str("SignatureVersion"))
	}
	sig, err := base64.StdEncoding.DecodeString(str("Signature"))
	if err != nil || len(sig) == 0 {
		return errors.New("the Signature is missing or not base64")
	}
	cert, err := q.v.sns.get(q, str("SigningCertURL"))
	if err != nil {
		return err
	}
	if q.now.Before(cert.NotBefore) || q.now.After(cert.NotAfter) {
		return errors.New("the signing certificate is not valid now")
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return errors.New("the signing certificate's key is not RSA")
	}
	d := h.New()
	d.Write([]byte(b.String()))
	if rsa.VerifyPKCS1v15(pub, h, d.Sum(nil), sig) != nil {
		return errNoMatch
	}
	return nil
}
