package enforce

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/edgeplane/edgeplane/internal/outbound"
)

// guarded returns the outbound guard's client trusting srv's certificate: strict, or allowing
// non-public addresses.
func guarded(srv *httptest.Server, allowPrivate bool) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	return outbound.NewClient(outbound.Options{Roots: roots, AllowPrivate: allowPrivate})
}

// wantLoopbackRefusal checks that a page names the loopback refusal and the flag, and not the
// address refused.
func wantLoopbackRefusal(t *testing.T, what, body string) {
	t.Helper()
	if !strings.Contains(body, "a loopback address") || !strings.Contains(body, "--outbound-allow-private") || strings.Contains(body, "127.0.0.1") {
		t.Errorf("%s: %q, want the loopback refusal named (never the address)", what, body)
	}
}

// An OIDC route whose provider is on a loopback address, behind the outbound guard: the
// sign-in fails closed (502 ERR_NGROK_5211) naming the refusal, and the provider is never
// asked; allowing non-public addresses signs the visitor in.
func TestOIDCOutboundRefused(t *testing.T) {
	p := newTestOIDC(t)
	clock := newTestClock()
	edge := oidcEdge(t, p, clock, func(c *OIDCConfig) { c.Client = guarded(p.srv, false) })
	resp, body := get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 502, "ERR_NGROK_5211")
	wantLoopbackRefusal(t, "oidc discovery", body)
	allowed := oidcEdge(t, p, clock, func(c *OIDCConfig) { c.Client = guarded(p.srv, true) })
	if resp, body := get(t, browser(t, allowed), allowed.URL+"/"); resp.StatusCode != 200 || body != "upstream /" {
		t.Errorf("allowed: %d %q", resp.StatusCode, body)
	}
}

// An oauth route with the operator's endpoints on a loopback address: the browser reaches the
// authorize page (edgeplane does not fetch it), but edgeplane's own call to the token endpoint
// is refused, and the callback fails closed (502 ERR_NGROK_5211) naming the refusal.
func TestOAuthOutboundRefused(t *testing.T) {
	g := newTestGitHub(t)
	clock := newTestClock()
	edge := githubEdge(t, g, clock, func(c *OAuthConfig) { c.Client = guarded(g.Server, false) })
	resp, body := get(t, browser(t, edge), edge.URL+"/")
	wantCode(t, resp, 502, "ERR_NGROK_5211")
	wantLoopbackRefusal(t, "oauth token exchange", body)
	allowed := githubEdge(t, g, clock, func(c *OAuthConfig) { c.Client = guarded(g.Server, true) })
	if resp, body := get(t, browser(t, allowed), allowed.URL+"/"); resp.StatusCode != 200 || body != "upstream /" {
		t.Errorf("allowed: %d %q", resp.StatusCode, body)
	}
}

// SNS signing certificates fetched through the guard from a loopback address: the message is
// refused (403 ERR_NGROK_3204) naming the refusal, and the certificate server sees no request.
func TestSNSOutboundRefused(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: whNow.Add(-time.Hour), NotAfter: whNow.Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	requests := 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		_ = pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	m := map[string]string{"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:eu-west-1:1:t",
		"Message": "hello", "Timestamp": "2023-11-14T22:13:20.000Z", "SignatureVersion": "2",
		"SigningCertURL": srv.URL + "/SimpleNotificationService-1.pem"}
	body := string(snsSign(t, key, m))
	for _, allow := range []bool{false, true} {
		v, err := NewWebhookVerification("sns", "", WebhookOptions{Client: guarded(srv, allow), Now: func() time.Time { return whNow }})
		if err != nil {
			t.Fatal(err)
		}
		v.sns.allowHost = func(h string) bool { return h == host }
		w, got, reached := whServe(t, v, whRequest(body))
		if allow {
			if !reached || got != body {
				t.Errorf("allowed: %d %s", w.Code, w.Body.String())
			}
			continue
		}
		refused(t, "a certificate on loopback", w, reached, 403)
		wantLoopbackRefusal(t, "sns certificate", w.Body.String())
		if requests != 0 {
			t.Errorf("the certificate server got %d requests while refused", requests)
		}
	}
}

// A websocket_tcp_converter route whose static backend is on a loopback address, dialled through
// the guard as the data plane dials static backends: 502 ERR_NGROK_8012 naming the refusal, before
// the websocket is accepted, and the backend never sees a connection.
func TestWSTCPOutboundRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	srv := wsServer(t, func(ctx context.Context) (net.Conn, error) {
		return outbound.Options{}.Dialer().DialContext(ctx, "tcp", ln.Addr().String())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err == nil || resp == nil || resp.StatusCode != 502 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_8012" {
		t.Fatalf("a refused upstream: %v %+v, want 502 ERR_NGROK_8012", err, resp)
	}
	b, _ := io.ReadAll(resp.Body)
	wantLoopbackRefusal(t, "websocket upstream", string(b))
	select {
	case <-accepted:
		t.Error("the refused upstream accepted a connection")
	default:
	}
}
