package enforce

import (
	"bytes"
	"crypto/hmac"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookCode is ngrok's error code for a request that failed webhook verification
// (ERR_NGROK_3204, "Request failed webhook verification").
const WebhookCode = 3204

// MaxWebhookBody is the largest body webhook verification reads (the API's largest body limit);
// a larger request is refused with 413 rather than passed on unverified.
const MaxWebhookBody = 10 << 20

// defaultTolerance is how far a signed timestamp may be from the current time when the provider
// documents no tolerance of its own (ngrok's documented default).
const defaultTolerance = 180 * time.Second

// WebhookOptions is what webhook verification needs beyond its configuration.
type WebhookOptions struct {
	// Client fetches signing certificates (sns); nil uses the outbound guard's client, which
	// reaches no non-public address, with a 10 s timeout.
	Client *http.Client
	// Now is the clock timestamps are checked against; nil is time.Now.
	Now func() time.Time
	// BodyTimeout bounds reading the body (0: BodyReadTimeout).
	BodyTimeout time.Duration
}

// WebhookVerification is the webhook_verification module: it reads a request's raw body,
// verifies the provider's signature over it with the configured secret, and passes the same
// bytes on. Every provider of the API's list is verified the way it signs.
type WebhookVerification struct {
	provider string
	scheme   webhookScheme
	key      any // the secret as the scheme uses it (see webhookScheme.prepare)
	secret   string
	now      func() time.Time
	sns      *snsCerts
	within   time.Duration // bounds reading the body (WebhookOptions.BodyTimeout)
}

// webhookScheme is one provider's way of signing: verify checks a request; prepare, when set,
// turns the configured secret into the key verify uses (a public key, a decoded HMAC key), so a
// secret that cannot work is refused when the stage is built.
type webhookScheme struct {
	verify  func(q *webhookRequest) error
	prepare func(secret string) (any, error)
}

// webhookRequest is one request under verification.
type webhookRequest struct {
	r      *http.Request
	body   []byte
	secret []byte
	key    any
	now    time.Time
	v      *WebhookVerification
}

// NewWebhookVerification builds the stage for provider (case-insensitive, one of ngrok's
// providers) and its secret. An unknown provider, or a secret the provider's scheme cannot use
// (a SendGrid key that is not an ECDSA public key), is an error.
func NewWebhookVerification(provider, secret string, o WebhookOptions) (*WebhookVerification, error) {
	p := strings.ToLower(provider)
	s, ok := webhookSchemes[p]
	if !ok {
		return nil, fmt.Errorf("%q is not a webhook provider", provider)
	}
	v := &WebhookVerification{provider: p, scheme: s, secret: secret, now: o.Now, within: o.BodyTimeout}
	if v.now == nil {
		v.now = time.Now
	}
	if p != "sns" && secret == "" {
		return nil, fmt.Errorf("%s needs a secret", p)
	}
	if s.prepare != nil {
		k, err := s.prepare(secret)
		if err != nil {
			return nil, fmt.Errorf("%s secret: %v", p, err)
		}
		v.key = k
	}
	if p == "sns" {
		v.sns = newSNSCerts(o.Client)
	}
	return v, nil
}

// Name is the module's name.
func (v *WebhookVerification) Name() string { return "webhook_verification" }

// Wrap refuses requests that fail verification (403 ERR_NGROK_3204 naming the reason; a body
// over MaxWebhookBody 413, one that takes longer than its time bound to arrive 408) and passes
// verified ones to next with their body intact.
func (v *WebhookVerification) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v.Verify(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// Verify checks one request: it reports true for a verified request, whose body it has read
// and put back (r.Body then holds the same bytes), and otherwise answers the refusal on w and
// reports false. The traffic policy's verify-webhook action runs it in its phase.
func (v *WebhookVerification) Verify(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > MaxWebhookBody {
		ErrorPage(w, r, http.StatusRequestEntityTooLarge, WebhookCode, fmt.Sprintf("The request body is larger than the %d bytes webhook verification reads.", MaxWebhookBody))
		return false
	}
	timed := boundBodyTime(w, r, v.within)
	body, err := io.ReadAll(io.LimitReader(timed, MaxWebhookBody+1))
	if err == nil && len(body) <= MaxWebhookBody {
		timed.lift()
	}
	if timedOut(err) {
		ErrorPage(w, r, http.StatusRequestTimeout, WebhookCode, "The request body did not arrive in time for webhook verification.")
		return false
	}
	if err != nil {
		ErrorPage(w, r, http.StatusBadRequest, WebhookCode, "The request body could not be read for webhook verification.")
		return false
	}
	if len(body) > MaxWebhookBody {
		ErrorPage(w, r, http.StatusRequestEntityTooLarge, WebhookCode, fmt.Sprintf("The request body is larger than the %d bytes webhook verification reads.", MaxWebhookBody))
		return false
	}
	q := &webhookRequest{r: r, body: body, secret: []byte(v.secret), key: v.key, now: v.now(), v: v}
	if err := v.scheme.verify(q); err != nil {
		ErrorPage(w, r, http.StatusForbidden, WebhookCode, fmt.Sprintf("The request failed %s webhook verification: %v.", v.provider, err))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return true
}

// errNoMatch is the refusal of a signature that does not match the body.
var errNoMatch = errors.New("the signature does not match")

// header returns a request header, or an error naming it when it is missing.
func (q *webhookRequest) header(name string) (string, error) {
	s := strings.TrimSpace(q.r.Header.Get(name))
	if s == "" {
		return "", fmt.Errorf("the %s header is missing", name)
	}
	return s, nil
}

// signedAt returns the signature header sigHeader and the timestamp header tsHeader, as sent,
// with the time parse reads in the timestamp; an error names the header missing or the
// timestamp that does not parse.
func (q *webhookRequest) signedAt(sigHeader, tsHeader string, parse func(string) (time.Time, error)) (sig, ts string, t time.Time, err error) {
	if sig, err = q.header(sigHeader); err != nil {
		return "", "", t, err
	}
	if ts, err = q.header(tsHeader); err != nil {
		return "", "", t, err
	}
	t, err = parse(ts)
	return sig, ts, t, err
}

// unixSeconds and unixMillis parse a timestamp in seconds, or milliseconds, since the epoch.
func unixSeconds(s string) (time.Time, error) { return unixTime(s, false) }
func unixMillis(s string) (time.Time, error)  { return unixTime(s, true) }

// fresh checks a signed timestamp against the clock: refused when it is further than tol from
// now, in either direction.
func (q *webhookRequest) fresh(t time.Time, tol time.Duration) error {
	if d := q.now.Sub(t); d > tol || d < -tol {
		return fmt.Errorf("the timestamp %s is outside the provider's tolerance of %s", t.UTC().Format(time.RFC3339), tol)
	}
	return nil
}

// unixTime parses a timestamp in seconds (or, with ms, milliseconds) since the epoch.
func unixTime(s string, ms bool) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the timestamp %q is not a number", s)
	}
	if ms {
		return time.UnixMilli(n), nil
	}
	return time.Unix(n, 0), nil
}

// url is the URL the provider sent the request to, as providers that sign it see it.
func (q *webhookRequest) url() string {
	scheme := "https"
	if q.r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + q.r.Host + q.r.URL.RequestURI()
}

// mac is the HMAC of parts with key.
func mac(h func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// encoding is how a provider writes a signature's bytes.
type encoding int

// The encodings providers use.
const (
	hexSig encoding = iota
	b64Sig
)

// decode returns a signature's bytes, false when it is not in the encoding.
func (e encoding) decode(s string) ([]byte, bool) {
	var b []byte
	var err error
	if e == hexSig {
		b, err = hex.DecodeString(s)
	} else {
		b, err = base64.StdEncoding.DecodeString(s)
	}
	return b, err == nil
}

// matchAny reports whether any of the encoded signatures equals want, comparing in constant time.
func matchAny(want []byte, e encoding, sigs ...string) error {
	for _, s := range sigs {
		if b, ok := e.decode(strings.TrimSpace(s)); ok && hmac.Equal(b, want) {
			return nil
		}
	}
	return errNoMatch
}

// bodyHMAC is the most common scheme: header carries prefix followed by the encoded HMAC of the
// raw body with the secret.
func bodyHMAC(header, prefix string, h func() hash.Hash, e encoding) webhookScheme {
	return webhookScheme{verify: func(q *webhookRequest) error {
		sig, err := q.header(header)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(sig, prefix) {
			return fmt.Errorf("the %s header does not start with %q", header, prefix)
		}
		return matchAny(mac(h, q.secret, q.body), e, sig[len(prefix):])
	}}
}

// tokenEqual is a scheme whose header carries the secret itself (GitLab).
func tokenEqual(header string) webhookScheme {
	return webhookScheme{verify: func(q *webhookRequest) error {
		tok, err := q.header(header)
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare([]byte(tok), q.secret) != 1 {
			return fmt.Errorf("the %s header does not carry the secret", header)
		}
		return nil
	}}
}

// params splits a header of comma-separated key=value pairs (Stripe's t=…,v1=…), collecting
// every value of each key.
func params(s string) map[string][]string {
	out := map[string][]string{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// timestampedHMAC is the t=…,v1=… scheme of Stripe, Calendly and Mux (and with other keys of
// Go1, HostedHooks, TikTok and Buildkite): header holds a timestamp in seconds (key tKey) and
// signatures (key sigKey), each the hex HMAC-SHA256 of "<t>.<body>".
func timestampedHMAC(header, tKey, sigKey string, h func() hash.Hash, tol time.Duration) webhookScheme {
	return webhookScheme{verify: func(q *webhookRequest) error {
		s, err := q.header(header)
		if err != nil {
			return err
		}
		p := params(s)
		if len(p[tKey]) != 1 || len(p[sigKey]) == 0 {
			return fmt.Errorf("the %s header lacks %s= or %s=", header, tKey, sigKey)
		}
		t, err := unixTime(p[tKey][0], false)
		if err != nil {
			return err
		}
		if err := matchAny(mac(h, q.secret, []byte(p[tKey][0]+"."), q.body), hexSig, p[sigKey]...); err != nil {
			return err
		}
		return q.fresh(t, tol)
	}}
}
