package enforce

import (
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/internal/outbound"
)

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

// newSNSCerts fetches with c (nil: the outbound guard's client, trusting the system's roots and
// refusing non-public addresses, with a 10 s timeout), never following a redirect:
// only the SNS hosts are trusted to serve a certificate, not wherever one of them points.
func newSNSCerts(c *http.Client) *snsCerts {
	if c == nil {
		c = outbound.NewClient(outbound.Options{})
		c.Timeout = 10 * time.Second
	}
	noRedirect := *c
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &snsCerts{client: &noRedirect, allowHost: snsCertHost.MatchString, byURL: map[string]*x509.Certificate{}}
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
		if r, ok := outbound.Refused(err); ok {
			return nil, errors.New("the signing certificate could not be fetched: " + r.Reason() + " (--outbound-allow-private)")
		}
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
