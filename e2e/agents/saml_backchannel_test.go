package agents

// SAML's server-to-server bindings through edgeplane serve and real agents, two accounts each
// with a saml route trusting one IdP (internal/samltest): back-channel single logout (the IdP's
// SOAP LogoutRequest ends a session of one account's route and nothing of the other's), and
// the HTTP-Artifact binding (edgeplane resolves the artifact at the IdP over its guarded
// outbound client; an artifact issued for one account's route signs nobody in on the other's).

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"

	"github.com/edgeplane/edgeplane/internal/samltest"
)

// soapLogout posts a SOAP LogoutRequest for nameID (every session of it) to slo, issued as the
// IdP and signed by key, and returns the HTTP status, the ngrok-error-code and the answer's
// SAML status.
func soapLogout(t *testing.T, c *http.Client, idp *samltest.IdP, key crypto.Signer, cert *x509.Certificate, slo, nameID string) (int, string, string) {
	t.Helper()
	poser := &saml.ServiceProvider{EntityID: idp.IDP.Metadata().EntityID, Key: key, Certificate: cert, SignatureMethod: dsig.RSASHA256SignatureMethod,
		IDPMetadata: &saml.EntityDescriptor{EntityID: strings.TrimSuffix(slo, "/slo") + "/metadata", IDPSSODescriptors: []saml.IDPSSODescriptor{{
			SSODescriptor: saml.SSODescriptor{SingleLogoutServices: []saml.Endpoint{{Binding: saml.SOAPBinding, Location: slo}}}}}}}
	req, err := poser.MakeSOAPLogoutRequest(saml.NameID{Value: nameID})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(slo, "text/xml; charset=utf-8", bytes.NewReader(samltest.SOAPEnvelope(req.Element())))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	md, err := c.Get(strings.TrimSuffix(slo, "/slo") + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	mdXML, _ := io.ReadAll(md.Body)
	md.Body.Close()
	a, err := samltest.ReadSOAPLogoutResponse(body, mdXML)
	if err != nil || a.Verified != nil {
		t.Fatalf("the answer is not a LogoutResponse signed by the route (%v): %+v %s", err, a, body)
	}
	return resp.StatusCode, resp.Header.Get("ngrok-error-code"), a.Status
}

func TestSAMLSOAPLogoutAccounts(t *testing.T) {
	a := start(t)
	b := a.asAccount("team-b")
	idp := a.newIdP(t)
	idp.OnlySPLogoutBinding(saml.SOAPBinding)
	idp.IDP.HTTPClient = a.samlBrowser() // reaches the routes' SLO URLs on edgeplane's listener
	idp.SetUser(&samltest.User{NameID: "alice"})
	sloA := a.samlRoute(t, idp, "soap-a.example.com", "team-a")
	b.samlRoute(t, idp, "soap-b.example.com", "team-b")

	browser := a.samlBrowser()
	visit := func(c *http.Client, u string) samltest.Page { t.Helper(); return samlVisit(t, c, u, nil) }
	signedIn := func(c *http.Client, host, name string) bool {
		p := visit(c, "https://"+host+"/")
		return p.Status == 200 && string(p.Body) == name+" saw alice"
	}
	admitted := func(c *http.Client, host, name string) bool {
		t.Helper()
		idp.SetUser(nil)
		defer idp.SetUser(&samltest.User{NameID: "alice"})
		return signedIn(c, host, name)
	}
	eventually(t, 0, "A's route signs in", func() bool { return signedIn(browser, "soap-a.example.com", "team-a") })
	sessA := idp.Sessions()[len(idp.Sessions())-1]
	eventually(t, 0, "B's route signs in", func() bool { return signedIn(browser, "soap-b.example.com", "team-b") })

	// The IdP logs A's session out over SOAP, no browser involved: A's route ends it; B's stays.
	if st, page := idp.BackChannelLogout(sessA.ID); st != 200 || !strings.Contains(page, "You have been logged out.") || strings.Contains(page, "could not be confirmed") {
		t.Fatalf("back-channel logout: %d %s", st, page)
	}
	if admitted(browser, "soap-a.example.com", "team-a") || !admitted(browser, "soap-b.example.com", "team-b") {
		t.Fatal("after the IdP's SOAP logout of A's session: A's lives on, or B's ended")
	}

	// A LogoutRequest for every session of alice on A's route leaves her session on B's; one
	// signed by another key is answered Requester and ends nothing.
	if !signedIn(browser, "soap-a.example.com", "team-a") {
		t.Fatal("signing in again on A's route")
	}
	key, cert := samltest.NewKeyPair(t, "not the IdP")
	if st, code, status := soapLogout(t, a.samlBrowser(), idp, key, cert, sloA, "alice"); st != 200 || code != "ERR_NGROK_5211" || status != saml.StatusRequester {
		t.Fatalf("forged SOAP LogoutRequest: %d %q %s", st, code, status)
	}
	if !admitted(browser, "soap-a.example.com", "team-a") {
		t.Fatal("a forged SOAP LogoutRequest ended the session")
	}
	if st, code, status := soapLogout(t, a.samlBrowser(), idp, idp.IDP.Key.(crypto.Signer), idp.IDP.Certificate, sloA, "alice"); st != 200 || code != "" || status != saml.StatusSuccess {
		t.Fatalf("the IdP's SOAP LogoutRequest for every session of alice: %d %q %s", st, code, status)
	}
	if admitted(browser, "soap-a.example.com", "team-a") || !admitted(browser, "soap-b.example.com", "team-b") {
		t.Fatal("logging alice out of A's route: her session there lives on, or the one on B's ended")
	}
}

// newTLSIdP is a test IdP over HTTPS (so that the SOAP binding may reach it) reading service
// providers' metadata through the listener of the world worldOf names for the entity id (asked
// when the IdP needs it, so the world may start after), and the PEM file of its certificate for
// --outbound-ca.
func newTLSIdP(t *testing.T, worldOf func(entityID string) *world) (*samltest.IdP, string) {
	idp := samltest.NewTLSIdP(t, func(id string) ([]byte, error) {
		resp, err := worldOf(id).samlBrowser().Get(id)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	})
	caFile := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(caFile, idp.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return idp, caFile
}

// artifactBrowser is samlBrowser trusting the IdP's HTTPS certificate too.
func (w *world) artifactBrowser(idp *samltest.IdP) *http.Client {
	jar, _ := cookiejar.New(nil)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.caPEM)
	roots.AppendCertsFromPEM(idp.CertPEM())
	return &http.Client{Timeout: 30 * time.Second, Jar: jar, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".example.com") {
				addr = w.https
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func TestSAMLArtifactAccounts(t *testing.T) {
	var a, c *world
	idp, caFile := newTLSIdP(t, func(id string) *world {
		if strings.Contains(id, "art-c.example.com") {
			return c
		}
		return a
	})
	a = start(t, "--outbound-ca", caFile, "--outbound-allow-private") // the IdP is on this host
	b := a.asAccount("team-b")
	idp.AnswerWithArtifacts(saml.HTTPPostBinding)
	idp.SetUser(&samltest.User{NameID: "alice"})
	a.samlRoute(t, idp, "art-a.example.com", "team-a")
	b.samlRoute(t, idp, "art-b.example.com", "team-b")

	visit := func(c *http.Client, u string, tamper func(samltest.Form) samltest.Form) samltest.Page {
		t.Helper()
		return samlVisit(t, c, u, tamper)
	}
	eventually(t, 0, "A's route signs in with an artifact", func() bool {
		p := visit(a.artifactBrowser(idp), "https://art-a.example.com/", nil)
		return p.Status == 200 && string(p.Body) == "team-a saw alice"
	})
	if r := idp.Resolves(); len(r) == 0 || r[len(r)-1].Verified != nil {
		t.Fatalf("the ArtifactResolve was not signed by the route's key: %+v", r)
	}
	eventually(t, 0, "B's route serves its saml module", func() bool {
		p := visit(a.artifactBrowser(idp), "https://art-b.example.com/", nil)
		return p.Status == 200 && string(p.Body) == "team-b saw alice"
	})

	// An artifact the IdP issued for A's route, taken to B's ACS in a sign-in B started: B's
	// route resolves it, the IdP gives B nothing issued for A, and B signs nobody in.
	var forA string
	visit(a.artifactBrowser(idp), "https://art-a.example.com/", func(f samltest.Form) samltest.Form {
		forA = f.Values.Get("SAMLart")
		f.Action = "https://art-a.example.com/ngrok/saml/none" // keep it unused
		return f
	})
	if forA == "" {
		t.Fatal("no artifact for A's route")
	}
	p := visit(a.artifactBrowser(idp), "https://art-b.example.com/", func(f samltest.Form) samltest.Form {
		f.Values.Set("SAMLart", forA)
		return f
	})
	if p.Status != 403 || p.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" || strings.Contains(string(p.Body), "saw") {
		t.Fatalf("A's artifact at B's ACS: %d %q %s", p.Status, p.Header.Get("ngrok-error-code"), p.Body)
	}

	// Without --outbound-allow-private, the IdP on this host is not asked: 502, saying why.
	c = start(t, "--outbound-ca", caFile)
	c.samlRoute(t, idp, "art-c.example.com", "team-c")
	n := len(idp.Resolves())
	eventually(t, 0, "C's route refuses to resolve at a private address", func() bool {
		p := visit(c.artifactBrowser(idp), "https://art-c.example.com/", nil)
		return p.Status == 502 && p.Header.Get("ngrok-error-code") == "ERR_NGROK_5211" && strings.Contains(string(p.Body), "loopback")
	})
	if len(idp.Resolves()) != n {
		t.Fatal("the IdP on a private address was asked to resolve an artifact")
	}
}
