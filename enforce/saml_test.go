package enforce

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/samltest"
)

// samlEnv is a route with the saml module behind an HTTPS test server, a local IdP and a
// browser (a client with a cookie jar) that signs in through both.
type samlEnv struct {
	t        *testing.T
	idp      *samltest.IdP
	srv      *httptest.Server
	base     string // https://127.0.0.1:port
	sp       string // base + /ngrok/saml/rt_1
	browser  *http.Client
	upstream struct {
		sync.Mutex
		last http.Header
		hits int
	}
	handler http.Handler
	// roots, when the IdP is over HTTPS, are the route's and the IdP's certificates.
	roots *x509.CertPool
}

// newSAMLEnv starts the IdP, the route (the upstream echoes what it got) and a browser; cfg
// fills the module's settings before the stage is built.
func newSAMLEnv(t *testing.T, cfg func(*SAMLConfig)) *samlEnv {
	t.Helper()
	return newSAMLEnvIdP(t, nil, cfg)
}

// newSAMLEnvIdP is newSAMLEnv with setup run on the IdP before its metadata is read.
func newSAMLEnvIdP(t *testing.T, setup func(*samltest.IdP), cfg func(*SAMLConfig)) *samlEnv {
	t.Helper()
	return newSAMLEnvOver(t, false, setup, cfg)
}

// newSAMLEnvOver is newSAMLEnvIdP with the IdP over HTTPS when overTLS (samltest.NewTLSIdP),
// which the browsers then trust too.
func newSAMLEnvOver(t *testing.T, overTLS bool, setup func(*samltest.IdP), cfg func(*SAMLConfig)) *samlEnv {
	t.Helper()
	e := &samlEnv{t: t}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.handler.ServeHTTP(w, r) }))
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	e.base = e.srv.URL
	e.sp = e.base + "/ngrok/saml/rt_1"
	fetchSP := func(id string) ([]byte, error) {
		resp, err := e.srv.Client().Get(id)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	if overTLS {
		e.idp = samltest.NewTLSIdP(t, fetchSP)
		e.roots = x509.NewCertPool()
		e.roots.AddCert(e.srv.Certificate())
		e.roots.AddCert(e.idp.Server.Certificate())
	} else {
		e.idp = samltest.NewIdP(t, fetchSP)
	}
	e.browser = e.newBrowser()
	if setup != nil {
		setup(e.idp)
	}
	key, cert := samltest.NewKeyPair(t, "edgeplane SAML SP rt_1")
	sessionKey := make([]byte, 32)
	_, _ = rand.Read(sessionKey)
	c := SAMLConfig{
		IdPMetadata: e.idp.Metadata(), EntityID: e.sp + "/metadata", MetadataURL: e.sp + "/metadata",
		ACSURL: e.sp + "/acs", SLOURL: e.sp + "/slo", Key: key, Certificate: cert,
		NameIDFormat: "urn:oasis:names:tc:SAML:2.0:nameid-format:persistent",
		Session:      SessionConfig{Key: sessionKey, CookiePrefix: "ngrok."},
		RouteID:      "rt_1", UseOnce: memoryOnce(),
	}
	if cfg != nil {
		cfg(&c)
	}
	st, err := NewSAML(c)
	if err != nil {
		t.Fatal(err)
	}
	e.handler = st.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.upstream.Lock()
		e.upstream.last, e.upstream.hits = r.Header.Clone(), e.upstream.hits+1
		e.upstream.Unlock()
		io.WriteString(w, "upstream "+r.URL.RequestURI())
	}))
	return e
}

func (e *samlEnv) newBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client() // a browser of its own: the server's client is one shared value
	c.Jar = jar
	if e.roots != nil { // the IdP is over HTTPS too
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.roots}}
	}
	return &c
}

// visit browses to path on the route's host with an optional header, as a browser would.
func (e *samlEnv) visit(c *http.Client, method, path string, h http.Header, tamper func(samltest.Form) samltest.Form) samltest.Page {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	p, err := samltest.Browse(c, req, tamper)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *samlEnv) lastUpstream() (http.Header, int) {
	e.upstream.Lock()
	defer e.upstream.Unlock()
	return e.upstream.last, e.upstream.hits
}

func wantPage(t *testing.T, p samltest.Page, status int, code string) {
	t.Helper()
	if p.Status != status || p.Header.Get("ngrok-error-code") != code {
		t.Fatalf("status %d code %q, want %d %q: %s", p.Status, p.Header.Get("ngrok-error-code"), status, code, p.Body)
	}
}

// TestSAMLSignIn: an allowed user signs in (SP-initiated, POST binding, a signed request) and
// lands on the URL asked for with the identity headers, spoofed ones stripped; the metadata is
// served; logout ends the session.
func TestSAMLSignIn(t *testing.T) {
	e := newSAMLEnv(t, func(c *SAMLConfig) {
		c.AuthorizedGroups = []string{"ops", "eng"}
		c.ForceAuthn = true
		c.NameIDFormat = "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress"
	})
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com", Name: "Alice", Groups: []string{"sales", "eng"}})

	p := e.visit(e.browser, "GET", "/app/page?x=1", nil, nil)
	if p.Status != 200 || string(p.Body) != "upstream /app/page?x=1" {
		t.Fatalf("after sign-in: %d %s", p.Status, p.Body)
	}
	h, _ := e.lastUpstream()
	if h.Get("Ngrok-Auth-User-Id") != "alice@example.com" || h.Get("Ngrok-Auth-User-Email") != "alice@example.com" || h.Get("Ngrok-Auth-User-Name") != "Alice" {
		t.Fatalf("identity headers: %v", h)
	}
	reqs := e.idp.Requests()
	if len(reqs) != 1 || reqs[0].Verified != nil || !reqs[0].ForceAuthn || reqs[0].NameIDFormat != "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress" {
		t.Fatalf("authentication requests: %+v", reqs)
	}

	// Signed in: a spoofed identity header is replaced, and no new sign-in happens.
	p = e.visit(e.browser, "GET", "/other", http.Header{"Ngrok-Auth-User-Email": {"mallory@example.com"}, "Ngrok-Auth-User-Id": {"root"}}, nil)
	h, _ = e.lastUpstream()
	if p.Status != 200 || h.Get("Ngrok-Auth-User-Email") != "alice@example.com" || h.Get("Ngrok-Auth-User-Id") != "alice@example.com" {
		t.Fatalf("signed in: %d %v", p.Status, h)
	}
	if n := len(e.idp.Requests()); n != 1 {
		t.Fatalf("%d sign-ins for a signed-in browser", n)
	}

	// The metadata: the entity id, the ACS (POST only), the SLO and the signing certificate.
	resp, err := e.srv.Client().Get(e.sp + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	md, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`entityID="` + e.sp + `/metadata"`, `Location="` + e.sp + `/acs"`, `Location="` + e.sp + `/slo"`,
		`use="signing"`, `AuthnRequestsSigned="true"`} {
		if !strings.Contains(string(md), want) {
			t.Fatalf("metadata lacks %s: %s", want, md)
		}
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/samlmetadata+xml" || !strings.Contains(string(md), "HTTP-Artifact") {
		t.Fatalf("metadata: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), md)
	}

	// Logout (the SLO URL) ends the session: the next request goes to the IdP again.
	p = e.visit(e.browser, "GET", "/ngrok/saml/rt_1/slo", nil, nil)
	if p.Status != 200 || !strings.Contains(string(p.Body), "Signed out") {
		t.Fatalf("logout: %d %s", p.Status, p.Body)
	}
	_, hits := e.lastUpstream()
	e.idp.SetUser(nil)
	p = e.visit(e.browser, "GET", "/app", nil, nil)
	if _, after := e.lastUpstream(); p.Status != http.StatusForbidden || after != hits {
		t.Fatalf("after logout the IdP was not asked again: %d %s", p.Status, p.Body)
	}
}

// TestSAMLNotInGroup: a user in none of authorized_groups is refused with 403 ERR_NGROK_5312,
// and a memberOf attribute counts as groups.
func TestSAMLNotInGroup(t *testing.T) {
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.AuthorizedGroups = []string{"admins"} })
	e.idp.SetUser(&samltest.User{NameID: "bob", Groups: []string{"sales"}, MemberOf: []string{"guests"}})
	wantPage(t, e.visit(e.browser, "GET", "/", nil, nil), http.StatusForbidden, "ERR_NGROK_5312")
	if _, hits := e.lastUpstream(); hits != 0 {
		t.Fatal("a refused user reached the upstream")
	}
	e.idp.SetUser(&samltest.User{NameID: "carol", MemberOf: []string{"admins"}})
	if p := e.visit(e.newBrowser(), "GET", "/", nil, nil); p.Status != 200 {
		t.Fatalf("member through memberOf: %d %s", p.Status, p.Body)
	}
}

// TestSAMLTamperedResponse: a changed response, one signed by another key, a replayed one and
// one for another sign-in are all refused.
func TestSAMLTamperedResponse(t *testing.T) {
	e := newSAMLEnv(t, nil)
	e.idp.SetUser(&samltest.User{NameID: "alice"})

	flip := func(f samltest.Form) samltest.Form {
		raw, _ := base64.StdEncoding.DecodeString(f.Values.Get("SAMLResponse"))
		s := strings.Replace(string(raw), "<xenc:CipherValue>", "<xenc:CipherValue>AAAA", 1)
		if s == string(raw) {
			t.Fatalf("no encrypted assertion to tamper with: %s", raw)
		}
		f.Values.Set("SAMLResponse", base64.StdEncoding.EncodeToString([]byte(s)))
		return f
	}
	wantPage(t, e.visit(e.browser, "GET", "/", nil, flip), http.StatusForbidden, "ERR_NGROK_5211")

	// A rogue IdP with the same entity id but its own key.
	rogue := samltest.NewIdP(t, e.idp.FetchSP)
	rogue.IDP.MetadataURL, rogue.IDP.SSOURL = e.idp.IDP.MetadataURL, e.idp.IDP.SSOURL
	rogue.SetUser(&samltest.User{NameID: "mallory"})
	swap := func(f samltest.Form) samltest.Form {
		// Re-ask the rogue for the same request: post the captured request to it instead.
		reqs := e.idp.Requests()
		last := reqs[len(reqs)-1]
		resp, err := http.PostForm(rogue.Server.URL+"/sso", url.Values{"SAMLRequest": {base64.StdEncoding.EncodeToString(last.XML)}, "RelayState": {f.Values.Get("RelayState")}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rf, ok := samltest.ParseForm(body)
		if !ok {
			t.Fatalf("rogue IdP: %d %s", resp.StatusCode, body)
		}
		return rf
	}
	wantPage(t, e.visit(e.newBrowser(), "GET", "/", nil, swap), http.StatusForbidden, "ERR_NGROK_5211")

	// A good response posted twice: the second finds its sign-in used.
	var kept samltest.Form
	keep := func(f samltest.Form) samltest.Form { kept = f; return f }
	b := e.newBrowser()
	if p := e.visit(b, "GET", "/", nil, keep); p.Status != 200 {
		t.Fatalf("sign-in: %d %s", p.Status, p.Body)
	}
	resp, err := b.PostForm(kept.Action, kept.Values)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_5300" {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Header.Get("ngrok-error-code"))
	}
	// The same response in a browser whose sign-in is another one.
	other := e.newBrowser()
	e.visit(other, "GET", "/", nil, func(f samltest.Form) samltest.Form {
		f.Values.Set("SAMLResponse", kept.Values.Get("SAMLResponse"))
		return f
	})
	if _, hits := e.lastUpstream(); hits != 1 {
		t.Fatalf("a response to another sign-in was admitted (%d upstream hits)", hits)
	}
}

// TestSAMLIdPInitiated: refused (400 ERR_NGROK_5300) unless allow_idp_initiated; when allowed,
// the RelayState is where the browser goes, on this host only.
func TestSAMLIdPInitiated(t *testing.T) {
	e := newSAMLEnv(t, nil)
	e.idp.SetUser(&samltest.User{NameID: "alice"})
	start := func(e *samlEnv, c *http.Client, relay string) samltest.Page {
		req, _ := http.NewRequest("GET", e.idp.StartURL(e.sp+"/metadata", relay), nil)
		p, err := samltest.Browse(c, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	wantPage(t, start(e, e.browser, "/wiki"), http.StatusBadRequest, "ERR_NGROK_5300")

	a := newSAMLEnv(t, func(c *SAMLConfig) { c.AllowIdPInitiated = true })
	a.idp.SetUser(&samltest.User{NameID: "alice"})
	if p := start(a, a.browser, "/wiki?page=1"); p.Status != 200 || string(p.Body) != "upstream /wiki?page=1" {
		t.Fatalf("IdP-initiated: %d %s", p.Status, p.Body)
	}
	if p := start(a, a.newBrowser(), "https://evil.example/steal"); p.Status != 200 || string(p.Body) != "upstream /" {
		t.Fatalf("IdP-initiated to another host: %d %s", p.Status, p.Body)
	}
	// An SP-initiated sign-in still needs its own request's answer.
	if p := a.visit(a.newBrowser(), "GET", "/sp", nil, nil); p.Status != 200 || string(p.Body) != "upstream /sp" {
		t.Fatalf("SP-initiated with IdP-initiated allowed: %d %s", p.Status, p.Body)
	}
}

// TestSAMLACSRefusals: what the ACS refuses before any XML is looked at.
func TestSAMLACSRefusals(t *testing.T) {
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.AllowIdPInitiated = true })
	post := func(body string) *http.Response {
		resp, err := e.srv.Client().Post(e.sp+"/acs", "application/x-www-form-urlencoded", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"no SAMLResponse", "RelayState=x", http.StatusBadRequest},
		{"not base64", "SAMLResponse=%25%25%25", http.StatusBadRequest},
		{"not XML", "SAMLResponse=" + base64.StdEncoding.EncodeToString([]byte("<<<")), http.StatusForbidden},
		{"too large", "SAMLResponse=" + strings.Repeat("A", maxACSBody), http.StatusRequestEntityTooLarge},
	} {
		if resp := post(c.body); resp.StatusCode != c.status || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, resp.Header.Get("ngrok-error-code"), c.status)
		}
	}
	resp, err := e.srv.Client().Get(e.sp + "/acs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET of the ACS: %d", resp.StatusCode)
	}
	resp, err = e.srv.Client().Post(e.sp+"/metadata", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST of the metadata: %d", resp.StatusCode)
	}
}

// TestSAMLOptionsPassthrough: a CORS preflight reaches the upstream without a session only
// with options_passthrough.
func TestSAMLOptionsPassthrough(t *testing.T) {
	for _, pass := range []bool{false, true} {
		e := newSAMLEnv(t, func(c *SAMLConfig) { c.Session.OptionsPassthrough = pass })
		req, _ := http.NewRequest("OPTIONS", e.base+"/api", nil)
		req.Header.Set("Ngrok-Auth-User-Email", "spoof@example.com")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h, hits := e.lastUpstream()
		if got := hits == 1; got != pass {
			t.Fatalf("options_passthrough %v: upstream reached %v", pass, got)
		}
		if pass && h.Get("Ngrok-Auth-User-Email") != "" {
			t.Fatal("a spoofed identity header passed through")
		}
	}
}

// TestNewSAMLRefuses: configurations no sign-in could succeed with fail the route closed.
func TestNewSAMLRefuses(t *testing.T) {
	idp := samltest.NewIdP(t, nil)
	key, cert := samltest.NewKeyPair(t, "sp")
	good := SAMLConfig{IdPMetadata: idp.Metadata(), EntityID: "https://h/m", MetadataURL: "https://h/m", ACSURL: "https://h/a",
		SLOURL: "https://h/s", Key: key, Certificate: cert, Session: SessionConfig{Key: make([]byte, 32)}, RouteID: "rt_1"}
	if _, err := NewSAML(good); err != nil {
		t.Fatal(err)
	}
	noCert := strings.NewReplacer(`use="signing"`, `use="encryption"`).Replace(idp.Metadata())
	for name, c := range map[string]SAMLConfig{
		"no key":           func(c SAMLConfig) SAMLConfig { c.Key = nil; return c }(good),
		"metadata not XML": func(c SAMLConfig) SAMLConfig { c.IdPMetadata = "<"; return c }(good),
		"no signing cert":  func(c SAMLConfig) SAMLConfig { c.IdPMetadata = noCert; return c }(good),
		"no IDPSSODescriptor": func(c SAMLConfig) SAMLConfig {
			c.IdPMetadata = `<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="x"/>`
			return c
		}(good),
		"ACS not https":  func(c SAMLConfig) SAMLConfig { c.ACSURL = "http://h/a"; return c }(good),
		"no session key": func(c SAMLConfig) SAMLConfig { c.Session.Key = nil; return c }(good),
		"no route id":    func(c SAMLConfig) SAMLConfig { c.RouteID = ""; return c }(good),
	} {
		if _, err := NewSAML(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSAMLHostileACS: crafted answers an attacker can post (IdP-initiated allowed, so each is
// parsed) are refused with 403 ERR_NGROK_5211, never a 500, a panic or a hang; other paths of
// the service provider are 404.
func TestSAMLHostileACS(t *testing.T) {
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.AllowIdPInitiated = true })
	const p = `xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion"`
	issuer := `<saml:Issuer>` + e.idp.IDP.MetadataURL.String() + `</saml:Issuer>`
	status := `<samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/></samlp:Status>`
	for name, doc := range map[string]string{
		"random bytes":     "\x00\xff\xfe garbage",
		"entity expansion": `<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]><samlp:Response ` + p + `>&b;</samlp:Response>`,
		"unsigned assertion": `<samlp:Response ` + p + ` ID="r" Version="2.0" IssueInstant="2030-01-01T00:00:00Z" Destination="` + e.sp + `/acs">` + issuer + status +
			`<saml:Assertion ID="a" Version="2.0" IssueInstant="2030-01-01T00:00:00Z">` + issuer + `<saml:Subject><saml:NameID>root</saml:NameID></saml:Subject></saml:Assertion></samlp:Response>`,
		"garbage encrypted assertion": `<samlp:Response ` + p + ` ID="r" Version="2.0" IssueInstant="2030-01-01T00:00:00Z">` + issuer + status +
			`<saml:EncryptedAssertion><xenc:EncryptedData xmlns:xenc="http://www.w3.org/2001/04/xmlenc#"><xenc:CipherData><xenc:CipherValue>AAAA</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData></saml:EncryptedAssertion></samlp:Response>`,
		"empty encrypted assertion": `<samlp:Response ` + p + `>` + issuer + status + `<saml:EncryptedAssertion/></samlp:Response>`,
		"deep nesting":              strings.Repeat("<a>", 20000) + strings.Repeat("</a>", 20000),
		"no status":                 `<samlp:Response ` + p + ` ID="r" Version="2.0">` + issuer + `</samlp:Response>`,
	} {
		resp, err := e.srv.Client().PostForm(e.sp+"/acs", url.Values{"SAMLResponse": {base64.StdEncoding.EncodeToString([]byte(doc))}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, resp.Header.Get("ngrok-error-code"))
		}
	}
	if _, hits := e.lastUpstream(); hits != 0 {
		t.Fatal("a crafted answer reached the upstream")
	}
	resp, err := e.srv.Client().Get(e.sp + "/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another path of the service provider: %d", resp.StatusCode)
	}
}

// TestSAMLSignInExpires: an answer arriving after the sign-in's ten minutes finds no sign-in:
// 400 ERR_NGROK_5300.
func TestSAMLSignInExpires(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	e := newSAMLEnv(t, func(c *SAMLConfig) {
		c.Session.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	e.idp.SetUser(&samltest.User{NameID: "alice"})
	late := func(f samltest.Form) samltest.Form {
		mu.Lock()
		now = now.Add(11 * time.Minute)
		mu.Unlock()
		return f
	}
	wantPage(t, e.visit(e.browser, "GET", "/", nil, late), http.StatusBadRequest, "ERR_NGROK_5300")
}
