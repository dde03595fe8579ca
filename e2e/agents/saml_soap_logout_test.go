package agents

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/crewjam/saml"

	"github.com/edgeplane/edgeplane/internal/samltest"
)

// soapLogoutAccounts starts a server with two accounts, team-a and team-b, each with a saml
// route (prefix-a.example.com, prefix-b.example.com) trusting one IdP over TLS whose single
// logout service takes SOAP only and which signs alice in; it returns the server, the IdP, a
// browser trusting both, and signedIn, which visits a route's host and reports whether the
// account's agent answered for alice.
func soapLogoutAccounts(t *testing.T, prefix string) (*world, *samltest.IdP, *http.Client, func(host, name string) bool) {
	t.Helper()
	var a *world
	idp, caFile := newTLSIdP(t, func(string) *world { return a })
	a = start(t, "--outbound-ca", caFile, "--outbound-allow-private") // the IdP is on this host
	b := a.asAccount("team-b")
	idp.OnlyIdPLogoutBinding(saml.SOAPBinding)
	idp.SetUser(&samltest.User{NameID: "alice"})
	a.samlRoute(t, idp, prefix+"-a.example.com", "team-a")
	b.samlRoute(t, idp, prefix+"-b.example.com", "team-b")
	browser := a.artifactBrowser(idp)
	signedIn := func(host, name string) bool {
		p := samlVisit(t, browser, "https://"+host+"/", nil)
		return p.Status == 200 && string(p.Body) == name+" saw alice"
	}
	return a, idp, browser, signedIn
}

// TestSAMLSOAPLogoutStartedHere: the IdP's metadata offers single logout with the SOAP binding
// only, so a logout started at edgeplane cannot send the browser there: edgeplane sends the IdP
// a LogoutRequest signed by the route's key itself, over its guarded outbound client. Two
// accounts, each with a saml route trusting the IdP: logging out of A's route ends that sign-in's
// session at the IdP and A's session, and B's stays. When the IdP refuses (Responder), the
// session here ends all the same and the page says the IdP did not confirm.
func TestSAMLSOAPLogoutStartedHere(t *testing.T) {
	a, idp, browser, signedIn := soapLogoutAccounts(t, "soapout")
	// admitted: the browser reaches the account's agent without signing in again.
	admitted := func(host, name string) bool {
		t.Helper()
		idp.SetUser(nil)
		defer idp.SetUser(&samltest.User{NameID: "alice"})
		return signedIn(host, name)
	}
	eventually(t, 0, "A's route signs in", func() bool { return signedIn("soapout-a.example.com", "team-a") })
	sessA := idp.Sessions()[len(idp.Sessions())-1]
	eventually(t, 0, "B's route signs in", func() bool { return signedIn("soapout-b.example.com", "team-b") })
	hasSession := func(id string) bool {
		for _, s := range idp.Sessions() {
			if s.ID == id {
				return true
			}
		}
		return false
	}

	// Logout at edgeplane on A's route: the IdP ends A's sign-in's session, told over SOAP.
	p := samlVisit(t, browser, "https://soapout-a.example.com/ngrok/logout", nil)
	if p.Status != 200 || !strings.Contains(string(p.Body), "Signed out") {
		t.Fatalf("logout at edgeplane: %d %q %s", p.Status, p.Header.Get("ngrok-error-code"), p.Body)
	}
	if hasSession(sessA.ID) {
		t.Fatal("the IdP's session of A's sign-in lives on after the logout at edgeplane")
	}
	if admitted("soapout-a.example.com", "team-a") || !admitted("soapout-b.example.com", "team-b") {
		t.Fatal("after logging out of A's route: A's session lives on or B's ended")
	}

	// The IdP cannot end the session of a new sign-in on A's route: it answers the
	// LogoutRequest with Responder; the session here ends anyway, and the page says so.
	if !signedIn("soapout-a.example.com", "team-a") {
		t.Fatal("signing in again on A's route")
	}
	idp.RefuseLogouts(true)
	p = samlVisit(t, browser, "https://soapout-a.example.com/ngrok/logout", nil)
	if p.Status != 502 || p.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" ||
		!strings.Contains(string(p.Body), "did not confirm the logout") || !strings.Contains(string(p.Body), saml.StatusResponder) {
		t.Fatalf("logout the IdP refuses: %d %q %s", p.Status, p.Header.Get("ngrok-error-code"), p.Body)
	}
	if admitted("soapout-a.example.com", "team-a") || !admitted("soapout-b.example.com", "team-b") {
		t.Fatal("after a logout the IdP refused: A's session lives on or B's ended")
	}
	if log := a.proc.Stderr.String(); !strings.Contains(log, "did not confirm a back-channel logout") || !strings.Contains(log, saml.StatusResponder) {
		t.Errorf("no warning in the server's log of the IdP's refusal:\n%s", log)
	}
}

// TestSAMLSOAPLogoutIdPUnreachable: the IdP's single logout service takes SOAP only and is gone
// (its server closed) when a browser logs out of A's route, so edgeplane cannot ask it to end
// its session. The session here ends all the same, the page is 502 ERR_NGROK_5211 saying the IdP
// could not be asked, the server logs a warning, and the session on B's route, of another
// account trusting the same IdP, stays.
func TestSAMLSOAPLogoutIdPUnreachable(t *testing.T) {
	a, idp, browser, signedIn := soapLogoutAccounts(t, "soapgone")
	eventually(t, 0, "A's route signs in", func() bool { return signedIn("soapgone-a.example.com", "team-a") })
	eventually(t, 0, "B's route signs in", func() bool { return signedIn("soapgone-b.example.com", "team-b") })

	// The IdP goes away: its address refuses connections from now on.
	idp.Server.Close()
	p := samlVisit(t, browser, "https://soapgone-a.example.com/ngrok/logout", nil)
	if p.Status != 502 || p.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" ||
		!strings.Contains(string(p.Body), "did not confirm the logout") || !strings.Contains(string(p.Body), "could not be asked") {
		t.Fatalf("logout with the IdP unreachable: %d %q %s", p.Status, p.Header.Get("ngrok-error-code"), p.Body)
	}

	// Without the IdP no one can sign in again, so the browser is not let follow redirects: A's
	// route now sends it to the IdP to sign in (its session ended), B's still admits it.
	noFollow := *browser
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(host string) (int, string, string) {
		t.Helper()
		resp, err := noFollow.Get("https://" + host + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, resp.Header.Get("Location"), string(body)
	}
	st, loc, body := get("soapgone-a.example.com")
	form, _ := samltest.ParseForm([]byte(body))
	if toIdP := st/100 == 3 && strings.HasPrefix(loc, idp.Server.URL) ||
		st == 200 && strings.HasPrefix(form.Action, idp.Server.URL) && form.Values.Get("SAMLRequest") != ""; !toIdP {
		t.Fatalf("A's route after the logout: %d to %q %q, want the browser sent to the IdP to sign in", st, loc, body)
	}
	if st, _, body := get("soapgone-b.example.com"); st != 200 || body != "team-b saw alice" {
		t.Fatalf("B's route after A's logout: %d %q, want its session to stay", st, body)
	}
	if log := a.proc.Stderr.String(); !strings.Contains(log, "did not confirm a back-channel logout") || !strings.Contains(log, "could not be asked") {
		t.Errorf("no warning in the server's log of the unreachable IdP:\n%s", log)
	}
}
