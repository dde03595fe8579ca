package enforce

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The signing schemes of the providers that each sign in a way of their own. Each follows the
// provider's published algorithm: the header names, the bytes signed, the encoding and the
// tolerance its documentation gives (ngrok's default of 180 s where it gives none).

// anyHeaderHMAC is bodyHMAC over several headers: the request is verified when any of them
// carries prefix and the encoded HMAC of the body (AfterShip's products name the header
// differently; DocuSign sends one header per active key).
func anyHeaderHMAC(headers []string, prefix string, h func() hash.Hash, e encoding) webhookScheme {
	return webhookScheme{verify: func(q *webhookRequest) error {
		var sigs []string
		for _, name := range headers {
			if v, ok := strings.CutPrefix(strings.TrimSpace(q.r.Header.Get(name)), prefix); ok && v != "" {
				sigs = append(sigs, v)
			}
		}
		if len(sigs) == 0 {
			return fmt.Errorf("the %s header is missing", headers[0])
		}
		return matchAny(mac(h, q.secret, q.body), e, sigs...)
	}}
}

// docuSignHeaders are the headers DocuSign Connect signs in: X-DocuSign-Signature-1 for the
// first active HMAC key, up to -100 during key rotations.
var docuSignHeaders = func() []string {
	hs := make([]string, 100)
	for i := range hs {
		hs[i] = "X-DocuSign-Signature-" + strconv.Itoa(i+1)
	}
	return hs
}()

// prefixedHMAC is the scheme of Slack, Zoom, Airship, Frame.io and Pinwheel: sigHeader holds
// sigPrefix and the hex HMAC-SHA256 of msgPrefix, the timestamp header (seconds), sep and the
// body (Slack's "v0=" and the HMAC of "v0:<timestamp>:<body>").
func prefixedHMAC(sigHeader, sigPrefix, tsHeader, msgPrefix, sep string, tol time.Duration) webhookScheme {
	return webhookScheme{verify: func(q *webhookRequest) error {
		sig, ts, t, err := q.signedAt(sigHeader, tsHeader, unixSeconds)
		if err != nil {
			return err
		}
		v, ok := strings.CutPrefix(sig, sigPrefix)
		if !ok {
			return fmt.Errorf("the %s header does not start with %q", sigHeader, sigPrefix)
		}
		if err := matchAny(mac(sha256.New, q.secret, []byte(msgPrefix+ts+sep), q.body), hexSig, v); err != nil {
			return err
		}
		return q.fresh(t, tol)
	}}
}

// verifyOrb checks X-Orb-Signature: space-separated "v1=" entries, each the hex HMAC-SHA256 of
// "v1:<X-Orb-Timestamp>:<body>"; the timestamp is ISO 8601, UTC when it names no zone, within
// 5 minutes.
func verifyOrb(q *webhookRequest) error {
	sig, ts, t, err := q.signedAt("X-Orb-Signature", "X-Orb-Timestamp", isoTime)
	if err != nil {
		return err
	}
	var sigs []string
	for _, s := range strings.Fields(sig) {
		if v, ok := strings.CutPrefix(s, "v1="); ok {
			sigs = append(sigs, v)
		}
	}
	if err := matchAny(mac(sha256.New, q.secret, []byte("v1:"+ts+":"), q.body), hexSig, sigs...); err != nil {
		return err
	}
	return q.fresh(t, 5*time.Minute)
}

// isoTime parses an ISO 8601 timestamp, taking one without a zone as UTC.
func isoTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("the timestamp %q is not ISO 8601", s)
}

// verifyMailgun checks the signature Mailgun puts in the body: {"signature": {"timestamp",
// "token", "signature"}} in a JSON event (or the timestamp, token and signature fields of a
// form-encoded one), the signature being the hex HMAC-SHA256 of timestamp followed by token
// keyed with the webhook signing key.
func verifyMailgun(q *webhookRequest) error {
	var ts, token, sig string
	if isForm(q) {
		form, err := url.ParseQuery(string(q.body))
		if err != nil {
			return errors.New("the form body does not parse")
		}
		ts, token, sig = form.Get("timestamp"), form.Get("token"), form.Get("signature")
	} else {
		var doc struct {
			Signature struct {
				Timestamp json.RawMessage `json:"timestamp"`
				Token     string          `json:"token"`
				Signature string          `json:"signature"`
			} `json:"signature"`
		}
		if json.Unmarshal(q.body, &doc) != nil {
			return errors.New("the body is not a Mailgun event")
		}
		ts = strings.Trim(string(doc.Signature.Timestamp), `"`)
		token, sig = doc.Signature.Token, doc.Signature.Signature
	}
	if ts == "" || token == "" || sig == "" {
		return errors.New("the body has no signature with timestamp, token and signature")
	}
	t, err := unixTime(ts, false)
	if err != nil {
		return err
	}
	if err := matchAny(mac(sha256.New, q.secret, []byte(ts+token)), hexSig, sig); err != nil {
		return err
	}
	return q.fresh(t, defaultTolerance)
}

// isForm reports whether the request's body is form-encoded.
func isForm(q *webhookRequest) bool {
	return strings.HasPrefix(strings.ToLower(q.r.Header.Get("Content-Type")), "application/x-www-form-urlencoded")
}

// sortedForm is a form body the way Twilio and Mailchimp sign it: every parameter's name then
// value, sorted by name (and a name's values sorted).
func sortedForm(body []byte) (string, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return "", errors.New("the form body does not parse")
	}
	var b strings.Builder
	for _, k := range sortedKeys(form) {
		vs := append([]string(nil), form[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			b.WriteString(k + v)
		}
	}
	return b.String(), nil
}

func sortedKeys(v url.Values) []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// verifyMailchimp checks X-Mandrill-Signature (Mailchimp Transactional): the base64
// HMAC-SHA1, keyed with the webhook key, of the webhook URL followed by the sorted form
// parameters; Mailchimp Marketing's audience webhooks are not signed and so cannot pass.
func verifyMailchimp(q *webhookRequest) error {
	sig, err := q.header("X-Mandrill-Signature")
	if err != nil {
		return err
	}
	signed := ""
	if isForm(q) {
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

// urlVariants is the request's URL with and without its scheme's default port: providers that
// sign the URL may write it either way.
func urlVariants(q *webhookRequest) []string {
	u := q.url()
	if host, port, ok := strings.Cut(q.r.Host, ":"); ok && (port == "443" || port == "80") {
		return []string{u, strings.Replace(u, q.r.Host, host, 1)}
	} else if !ok {
		port := "443"
		if q.r.TLS == nil {
			port = "80"
		}
		return []string{u, strings.Replace(u, q.r.Host, q.r.Host+":"+port, 1)}
	}
	return []string{u}
}

// verifyPlivo checks Plivo's V3 signature: X-Plivo-Signature-V3 lists base64 HMAC-SHA256s,
// keyed with the auth token, of the URL with its query parameters sorted (a POST's form
// parameters appended as sorted name-value pairs), a dot and X-Plivo-Signature-V3-Nonce.
// Without V3 headers the V2 signature is checked: the URL without its query followed by
// X-Plivo-Signature-V2-Nonce.
func verifyPlivo(q *webhookRequest) error {
	base := q.url()
	if i := strings.IndexByte(base, '?'); i >= 0 {
		base = base[:i]
	}
	if q.r.Header.Get("X-Plivo-Signature-V3") == "" && q.r.Header.Get("X-Plivo-Signature-V2") != "" {
		sig, _ := q.header("X-Plivo-Signature-V2")
		nonce, err := q.header("X-Plivo-Signature-V2-Nonce")
		if err != nil {
			return err
		}
		return matchAny(mac(sha256.New, q.secret, []byte(base+nonce)), b64Sig, sig)
	}
	sig, err := q.header("X-Plivo-Signature-V3")
	if err != nil {
		return err
	}
	nonce, err := q.header("X-Plivo-Signature-V3-Nonce")
	if err != nil {
		return err
	}
	query := sortedQuery(q.r.URL.Query())
	signed := base
	switch q.r.Method {
	case "GET":
		if query != "" {
			signed += "?" + query
		}
	case "POST":
		var params url.Values
		if isForm(q) {
			if params, err = url.ParseQuery(string(q.body)); err != nil {
				return errors.New("the form body does not parse")
			}
		}
		if query != "" || len(params) > 0 {
			signed += "?" + query
		}
		if query != "" && len(params) > 0 {
			signed += "."
		}
		for _, k := range sortedKeys(params) {
			vs := append([]string(nil), params[k]...)
			sort.Strings(vs)
			for _, v := range vs {
				signed += k + v
			}
		}
	default:
		return fmt.Errorf("Plivo signs GET and POST requests, not %s", q.r.Method)
	}
	return matchAny(mac(sha256.New, q.secret, []byte(signed+"."+nonce)), b64Sig, strings.Split(sig, ",")...)
}

// sortedQuery is a query as Plivo signs it: name=value pairs sorted by name, then value.
func sortedQuery(v url.Values) string {
	var parts []string
	for _, k := range sortedKeys(v) {
		vs := append([]string(nil), v[k]...)
		sort.Strings(vs)
		for _, val := range vs {
			parts = append(parts, k+"="+val)
		}
	}
	return strings.Join(parts, "&")
}

// verifyHygraph checks gcms-signature: "sign=<base64>, env=<environment>, t=<ms>", the sign
// being the HMAC-SHA256 of the JSON document {"Body":<body as a JSON string>,
// "EnvironmentName":<env>,"TimeStamp":<t>} as JavaScript's JSON.stringify writes it.
func verifyHygraph(q *webhookRequest) error {
	s, err := q.header("gcms-signature")
	if err != nil {
		return err
	}
	p := params(s)
	if len(p["sign"]) != 1 || len(p["env"]) != 1 || len(p["t"]) != 1 {
		return errors.New("the gcms-signature header lacks sign=, env= or t=")
	}
	ms, err := strconv.ParseInt(p["t"][0], 10, 64)
	if err != nil {
		return fmt.Errorf("the timestamp %q is not a number", p["t"][0])
	}
	doc := `{"Body":` + jsString(string(q.body)) + `,"EnvironmentName":` + jsString(p["env"][0]) +
		`,"TimeStamp":` + strconv.FormatInt(ms, 10) + `}`
	if err := matchAny(mac(sha256.New, q.secret, []byte(doc)), b64Sig, p["sign"][0]); err != nil {
		return err
	}
	return q.fresh(time.UnixMilli(ms), defaultTolerance)
}

// jsString quotes s as JavaScript's JSON.stringify does (which, unlike encoding/json, leaves
// <, >, & and U+2028/U+2029 as they are, and writes \u escapes in lower case).
func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// verifyContentful checks Contentful's request verification: x-contentful-signature is the
// hex HMAC-SHA256 of the method, the request path, the signed headers and the body, one per
// line; the signed headers are those x-contentful-signed-headers names (lower-cased, values
// trimmed, "name:value" joined with ";" in name order, x-contentful-timestamp and the list
// itself always among them); x-contentful-timestamp (ms) within Contentful's 30 s.
func verifyContentful(q *webhookRequest) error {
	sig, err := q.header("X-Contentful-Signature")
	if err != nil {
		return err
	}
	ts, err := q.header("X-Contentful-Timestamp")
	if err != nil {
		return err
	}
	t, err := unixTime(ts, true)
	if err != nil {
		return err
	}
	listed := map[string]string{}
	for _, name := range strings.Split(q.r.Header.Get("X-Contentful-Signed-Headers"), ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if vs := q.r.Header.Values(name); name != "" && len(vs) > 0 {
			listed[name] = strings.TrimSpace(strings.Join(vs, ", "))
		}
	}
	delete(listed, "x-contentful-signed-headers")
	delete(listed, "x-contentful-timestamp")
	names := make([]string, 0, len(listed)+2)
	for k := range listed {
		names = append(names, k)
	}
	names = append(names, "x-contentful-signed-headers", "x-contentful-timestamp")
	sort.Strings(names)
	listed["x-contentful-signed-headers"] = strings.Join(names, ",")
	listed["x-contentful-timestamp"] = strconv.FormatInt(t.UnixMilli(), 10)
	pairs := make([]string, len(names))
	for i, k := range names {
		pairs[i] = k + ":" + listed[k]
	}
	canonical := q.r.Method + "\n" + contentfulPath(q.r.URL.RequestURI()) + "\n" + strings.Join(pairs, ";") + "\n"
	if err := matchAny(mac(sha256.New, q.secret, []byte(canonical), q.body), hexSig, sig); err != nil {
		return err
	}
	return q.fresh(t, 30*time.Second)
}

// contentfulPath normalizes a request URI as Contentful's signing library does: the query
// escaped whole as a URI component, then the whole escaped as a URI.
func contentfulPath(uri string) string {
	path, query, ok := strings.Cut(uri, "?")
	if ok && query != "" {
		path += "?" + jsEscape(query, "")
	}
	return jsEscape(path, ";,/?:@&=+$#")
}

// jsEscape percent-encodes s as JavaScript's encodeURIComponent does (encodeURI with keep
// being ";,/?:@&=+$#").
func jsEscape(s, keep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-_.!~*'()", c) >= 0 || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// vmwareKey parses a VMware Workspace ONE secret, "<username>::<password>" as ngrok takes it,
// into the Basic credentials the event notifications carry.
func vmwareKey(secret string) (any, error) {
	user, pass, ok := strings.Cut(secret, "::")
	if !ok || user == "" || !utf8.ValidString(secret) {
		return nil, errors.New(`not "<username>::<password>"`)
	}
	return []byte(base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))), nil
}

// verifyVMware checks a Workspace ONE event notification, which is authenticated with HTTP
// Basic credentials rather than signed: Authorization must carry the configured username and
// password.
func verifyVMware(q *webhookRequest) error {
	auth, err := q.header("Authorization")
	if err != nil {
		return err
	}
	scheme, creds, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Basic") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(creds)), q.key.([]byte)) != 1 {
		return errors.New("the Authorization header does not carry the configured username and password")
	}
	return nil
}
