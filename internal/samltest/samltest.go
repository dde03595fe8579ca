// Package samltest is a SAML identity provider for tests, the IdP side of crewjam/saml with a
// key and certificate made when it starts, and a browser-like client that submits the
// auto-POST forms SAML's HTTP-POST binding relies on. The enforce tests and the end-to-end
// tests through real agents share it, so both sign in the same way a browser would.
package samltest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"
)

// NewKeyPair makes an RSA 2048 key and a self-signed certificate for it, valid for a day.
func NewKeyPair(t testing.TB, cn string) (*rsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, c
}

// User is who the IdP signs in: the next sign-in asserts it.
type User struct {
	NameID, Email, Name string
	// Groups go in a "groups" attribute; MemberOf in a "memberOf" one.
	Groups, MemberOf []string
}

// IdP is a running identity provider: /metadata, /sso (both bindings), /start (IdP-initiated
// sign-in: ?sp=<service provider entity id>&relay=<RelayState>), and single logout (slo.go):
// /slo (crewjam/saml's ServeSLO) and /logout (IdP-initiated logout of a session).
type IdP struct {
	Server *httptest.Server
	IDP    *saml.IdentityProvider
	// FetchSP reads a service provider's metadata from its entity id (which is its metadata
	// URL), the way an IdP configured with a metadata URL does.
	FetchSP func(entityID string) ([]byte, error)

	mu       sync.Mutex
	user     *User
	requests []SignedRequest
	// The IdP's sessions, by id, and the service providers each was used for (slo.go).
	sessions     map[string]*saml.Session
	participants map[string][]saml.SessionParticipant
	spLogout     string // the only SLO binding of the service providers' metadata seen, "" for all
	// refuseLogouts makes service providers' LogoutRequests fail (RefuseLogouts).
	refuseLogouts bool
	// Artifacts (artifact.go): the binding answers go with ("" for HTTP-POST), the answers
	// waiting to be resolved, the ArtifactResolves received, and the tests' hooks.
	artifactBinding string
	artifacts       map[[20]byte]issuedArtifact
	resolves        []Resolve
	artifactTamper  func(*etree.Element)
	artifactKey     *rsa.PrivateKey
	artifactCert    *x509.Certificate
}

// SignedRequest is an authentication request the IdP received and whether its XML signature
// verified with the signing certificate of the service provider's metadata.
type SignedRequest struct {
	XML      []byte
	Verified error // nil: signed by the SP's certificate
	// ForceAuthn is the request's ForceAuthn attribute; NameIDFormat its NameIDPolicy format.
	ForceAuthn   bool
	NameIDFormat string
}

// NewIdP starts an identity provider with a fresh key, over plain HTTP; t's cleanup stops it.
func NewIdP(t testing.TB, fetchSP func(entityID string) ([]byte, error)) *IdP {
	t.Helper()
	return newIdP(t, fetchSP, false)
}

// NewTLSIdP is NewIdP over HTTPS, with httptest's certificate (CertPEM): its artifact
// resolution service is then one a service provider may call (the SOAP binding is https only).
func NewTLSIdP(t testing.TB, fetchSP func(entityID string) ([]byte, error)) *IdP {
	t.Helper()
	return newIdP(t, fetchSP, true)
}

func newIdP(t testing.TB, fetchSP func(entityID string) ([]byte, error), overTLS bool) *IdP {
	t.Helper()
	key, cert := NewKeyPair(t, "samltest IdP")
	i := &IdP{FetchSP: fetchSP, sessions: map[string]*saml.Session{}, participants: map[string][]saml.SessionParticipant{},
		artifacts: map[[20]byte]issuedArtifact{}}
	mux := http.NewServeMux()
	i.Server = httptest.NewUnstartedServer(mux)
	if overTLS {
		i.Server.StartTLS()
	} else {
		i.Server.Start()
	}
	t.Cleanup(i.Server.Close)
	base, _ := url.Parse(i.Server.URL)
	i.IDP = &saml.IdentityProvider{
		Key: key, Certificate: cert, Logger: log.New(io.Discard, "", 0),
		MetadataURL: *base.JoinPath("/metadata"), SSOURL: *base.JoinPath("/sso"), LogoutURL: *base.JoinPath("/slo"),
		LogoutBindings:          []string{saml.HTTPRedirectBinding, saml.HTTPPostBinding, saml.SOAPBinding},
		ServiceProviderProvider: spProvider{i}, SessionProvider: sessionProvider{i},
		SignatureMethod: dsig.RSASHA256SignatureMethod,
	}
	mux.HandleFunc("/metadata", i.IDP.ServeMetadata)
	mux.HandleFunc("/sso", i.answering(i.IDP.ServeSSO))
	mux.HandleFunc("/slo", i.IDP.ServeSLO)
	mux.HandleFunc("/logout", i.serveLogout)
	mux.HandleFunc("/start", i.answering(func(w http.ResponseWriter, r *http.Request) {
		i.IDP.ServeIDPInitiated(w, r, r.URL.Query().Get("sp"), r.URL.Query().Get("relay"))
	}))
	mux.HandleFunc("/artifact", i.serveArtifactResolve)
	return i
}

// Metadata is the IdP's EntityDescriptor, for a route's idp_metadata: crewjam/saml's, with
// the artifact resolution service (SOAP binding, index 1) added.
func (i *IdP) Metadata() string {
	md := i.IDP.Metadata()
	for k := range md.IDPSSODescriptors {
		d := &md.IDPSSODescriptors[k]
		d.SSODescriptor.ArtifactResolutionServices = append(d.SSODescriptor.ArtifactResolutionServices,
			saml.IndexedEndpoint{Binding: saml.SOAPBinding, Location: i.ArtifactURL(), Index: 1})
	}
	b, err := xml.MarshalIndent(md, "", "  ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// SetUser makes u the user of the next sign-ins (nil: the IdP refuses everyone).
func (i *IdP) SetUser(u *User) {
	i.mu.Lock()
	i.user = u
	i.mu.Unlock()
}

// Requests returns the authentication requests received so far.
func (i *IdP) Requests() []SignedRequest {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]SignedRequest(nil), i.requests...)
}

// StartURL is the link of an IdP-initiated sign-in to the service provider entityID.
func (i *IdP) StartURL(entityID, relay string) string {
	return i.Server.URL + "/start?" + url.Values{"sp": {entityID}, "relay": {relay}}.Encode()
}

type spProvider struct{ i *IdP }

func (p spProvider) GetServiceProvider(_ *http.Request, id string) (*saml.EntityDescriptor, error) {
	b, err := p.i.FetchSP(id)
	if err != nil {
		return nil, err
	}
	var ed saml.EntityDescriptor
	if err := xml.Unmarshal(b, &ed); err != nil {
		return nil, err
	}
	p.i.mu.Lock()
	only := p.i.spLogout
	p.i.mu.Unlock()
	if only != "" { // the IdP configured with one of the service provider's SLO bindings
		for k := range ed.SPSSODescriptors {
			d := &ed.SPSSODescriptors[k]
			var kept []saml.Endpoint
			for _, e := range d.SingleLogoutServices {
				if e.Binding == only {
					kept = append(kept, e)
				}
			}
			d.SingleLogoutServices = kept
		}
	}
	return &ed, nil
}

type sessionProvider struct{ i *IdP }

func (p sessionProvider) GetSession(w http.ResponseWriter, _ *http.Request, req *saml.IdpAuthnRequest) *saml.Session {
	i := p.i
	if len(req.RequestBuffer) > 0 { // SP-initiated: check the request's signature
		sr := SignedRequest{XML: req.RequestBuffer, Verified: verifyRequest(req)}
		if req.Request.ForceAuthn != nil {
			sr.ForceAuthn = *req.Request.ForceAuthn
		}
		if req.Request.NameIDPolicy != nil && req.Request.NameIDPolicy.Format != nil {
			sr.NameIDFormat = *req.Request.NameIDPolicy.Format
		}
		i.mu.Lock()
		i.requests = append(i.requests, sr)
		i.mu.Unlock()
	}
	i.mu.Lock()
	u := i.user
	i.mu.Unlock()
	if u == nil {
		http.Error(w, "no user signs in here", http.StatusForbidden)
		return nil
	}
	id := fmt.Sprint(time.Now().UnixNano())
	s := &saml.Session{ID: id, CreateTime: time.Now(), ExpireTime: time.Now().Add(time.Hour),
		Index: "index-" + id, NameID: u.NameID, UserEmail: u.Email, UserCommonName: u.Name}
	if len(u.Groups) > 0 {
		s.CustomAttributes = append(s.CustomAttributes, attr("groups", u.Groups))
	}
	if len(u.MemberOf) > 0 {
		s.CustomAttributes = append(s.CustomAttributes, attr("memberOf", u.MemberOf))
	}
	i.mu.Lock()
	i.sessions[s.ID] = s
	i.mu.Unlock()
	return s
}

func attr(name string, values []string) saml.Attribute {
	a := saml.Attribute{Name: name, NameFormat: "urn:oasis:names:tc:SAML:2.0:attrname-format:basic"}
	for _, v := range values {
		a.Values = append(a.Values, saml.AttributeValue{Type: "xs:string", Value: v})
	}
	return a
}

// verifyRequest checks the XML signature of an authentication request against the signing
// certificate of the service provider's metadata.
func verifyRequest(req *saml.IdpAuthnRequest) error {
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(req.RequestBuffer); err != nil {
		return err
	}
	return verifyEnveloped(doc.Root(), req.ServiceProviderMetadata)
}

// verifyEnveloped checks the enveloped XML signature of el (goxmldsig) against the signing
// certificates of the service provider's metadata md.
func verifyEnveloped(el *etree.Element, md *saml.EntityDescriptor) error {
	var certs []*x509.Certificate
	for _, d := range md.SPSSODescriptors {
		for _, k := range d.KeyDescriptors {
			if k.Use != "signing" {
				continue
			}
			for _, xc := range k.KeyInfo.X509Data.X509Certificates {
				der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(xc.Data), ""))
				if err != nil {
					return err
				}
				c, err := x509.ParseCertificate(der)
				if err != nil {
					return err
				}
				certs = append(certs, c)
			}
		}
	}
	if len(certs) == 0 {
		return errors.New("the service provider's metadata has no signing certificate")
	}
	if el.SelectElement("Signature") == nil {
		return errors.New("the message is not signed")
	}
	ctx := dsig.NewDefaultValidationContext(&dsig.MemoryX509CertificateStore{Roots: certs})
	_, err := ctx.Validate(el)
	return err
}

// Form is an auto-submitting HTML form of SAML's HTTP-POST binding.
type Form struct {
	Action string
	Values url.Values
}

var (
	formRe  = regexp.MustCompile(`(?s)<form[^>]*method="post"[^>]*action="([^"]*)"[^>]*>(.*?)</form>`)
	inputRe = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`)
)

// ParseForm finds the auto-POST form of a page carrying SAMLRequest, SAMLResponse or SAMLart.
func ParseForm(body []byte) (Form, bool) {
	m := formRe.FindSubmatch(body)
	if m == nil {
		return Form{}, false
	}
	f := Form{Action: html.UnescapeString(string(m[1])), Values: url.Values{}}
	for _, in := range inputRe.FindAllSubmatch(m[2], -1) {
		f.Values.Set(html.UnescapeString(string(in[1])), html.UnescapeString(string(in[2])))
	}
	if f.Values.Get("SAMLRequest") == "" && f.Values.Get("SAMLResponse") == "" && f.Values.Get("SAMLart") == "" {
		return Form{}, false
	}
	return f, true
}

// Page is the last response of a Browse: its status, headers and body.
type Page struct {
	Status int
	Header http.Header
	Body   []byte
	URL    *url.URL
}

// Browse does what a browser does with req: follows redirects (the client's job) and submits
// every SAML auto-POST form on the way, handing forms carrying a SAMLResponse or a SAMLart to
// tamper first when it is not nil. It stops at the first page without such a form, or after ten forms.
func Browse(c *http.Client, req *http.Request, tamper func(Form) Form) (Page, error) {
	for n := 0; ; n++ {
		resp, err := c.Do(req)
		if err != nil {
			return Page{}, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil {
			return Page{}, err
		}
		f, ok := ParseForm(body)
		if !ok || n == 10 {
			return Page{Status: resp.StatusCode, Header: resp.Header, Body: body, URL: resp.Request.URL}, nil
		}
		if tamper != nil && (f.Values.Get("SAMLResponse") != "" || f.Values.Get("SAMLart") != "") {
			f = tamper(f)
		}
		req, err = http.NewRequest(http.MethodPost, f.Action, strings.NewReader(f.Values.Encode()))
		if err != nil {
			return Page{}, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
}
