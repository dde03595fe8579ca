package agents

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/samltest"
	"golang.ngrok.com/ngrok/config"
)

// newIdP is a test IdP that reads the service providers' metadata through w's listener.
func (w *world) newIdP(t *testing.T) *samltest.IdP {
	return samltest.NewIdP(t, func(id string) ([]byte, error) {
		resp, err := w.samlBrowser().Get(id)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	})
}

// samlBrowser is a browser with a cookie jar: names under example.com reach edgeplane's TLS
// listener (trusting its CA), every other address (the IdP) is dialed as it is.
func (w *world) samlBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{
		Timeout: 30 * time.Second,
		Jar:     jar,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".example.com") {
					addr = w.https
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
			TLSClientConfig: &tls.Config{RootCAs: w.ca},
		},
	}
}

// samlVisit browses to u with c, through every form the pages post on the way (tamper, when not
// nil, may change each before it is posted), and fails t when the browser cannot.
func samlVisit(t *testing.T, c *http.Client, u string, tamper func(samltest.Form) samltest.Form) samltest.Page {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	p, err := samltest.Browse(c, req, tamper)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSAMLSignIn: a route with the saml module signs a browser in through a local IdP, by the
// URLs the API reported, before an ngrok-go agent's tunnel sees the request with the identity
// headers; a user outside authorized_groups gets 403 ERR_NGROK_5312; the SLO URL signs out; the
// metadata shows the certificate the API reported, also after a restart (the key is kept).
func TestSAMLSignIn(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("sso.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "sso")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "agent %s id=%s email=%s", r.URL.RequestURI(), r.Header.Get("Ngrok-Auth-User-Id"), r.Header.Get("Ngrok-Auth-User-Email"))
	}))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "sso"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"sso.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})

	browser := w.samlBrowser()
	idp := w.newIdP(t)
	var m struct {
		EntityID string `json:"entity_id"`
		ACS      string `json:"assertion_consumer_service_url"`
		SLO      string `json:"single_logout_url"`
		Metadata string `json:"metadata_url"`
		Cert     string `json:"request_signing_certificate_pem"`
	}
	path := "/edges/https/" + edge + "/routes/" + route + "/saml"
	if st := w.call("PUT", path, map[string]any{"idp_metadata": idp.Metadata(), "authorized_groups": []string{"eng"},
		"cookie_prefix": "sso."}, &m); st != 200 {
		t.Fatalf("PUT saml: %d", st)
	}
	sp := "https://sso.example.com/ngrok/saml/" + route
	if m.EntityID != sp+"/metadata" || m.Metadata != sp+"/metadata" || m.ACS != sp+"/acs" || m.SLO != sp+"/slo" {
		t.Fatalf("service provider URLs: %+v", m)
	}
	block, _ := pem.Decode([]byte(m.Cert))
	if block == nil {
		t.Fatalf("request_signing_certificate_pem: %q", m.Cert)
	}
	certB64 := base64.StdEncoding.EncodeToString(block.Bytes)
	metadataShowsCert := func() bool {
		resp, err := w.samlBrowser().Get(m.Metadata)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), certB64) && strings.Contains(string(b), `Location="`+m.ACS+`"`)
	}
	eventually(t, time.Second, "the SP metadata with the API's certificate", metadataShowsCert)

	visit := func(c *http.Client, url string) samltest.Page {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Ngrok-Auth-User-Email", "spoofed@example.com")
		p, err := samltest.Browse(c, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	idp.SetUser(&samltest.User{NameID: "alice", Email: "alice@example.com", Groups: []string{"eng"}})
	if p := visit(browser, "https://sso.example.com/app?x=1"); p.Status != 200 || string(p.Body) != "agent /app?x=1 id=alice email=alice@example.com" {
		t.Fatalf("signed in: %d %s", p.Status, p.Body)
	}
	if reqs := idp.Requests(); len(reqs) != 1 || reqs[0].Verified != nil {
		t.Fatalf("the authentication request was not signed with the route's key: %+v", reqs)
	}

	idp.SetUser(&samltest.User{NameID: "bob", Groups: []string{"sales"}})
	if p := visit(w.samlBrowser(), "https://sso.example.com/"); p.Status != 403 || p.Header.Get("ngrok-error-code") != "ERR_NGROK_5312" {
		t.Fatalf("not in authorized_groups: %d %s %s", p.Status, p.Header.Get("ngrok-error-code"), p.Body)
	}

	if p := visit(browser, m.SLO); p.Status != 200 || !strings.Contains(string(p.Body), "Signed out") {
		t.Fatalf("logout: %d %s", p.Status, p.Body)
	}
	idp.SetUser(nil)
	if p := visit(browser, "https://sso.example.com/app"); p.Status != 403 || strings.HasPrefix(string(p.Body), "agent") {
		t.Fatalf("after logout: %d %s", p.Status, p.Body)
	}

	// A restart serves the same certificate: its key was kept.
	w.stop()
	w.run()
	eventually(t, time.Second, "the SP metadata after a restart", metadataShowsCert)
}
