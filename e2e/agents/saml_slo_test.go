package agents

// SAML single logout through edgeplane serve and real agents, two accounts each with a saml
// route in front of its own agent's tunnel, one IdP (internal/samltest, crewjam/saml's IdP
// side with single logout): logout at edgeplane reaches the IdP and comes back; the IdP's
// logout ends the session it names on one account's route and nothing on the other's; a
// LogoutRequest signed by another key is refused.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"
	"golang.ngrok.com/ngrok/config"

	"github.com/edgeplane/edgeplane/internal/samltest"
)

// samlRoute makes, for w's account, an agent on a labeled tunnel answering with its name, an
// HTTPS edge on host routing to it, and the route's saml module trusting idp with sessions of at
// most an hour; it returns the module's SLO URL.
func (w *world) samlRoute(t *testing.T, idp *samltest.IdP, host, name string) string {
	t.Helper()
	_, token := w.credential()
	w.reserveDomain(host)
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", name)))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "%s saw %s", name, r.Header.Get("Ngrok-Auth-User-Id"))
	}))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": name}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	var m struct {
		SLO string `json:"single_logout_url"`
	}
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+route+"/saml", map[string]any{"idp_metadata": idp.Metadata(),
		"maximum_duration": 3600}, &m); st != 200 {
		t.Fatalf("PUT saml: %d", st)
	}
	return m.SLO
}

func TestSAMLSingleLogout(t *testing.T) {
	a := start(t)
	b := a.asAccount("team-b")
	idp := a.newIdP(t)
	idp.SetUser(&samltest.User{NameID: "alice"})
	sloA := a.samlRoute(t, idp, "slo-a.example.com", "team-a")
	b.samlRoute(t, idp, "slo-b.example.com", "team-b")

	visit := func(c *http.Client, u string) samltest.Page { t.Helper(); return samlVisit(t, c, u, nil) }
	// admitted: the browser reaches the account's agent without signing in again.
	admitted := func(c *http.Client, host, name string) bool {
		t.Helper()
		idp.SetUser(nil)
		defer idp.SetUser(&samltest.User{NameID: "alice"})
		p := visit(c, "https://"+host+"/")
		return p.Status == 200 && string(p.Body) == name+" saw alice"
	}
	newest := func() samltest.Session {
		s := idp.Sessions()
		return s[len(s)-1]
	}
	browser := a.samlBrowser()
	// Signed in means the agent saw the user: a 200 alone may come from the route before its new
	// saml module reached the plan, with nobody signed in.
	signedIn := func(host, name string) bool {
		p := visit(browser, "https://"+host+"/")
		return p.Status == 200 && string(p.Body) == name+" saw alice"
	}
	eventually(t, 0, "both routes sign in", func() bool {
		return signedIn("slo-a.example.com", "team-a") && signedIn("slo-b.example.com", "team-b")
	})
	if !admitted(browser, "slo-a.example.com", "team-a") || !admitted(browser, "slo-b.example.com", "team-b") {
		t.Fatal("not signed in to both accounts' routes")
	}

	// Logout at edgeplane, on account A's route: the IdP's session of that sign-in ends, and so
	// does A's; B's stays.
	sessions := len(idp.Sessions())
	if p := visit(browser, "https://slo-a.example.com/ngrok/logout"); p.Status != 200 || !strings.Contains(string(p.Body), "Signed out") {
		t.Fatalf("logout at edgeplane: %d %s", p.Status, p.Body)
	}
	if n := len(idp.Sessions()); n != sessions-1 {
		t.Fatalf("the IdP has %d sessions after the logout, had %d", n, sessions)
	}
	if admitted(browser, "slo-a.example.com", "team-a") || !admitted(browser, "slo-b.example.com", "team-b") {
		t.Fatal("after logging out of A's route: A's session lives on or B's ended")
	}

	// Logout at the IdP of a new sign-in on A's route: a copy of the session's cookie opens
	// nothing any more; B's session stays.
	if p := visit(browser, "https://slo-a.example.com/"); p.Status != 200 {
		t.Fatalf("signing in again: %d %s", p.Status, p.Body)
	}
	copied := a.samlBrowser()
	for _, u := range []string{"https://slo-a.example.com/"} {
		pu, _ := url.Parse(u)
		copied.Jar.SetCookies(pu, browser.Jar.Cookies(pu))
	}
	if p := visit(browser, idp.LogoutURL(newest().ID)); p.Status != 200 || !strings.Contains(string(p.Body), "You have been logged out.") ||
		strings.Contains(string(p.Body), "could not be confirmed") {
		t.Fatalf("logout at the IdP: %d %s", p.Status, p.Body)
	}
	if admitted(copied, "slo-a.example.com", "team-a") || !admitted(browser, "slo-b.example.com", "team-b") {
		t.Fatal("after the IdP's logout: A's session (a copy of its cookie) lives on, or B's ended")
	}

	// A LogoutRequest to A's route with the IdP's name but signed by another key ends nothing.
	if p := visit(browser, "https://slo-a.example.com/"); p.Status != 200 {
		t.Fatalf("signing in again: %d", p.Status)
	}
	key, cert := samltest.NewKeyPair(t, "not the IdP")
	forger := &saml.ServiceProvider{EntityID: idp.IDP.Metadata().EntityID, Key: key, Certificate: cert,
		SignatureMethod: dsig.RSASHA256SignatureMethod, IDPMetadata: &saml.EntityDescriptor{EntityID: "x"}}
	req, err := forger.MakeLogoutRequest(sloA, "alice")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := forger.RedirectLogoutRequestURL(req, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := visit(a.samlBrowser(), forged.String()); p.Status != 403 || p.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" {
		t.Fatalf("forged LogoutRequest: %d %s", p.Status, p.Body)
	}
	if !admitted(browser, "slo-a.example.com", "team-a") {
		t.Fatal("a forged LogoutRequest ended the session")
	}
}
