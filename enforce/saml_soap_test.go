package enforce

// Back-channel single logout (SOAP binding) with the test IdP: crewjam/saml's IdP logs a session
// out server to server and the route ends it on a real store; the route's signed answers; every
// refusal, each ending no session.

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"

	"github.com/edgeplane/edgeplane/internal/samltest"
)

// TestSAMLSOAPLogout: the IdP ends a session over the SOAP binding (no browser, no cookie); the
// route ends that session (its index) on the store and answers Success, which the IdP checks;
// a copy of the session's cookie opens nothing; the other session stays. The metadata lists
// the SOAP SingleLogoutService.
func TestSAMLSOAPLogout(t *testing.T) {
	st := storeOnce(t)
	e := newSAMLEnv(t, func(c *SAMLConfig) {
		c.Revocations, c.UseOnce = NewRevocations(st), st.UseOnce
		c.Session.MaximumDuration = time.Hour
	})
	e.idp.OnlySPLogoutBinding(saml.SOAPBinding)
	e.idp.IDP.HTTPClient = e.srv.Client()
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
	md := e.spMetadata()
	if !strings.Contains(string(md), `Binding="urn:oasis:names:tc:SAML:2.0:bindings:SOAP" Location="`+e.sp+`/slo"`) {
		t.Fatalf("the metadata lists no SOAP SingleLogoutService: %s", md)
	}
	one, s1 := e.signIn()
	two, _ := e.signIn()
	copied := e.sessionCookie(one)
	status, page := e.idp.BackChannelLogout(s1.ID)
	if status != 200 || !strings.Contains(page, "You have been logged out.") || strings.Contains(page, "could not be confirmed") {
		t.Fatalf("back-channel logout at the IdP: %d %s", status, page)
	}
	if e.admitted(e.withCookie(copied)) || e.admitted(one) {
		t.Fatal("the session the IdP ended over SOAP still reaches the upstream")
	}
	if !e.admitted(two) {
		t.Fatal("the other session ended too")
	}
}

// spMetadata is the route's SP metadata XML.
func (e *samlEnv) spMetadata() []byte {
	e.t.Helper()
	b, err := e.idp.FetchSP(e.sp + "/metadata")
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// soapLogoutRequest is a SOAP envelope holding a LogoutRequest for nameID (and index when not
// ""), to the route's SLO URL, issued as issuer and signed by key (crewjam/saml's service
// provider side makes and signs it, with edit applied before signing).
func (e *samlEnv) soapLogoutRequest(key crypto.Signer, cert *x509.Certificate, issuer, nameID, index string, edit func(*saml.LogoutRequest)) (body []byte, id string) {
	e.t.Helper()
	sp := &saml.ServiceProvider{EntityID: issuer, Key: key, Certificate: cert, SignatureMethod: dsig.RSASHA256SignatureMethod,
		IDPMetadata: &saml.EntityDescriptor{EntityID: e.sp + "/metadata", IDPSSODescriptors: []saml.IDPSSODescriptor{{SSODescriptor: saml.SSODescriptor{
			SingleLogoutServices: []saml.Endpoint{{Binding: saml.SOAPBinding, Location: e.sp + "/slo"}}}}}}}
	opts := []saml.LogoutRequestOption{}
	if index != "" {
		opts = append(opts, saml.WithSessionIndex(index))
	}
	if edit != nil {
		opts = append(opts, saml.LogoutRequestOption(edit))
	}
	req, err := sp.MakeSOAPLogoutRequest(saml.NameID{Value: nameID}, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return samltest.SOAPEnvelope(req.Element()), req.ID
}

// postSOAP posts body to the route's SLO URL as the SOAP binding does, returning the HTTP status,
// the ngrok-error-code header and the raw answer.
func (e *samlEnv) postSOAP(t *testing.T, body []byte) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.sp+"/slo", bytes.NewReader(body))
	req.Header.Set("Content-Type", "text/xml; charset=utf-8")
	req.Header.Set("SOAPAction", "http://www.oasis-open.org/committees/security")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("ngrok-error-code"), b
}

// wantSOAPAnswer posts body and checks the answer: HTTP 200, code, a LogoutResponse signed by the
// route's key with status (and second) answering inResponseTo.
func (e *samlEnv) wantSOAPAnswer(t *testing.T, body []byte, code, status, second, inResponseTo string) {
	t.Helper()
	st, gotCode, b := e.postSOAP(t, body)
	if st != 200 || gotCode != code {
		t.Fatalf("HTTP %d code %q, want 200 %q: %s", st, gotCode, code, b)
	}
	a, err := samltest.ReadSOAPLogoutResponse(b, e.spMetadata())
	if err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if a.Verified != nil || a.Status != status || a.Second != second || a.InResponseTo != inResponseTo {
		t.Fatalf("answer %+v, want %s/%s to %q signed by the route", a, status, second, inResponseTo)
	}
}

// Refusals of a back-channel LogoutRequest, each a signed LogoutResponse with a SAML error status
// (HTTP 200, as the SOAP binding has it) ending no session: signed by another key, by the IdP's
// key under another issuer, unsigned, to another destination, stale, replayed, not XML; a
// body over 64 KiB is 413. The IdP's own request then ends the session; with the store gone, a
// request is answered Responder (503's code) and ends nothing.
func TestSAMLSOAPLogoutRefused(t *testing.T) {
	st := storeOnce(t)
	e := newSAMLEnv(t, func(c *SAMLConfig) {
		c.Revocations, c.UseOnce = NewRevocations(st), st.UseOnce
		c.Session.MaximumDuration = time.Hour
	})
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com"})
	b, s := e.signIn()
	idpKey, idpCert, issuer := e.idp.IDP.Key.(crypto.Signer), e.idp.IDP.Certificate, e.idp.IDP.Metadata().EntityID
	otherKey, otherCert := samltest.NewKeyPair(t, "not the IdP")
	const denied, requester = saml.StatusRequestDenied, saml.StatusRequester
	refused := map[string][]byte{}
	refused["bad signature"], _ = e.soapLogoutRequest(otherKey, otherCert, issuer, "alice@example.com", s.Index, nil)
	refused["wrong issuer"], _ = e.soapLogoutRequest(idpKey, idpCert, "https://other-idp.example.com/metadata", "alice@example.com", s.Index, nil)
	refused["wrong destination"], _ = e.soapLogoutRequest(idpKey, idpCert, issuer, "alice@example.com", s.Index, func(r *saml.LogoutRequest) {
		r.Destination = "https://elsewhere.example.com/slo"
	})
	refused["stale"], _ = e.soapLogoutRequest(idpKey, idpCert, issuer, "alice@example.com", s.Index, func(r *saml.LogoutRequest) {
		r.IssueInstant = r.IssueInstant.Add(-time.Hour)
	})
	good, goodID := e.soapLogoutRequest(idpKey, idpCert, issuer, "alice@example.com", s.Index, nil)
	refused["tampered"] = bytes.Replace(good, []byte("alice@example.com"), []byte("mallory@example"), 1)
	refused["unsigned"] = []byte(strings.Replace(string(good), string(good[bytes.Index(good, []byte("<ds:Signature")):bytes.Index(good, []byte("</ds:Signature>"))+len("</ds:Signature>")]), "", 1))
	refused["not XML"] = []byte("<soapenv:Envelope")
	for name, body := range refused {
		t.Run(name, func(t *testing.T) { e.wantSOAPAnswer(t, body, "ERR_NGROK_5211", requester, denied, "") })
	}
	if st, code, _ := e.postSOAP(t, append(good, bytes.Repeat([]byte(" "), 64<<10)...)); st != http.StatusRequestEntityTooLarge || code != "ERR_NGROK_5211" {
		t.Fatalf("oversized body: %d %q", st, code)
	}
	if !e.admitted(b) {
		t.Fatal("a refused LogoutRequest ended the session")
	}
	e.wantSOAPAnswer(t, good, "", saml.StatusSuccess, "", goodID)
	if e.admitted(b) {
		t.Fatal("the IdP's SOAP LogoutRequest did not end the session")
	}
	e.wantSOAPAnswer(t, good, "ERR_NGROK_5211", requester, denied, goodID) // replayed

	st.Close()
	again, againID := e.soapLogoutRequest(idpKey, idpCert, issuer, "bob", "", nil)
	e.wantSOAPAnswer(t, again, "ERR_NGROK_3210", saml.StatusResponder, "", againID)
}

// Without a record of ended sessions, a back-channel LogoutRequest is answered Responder: no
// session could be ended.
func TestSAMLSOAPLogoutNoRevocations(t *testing.T) {
	e := newSAMLEnv(t, nil)
	body, id := e.soapLogoutRequest(e.idp.IDP.Key.(crypto.Signer), e.idp.IDP.Certificate, e.idp.IDP.Metadata().EntityID, "alice@example.com", "", nil)
	e.wantSOAPAnswer(t, body, "ERR_NGROK_3210", saml.StatusResponder, "", id)
}
