package enforce

// Single logout with the test IdP (internal/samltest, crewjam/saml's IdP side): logout at
// edgeplane (a signed LogoutRequest to the IdP and its LogoutResponse checked), logout at the IdP
// (its signed LogoutRequest ends the sessions it names on a real store, and is answered), in
// both bindings, and every refusal.

import (
	"crypto"
	"crypto/x509"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"

	"github.com/edgeplane/edgeplane/internal/samltest"
)

// signIn signs a new browser in at the route and returns it with its IdP session.
func (e *samlEnv) signIn() (*http.Client, samltest.Session) {
	e.t.Helper()
	before := map[string]bool{}
	for _, s := range e.idp.Sessions() {
		before[s.ID] = true
	}
	b := e.newBrowser()
	if p := e.visit(b, "GET", "/app", nil, nil); p.Status != 200 {
		e.t.Fatalf("sign-in: %d %s", p.Status, p.Body)
	}
	for _, s := range e.idp.Sessions() {
		if !before[s.ID] {
			return b, s
		}
	}
	e.t.Fatal("the sign-in made no IdP session")
	return nil, samltest.Session{}
}

// admitted reports whether the browser reaches the upstream without signing in again (the IdP
// refuses everyone meanwhile).
func (e *samlEnv) admitted(b *http.Client) bool {
	e.t.Helper()
	e.idp.SetUser(nil)
	defer e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
	_, before := e.lastUpstream()
	p := e.visit(b, "GET", "/app", nil, nil)
	_, after := e.lastUpstream()
	return p.Status == 200 && after == before+1
}

// sessionCookie is a browser's session cookie, for a copy of it in another client.
func (e *samlEnv) sessionCookie(b *http.Client) *http.Cookie {
	u, _ := url.Parse(e.base)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == "ngrok.session" {
			return c
		}
	}
	e.t.Fatal("no session cookie")
	return nil
}

// withCookie is a new browser holding only c.
func (e *samlEnv) withCookie(c *http.Cookie) *http.Client {
	b := e.newBrowser()
	u, _ := url.Parse(e.base)
	b.Jar.SetCookies(u, []*http.Cookie{c})
	return b
}

// The user logs out at edgeplane: the browser takes a signed LogoutRequest naming its session
// to the IdP (POST or Redirect, whichever the IdP's metadata offers), which ends that session
// only (its SessionIndex) and answers; the answer is checked and the signed-out page shown. A
// copy of the logged-out cookie opens nothing.
func TestSAMLLogoutAtEdgeplane(t *testing.T) {
	for _, binding := range []string{saml.HTTPPostBinding, saml.HTTPRedirectBinding} {
		t.Run(binding[strings.LastIndex(binding, ":")+1:], func(t *testing.T) {
			st := storeOnce(t)
			e := newSAMLEnvIdP(t, func(i *samltest.IdP) { i.OnlyIdPLogoutBinding(binding) }, func(c *SAMLConfig) {
				c.Revocations, c.UseOnce = NewRevocations(st), st.UseOnce
				c.Session.MaximumDuration = time.Hour
			})
			e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
			one, s1 := e.signIn()
			two, s2 := e.signIn()
			copied := e.sessionCookie(one)
			p := e.visit(one, "GET", "/ngrok/logout", nil, nil)
			if p.Status != 200 || !strings.Contains(string(p.Body), "Signed out") || p.URL.Path != "/ngrok/saml/rt_1/slo" {
				t.Fatalf("logout: %d at %s: %s", p.Status, p.URL, p.Body)
			}
			left := e.idp.Sessions()
			if len(left) != 1 || left[0].ID != s2.ID {
				t.Fatalf("IdP sessions after logging %s out: %+v", s1.ID, left)
			}
			if e.admitted(one) || e.admitted(e.withCookie(copied)) {
				t.Fatal("the logged-out session (or a copy of its cookie) still reaches the upstream")
			}
			if !e.admitted(two) {
				t.Fatal("the other browser's session ended too")
			}
		})
	}
}

// Without single logout at the IdP (its metadata has no SingleLogoutService), logout ends the
// session here only, as before.
func TestSAMLLogoutWithoutIdPService(t *testing.T) {
	e := newSAMLEnvIdP(t, func(i *samltest.IdP) { i.IDP.LogoutURL = url.URL{} }, nil)
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
	b, _ := e.signIn()
	p := e.visit(b, "GET", "/ngrok/logout", nil, nil)
	if p.Status != 200 || !strings.Contains(string(p.Body), "Signed out") || p.URL.Host != strings.TrimPrefix(e.base, "https://") {
		t.Fatalf("logout: %d at %s: %s", p.Status, p.URL, p.Body)
	}
	if len(e.idp.Sessions()) != 1 || e.admitted(b) {
		t.Fatal("logout without the IdP's service: the IdP was asked, or the session lives on")
	}
}

// The IdP logs a session out: its signed LogoutRequest (Redirect or POST, whichever binding
// the IdP uses of the route's metadata) ends, on the store, that session (its index) and no
// other; a copy of the ended session's cookie opens nothing; the IdP gets a LogoutResponse it
// accepts. Without a maximum duration a revocation cannot be kept per index for as long as a
// session may live, so every session of the NameID ends.
func TestSAMLLogoutAtIdP(t *testing.T) {
	for _, binding := range []string{saml.HTTPRedirectBinding, saml.HTTPPostBinding} {
		for _, maxDuration := range []time.Duration{time.Hour, 0} {
			t.Run(binding[strings.LastIndex(binding, ":")+1:]+"/"+maxDuration.String(), func(t *testing.T) {
				st := storeOnce(t)
				e := newSAMLEnv(t, func(c *SAMLConfig) {
					c.Revocations, c.UseOnce = NewRevocations(st), st.UseOnce
					c.Session.MaximumDuration = maxDuration
				})
				e.idp.OnlySPLogoutBinding(binding)
				e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
				one, s1 := e.signIn()
				two, _ := e.signIn()
				copied := e.sessionCookie(one)
				req, _ := http.NewRequest("GET", e.idp.LogoutURL(s1.ID), nil)
				p, err := samltest.Browse(one, req, nil)
				if err != nil {
					t.Fatal(err)
				}
				// The IdP's own page at the end says the logout went through: it took the
				// route's LogoutResponse (a refused one is reported as not logged out).
				if p.Status != 200 || !strings.Contains(string(p.Body), "You have been logged out.") || strings.Contains(string(p.Body), "could not be confirmed") {
					t.Fatalf("IdP-initiated logout ended at %s: %d %s", p.URL, p.Status, p.Body)
				}
				if e.admitted(e.withCookie(copied)) {
					t.Fatal("a copy of the ended session's cookie still reaches the upstream")
				}
				if got := e.admitted(two); got != (maxDuration > 0) {
					t.Fatalf("the other session admitted: %v, want %v", got, maxDuration > 0)
				}
			})
		}
	}
}

// forgedLogoutRequest is an HTTP-Redirect LogoutRequest to the route's SLO URL with the IdP's
// issuer and every field right, signed by key with a query-string signature (crewjam/saml's
// service provider side makes and signs it).
func (e *samlEnv) forgedLogoutRequest(key crypto.Signer, cert *x509.Certificate, nameID string) string {
	e.t.Helper()
	md := e.idp.IDP.Metadata()
	sp := &saml.ServiceProvider{EntityID: md.EntityID, Key: key, Certificate: cert, SignatureMethod: dsig.RSASHA256SignatureMethod,
		IDPMetadata: &saml.EntityDescriptor{EntityID: e.sp + "/metadata"}}
	req, err := sp.MakeLogoutRequest(e.sp+"/slo", nameID)
	if err != nil {
		e.t.Fatal(err)
	}
	u, err := sp.RedirectLogoutRequestURL(req, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return u.String()
}

// Refusals of an IdP's LogoutRequest, each ending no session: signed by another key (403
// ERR_NGROK_5211), tampered with, replayed (the same request taken once), and a store that
// cannot record it (503 ERR_NGROK_3210). The same request signed by the IdP's own key is taken,
// so the refusals are for the signature.
func TestSAMLIdPLogoutRefused(t *testing.T) {
	st := storeOnce(t)
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.Revocations, c.UseOnce = NewRevocations(st), st.UseOnce })
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
	b, _ := e.signIn()
	get := func(u string) samltest.Page {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		c := e.newBrowser()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		p, err := samltest.Browse(c, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	otherKey, otherCert := samltest.NewKeyPair(t, "not the IdP")
	wantPage(t, get(e.forgedLogoutRequest(otherKey, otherCert, "alice@example.com")), http.StatusForbidden, "ERR_NGROK_5211")
	good := e.forgedLogoutRequest(e.idp.IDP.Key.(crypto.Signer), e.idp.IDP.Certificate, "alice@example.com")
	tampered := strings.Replace(good, "Signature=", "Signature=AAAA", 1)
	wantPage(t, get(tampered), http.StatusForbidden, "ERR_NGROK_5211")
	unsigned := good[:strings.Index(good, "&SigAlg=")]
	wantPage(t, get(unsigned), http.StatusForbidden, "ERR_NGROK_5211")
	if !e.admitted(b) {
		t.Fatal("a refused LogoutRequest ended the session")
	}
	if p := get(good); p.Status != http.StatusFound || !strings.HasPrefix(p.Header.Get("Location"), e.idp.Server.URL+"/slo?SAMLResponse=") {
		t.Fatalf("the IdP's own request: %d %v %s", p.Status, p.Header, p.Body)
	}
	if e.admitted(b) {
		t.Fatal("the IdP's LogoutRequest did not end the session")
	}
	wantPage(t, get(good), http.StatusForbidden, "ERR_NGROK_5211") // replayed

	// The store gone: the request is refused 503 and the IdP is not told of a logout.
	st.Close()
	again := e.forgedLogoutRequest(e.idp.IDP.Key.(crypto.Signer), e.idp.IDP.Certificate, "bob")
	wantPage(t, get(again), http.StatusServiceUnavailable, "ERR_NGROK_3210")
}

// Without a record of ended sessions a LogoutRequest is refused 503 (no session could be ended);
// with one that cannot be read, a session is refused 503 rather than admitted unchecked.
func TestSAMLRevocationsFailClosed(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		e := newSAMLEnv(t, nil)
		e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
		e.signIn()
		req, _ := http.NewRequest("GET", e.forgedLogoutRequest(e.idp.IDP.Key.(crypto.Signer), e.idp.IDP.Certificate, "alice@example.com"), nil)
		p, err := samltest.Browse(e.newBrowser(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantPage(t, p, http.StatusServiceUnavailable, "ERR_NGROK_3210")
	})
	t.Run("store down", func(t *testing.T) {
		st := storeOnce(t)
		e := newSAMLEnv(t, func(c *SAMLConfig) { c.Revocations = NewRevocations(st) })
		e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
		st.Close()
		b := e.newBrowser()
		wantPage(t, e.visit(b, "GET", "/app", nil, nil), http.StatusServiceUnavailable, "ERR_NGROK_3210")
		if _, hits := e.lastUpstream(); hits != 0 {
			t.Fatal("a session that could not be checked reached the upstream")
		}
	})
}

// The IdP's LogoutResponse must answer this browser's own logout: without its RelayState's
// logout (none started, or a sign-in's state) it is 400 ERR_NGROK_5300; tampered with, 403
// ERR_NGROK_5211. The SLO URL takes GET and POST only.
func TestSAMLLogoutResponseRefused(t *testing.T) {
	e := newSAMLEnvIdP(t, func(i *samltest.IdP) { i.OnlyIdPLogoutBinding(saml.HTTPPostBinding) }, nil)
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
	b, _ := e.signIn()
	var answer samltest.Form
	req, _ := http.NewRequest("GET", e.base+"/ngrok/logout", nil)
	if _, err := samltest.Browse(b, req, func(f samltest.Form) samltest.Form {
		answer = f
		f.Values = url.Values{"RelayState": {"none"}} // the browser posts nothing useful
		return f
	}); err != nil {
		t.Fatal(err)
	}
	if answer.Values.Get("SAMLResponse") == "" {
		t.Fatal("no LogoutResponse from the IdP")
	}
	post := func(c *http.Client, v url.Values) samltest.Page {
		t.Helper()
		req, _ := http.NewRequest("POST", answer.Action, strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		p, err := samltest.Browse(c, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	wantPage(t, post(e.newBrowser(), answer.Values), http.StatusBadRequest, "ERR_NGROK_5300")
	tampered := url.Values{"SAMLResponse": {answer.Values.Get("SAMLResponse")[:len(answer.Values.Get("SAMLResponse"))-8] + "AAAAAAA="},
		"RelayState": {answer.Values.Get("RelayState")}}
	wantPage(t, post(b, tampered), http.StatusForbidden, "ERR_NGROK_5211")
	req, _ = http.NewRequest("PUT", e.sp+"/slo", nil)
	p, err := samltest.Browse(b, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantPage(t, p, http.StatusMethodNotAllowed, "ERR_NGROK_5211")
}
