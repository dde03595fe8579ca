package enforce

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rsaPublicDER is an RSA public key in DER (for a SendGrid key of the wrong kind).
func rsaPublicDER(t *testing.T) []byte {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	return der
}

// snsSign signs an SNS message the way SNS does: the listed fields as "key\nvalue\n", by the
// certificate's key, SHA1 for SignatureVersion 1 and SHA256 for 2.
func snsSign(t *testing.T, key *rsa.PrivateKey, m map[string]string) []byte {
	keys := []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	if m["Type"] != "Notification" {
		keys = []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	}
	var s strings.Builder
	for _, k := range keys {
		if v, ok := m[k]; ok {
			s.WriteString(k + "\n" + v + "\n")
		}
	}
	var sig []byte
	var err error
	if m["SignatureVersion"] == "1" {
		d := sha1.Sum([]byte(s.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA1, d[:])
	} else {
		d := sha256.Sum256([]byte(s.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	m["Signature"] = b64(sig)
	b, _ := json.Marshal(m)
	return b
}

// TestWebhookSNS: SNS messages verified by the signing certificate fetched from their
// SigningCertURL (a test TLS server standing in for sns.<region>.amazonaws.com), fetched once;
// a certificate URL off the SNS host pattern is never fetched; tampered, unsigned and garbled
// messages are refused.
func TestWebhookSNS(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: whNow.Add(-time.Hour), NotAfter: whNow.Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	var fetches atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if r.URL.Path == "/redirect.pem" {
			http.Redirect(w, r, "/SimpleNotificationService-1.pem", http.StatusFound)
			return
		}
		if r.URL.Path != "/SimpleNotificationService-1.pem" {
			http.NotFound(w, r)
			return
		}
		w.Write(certPEM)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")

	v, err := NewWebhookVerification("sns", "", WebhookOptions{Client: srv.Client(), Now: func() time.Time { return whNow }})
	if err != nil {
		t.Fatal(err)
	}
	if !v.sns.allowHost("sns.eu-west-1.amazonaws.com") || !v.sns.allowHost("sns.cn-north-1.amazonaws.com.cn") ||
		v.sns.allowHost("sns.eu-west-1.amazonaws.com.evil.example") || v.sns.allowHost("evil.example") || v.sns.allowHost(host) {
		t.Errorf("the SNS host pattern is wrong")
	}
	v.sns.allowHost = func(h string) bool { return h == host } // the test-only host override

	msg := func(typ, version string) map[string]string {
		m := map[string]string{"Type": typ, "MessageId": "m-1", "TopicArn": "arn:aws:sns:eu-west-1:1:t",
			"Message": "hello\nworld", "Timestamp": "2023-11-14T22:13:20.000Z", "SignatureVersion": version,
			"SigningCertURL": srv.URL + "/SimpleNotificationService-1.pem"}
		if typ == "Notification" {
			m["Subject"] = "greeting"
		} else {
			m["Token"], m["SubscribeURL"] = "tok", "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"
		}
		return m
	}
	for _, c := range []struct{ typ, version string }{{"Notification", "1"}, {"Notification", "2"}, {"SubscriptionConfirmation", "2"}, {"UnsubscribeConfirmation", "1"}} {
		body := snsSign(t, key, msg(c.typ, c.version))
		w, got, reached := whServe(t, v, whRequest(string(body)))
		if !reached || got != string(body) {
			t.Errorf("%s v%s: %d %s", c.typ, c.version, w.Code, w.Body.String())
		}
	}
	noSubject := msg("Notification", "2")
	delete(noSubject, "Subject")
	if w, _, reached := whServe(t, v, whRequest(string(snsSign(t, key, noSubject)))); !reached {
		t.Errorf("a notification without a subject: %s", w.Body.String())
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("the certificate was fetched %d times, want once", n)
	}

	refuse := func(what string, body string, want string) {
		t.Helper()
		w, _, reached := whServe(t, v, whRequest(body))
		refused(t, what, w, reached, 403)
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %s, want %q", what, w.Body.String(), want)
		}
	}
	good := string(snsSign(t, key, msg("Notification", "2")))
	refuse("a tampered message", strings.Replace(good, "hello", "HELLO", 1), "does not match")
	refuse("not JSON", "hello", "not an SNS message")
	bad := msg("Notification", "2")
	bad["Type"] = "Other"
	refuse("an unknown type", string(snsSign(t, key, bad)), "not one SNS sends")
	bad = msg("Notification", "3")
	refuse("an unknown signature version", string(snsSign(t, key, bad)), "not 1 or 2")
	bad = msg("Notification", "2")
	bad["SigningCertURL"] = "https://evil.example/SimpleNotificationService-1.pem"
	refuse("a certificate off the SNS hosts", string(snsSign(t, key, bad)), "amazonaws.com")
	bad["SigningCertURL"] = "http://" + host + "/SimpleNotificationService-1.pem"
	refuse("a certificate over plain HTTP", string(snsSign(t, key, bad)), "not an https .pem URL")
	bad["SigningCertURL"] = srv.URL + "/missing.pem"
	refuse("a certificate that is not there", string(snsSign(t, key, bad)), "could not be fetched")
	bad["SigningCertURL"] = srv.URL + "/redirect.pem"
	refuse("a certificate URL that redirects", string(snsSign(t, key, bad)), "status 302")
	var m map[string]string
	_ = json.Unmarshal([]byte(good), &m)
	m["Signature"] = "%%%"
	b, _ := json.Marshal(m)
	refuse("a garbled signature", string(b), "not base64")

	late, _ := NewWebhookVerification("sns", "", WebhookOptions{Client: srv.Client(), Now: func() time.Time { return whNow.Add(2 * time.Hour) }})
	late.sns.allowHost = func(h string) bool { return h == host }
	w, _, reached := whServe(t, late, whRequest(good))
	refused(t, "an expired signing certificate", w, reached, 403)
}
