package enforce

// The HTTP-Artifact binding with the test IdP over HTTPS: the browser brings a SAMLart (GET or
// POST) and the route resolves it at the IdP over the guarded outbound client; every refusal.

import (
	"crypto/x509"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"

	"github.com/edgeplane/edgeplane/internal/outbound"
	"github.com/edgeplane/edgeplane/internal/samltest"
)

// newArtifactEnv is a route whose IdP answers with artifacts taken with binding, resolved over
// the guarded outbound client trusting the IdP's certificate (private addresses allowed, as the
// IdP is on this host, unless private is false).
func newArtifactEnv(t *testing.T, binding string, private bool, cfg func(*SAMLConfig)) *samlEnv {
	t.Helper()
	var roots *x509.CertPool
	e := newSAMLEnvOver(t, true, func(i *samltest.IdP) {
		roots = x509.NewCertPool()
		roots.AddCert(i.Server.Certificate())
		i.AnswerWithArtifacts(binding)
	}, func(c *SAMLConfig) {
		c.Client = outbound.NewClient(outbound.Options{Roots: roots, AllowPrivate: private})
		if cfg != nil {
			cfg(c)
		}
	})
	e.idp.SetUser(&samltest.User{NameID: "alice@example.com", Email: "alice@example.com"})
	return e
}

// TestSAMLArtifactSignIn: with either binding of the artifact (a GET with SAMLart in the query,
// a POSTed form), the route resolves it with an ArtifactResolve signed by its key and signs the
// browser in from the response; the metadata lists the HTTP-Artifact ACS.
func TestSAMLArtifactSignIn(t *testing.T) {
	for _, binding := range []string{saml.HTTPRedirectBinding, saml.HTTPPostBinding} {
		t.Run(binding[strings.LastIndex(binding, ":")+1:], func(t *testing.T) {
			e := newArtifactEnv(t, binding, true, nil)
			if md := e.spMetadata(); !strings.Contains(string(md), `Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Artifact" Location="`+e.sp+`/acs"`) {
				t.Fatalf("the metadata lists no HTTP-Artifact ACS: %s", md)
			}
			p := e.visit(e.browser, "GET", "/app?x=1", nil, nil)
			if p.Status != 200 || string(p.Body) != "upstream /app?x=1" {
				t.Fatalf("artifact sign-in: %d %s", p.Status, p.Body)
			}
			if h, _ := e.lastUpstream(); h.Get("Ngrok-Auth-User-Email") != "alice@example.com" {
				t.Fatalf("identity: %v", h)
			}
			if r := e.idp.Resolves(); len(r) != 1 || r[0].Verified != nil || r[0].Issuer != e.sp+"/metadata" {
				t.Fatalf("the ArtifactResolve was not signed by the route's key: %+v", r)
			}
		})
	}
}

// wantArtifactRefused signs a new browser in with the artifact edit gives (nil: the IdP's own)
// and wants the refusal status with ERR_NGROK_5211, the upstream never reached; it returns the
// page's body.
func (e *samlEnv) wantArtifactRefused(t *testing.T, status int, edit func(art string) string) string {
	t.Helper()
	var tamper func(samltest.Form) samltest.Form
	if edit != nil {
		tamper = func(f samltest.Form) samltest.Form {
			if a := f.Values.Get("SAMLart"); a != "" {
				f.Values.Set("SAMLart", edit(a))
			}
			return f
		}
	}
	req, _ := http.NewRequest("GET", e.base+"/app", nil)
	p, err := samltest.Browse(e.newBrowser(), req, tamper)
	if err != nil {
		t.Fatal(err)
	}
	wantPage(t, p, status, "ERR_NGROK_5211")
	if _, hits := e.lastUpstream(); hits != 0 {
		t.Fatal("a refused artifact reached the upstream")
	}
	return string(p.Body)
}

// Refusals at the ACS of what the IdP answers: an ArtifactResponse signed by another key, from
// another issuer, stale (403); one over the 1 MiB bound on answers (502); an unknown artifact,
// one already resolved (a replay; 403); a SAMLart that is no artifact (400); an artifact of
// another IdP, refused without a request leaving (403).
func TestSAMLArtifactRefused(t *testing.T) {
	e := newArtifactEnv(t, saml.HTTPPostBinding, true, func(c *SAMLConfig) { c.AllowIdPInitiated = true })
	otherKey, otherCert := samltest.NewKeyPair(t, "not the IdP")
	t.Run("bad signature", func(t *testing.T) {
		e.idp.SignArtifactResponsesWith(otherKey, otherCert)
		defer e.idp.SignArtifactResponsesWith(nil, nil)
		e.wantArtifactRefused(t, http.StatusForbidden, nil)
	})
	tampered := map[string]func(*etree.Element){
		"wrong issuer": func(el *etree.Element) { el.SelectElement("Issuer").SetText("https://other-idp.example.com/metadata") },
		"stale": func(el *etree.Element) {
			el.CreateAttr("IssueInstant", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		},
	}
	for name, fn := range tampered {
		t.Run(name, func(t *testing.T) {
			e.idp.TamperArtifactResponses(fn)
			defer e.idp.TamperArtifactResponses(nil)
			e.wantArtifactRefused(t, http.StatusForbidden, nil)
		})
	}
	t.Run("oversized", func(t *testing.T) {
		e.idp.TamperArtifactResponses(func(el *etree.Element) {
			el.CreateElement("samlp:Extensions").SetText(strings.Repeat("x", 2<<20))
		})
		defer e.idp.TamperArtifactResponses(nil)
		e.wantArtifactRefused(t, http.StatusBadGateway, nil)
	})
	t.Run("unknown", func(t *testing.T) {
		n := len(e.idp.Resolves())
		e.wantArtifactRefused(t, http.StatusForbidden, func(string) string { return e.idp.UnknownArtifact() })
		if len(e.idp.Resolves()) != n+1 {
			t.Fatal("the unknown artifact was not asked for")
		}
	})
	t.Run("not an artifact", func(t *testing.T) {
		e.wantArtifactRefused(t, http.StatusBadRequest, func(string) string { return "bm90IGFuIGFydGlmYWN0" })
	})
	t.Run("another IdP's", func(t *testing.T) {
		other := samltest.NewIdP(t, e.idp.FetchSP)
		n := len(e.idp.Resolves())
		e.wantArtifactRefused(t, http.StatusForbidden, func(string) string { return other.UnknownArtifact() })
		if len(e.idp.Resolves()) != n || len(other.Resolves()) != 0 {
			t.Fatal("an artifact of another IdP was sent to be resolved")
		}
	})
	t.Run("replayed", func(t *testing.T) {
		// Captured with its sign-in cookie; the IdP resolves an artifact once only.
		var c captured
		req, _ := http.NewRequest("GET", e.base+"/app", nil)
		b := e.newBrowser()
		if _, err := samltest.Browse(b, req, e.capture(b, &c)); err != nil {
			t.Fatal(err)
		}
		if c.form.Values.Get("SAMLart") == "" {
			t.Fatalf("no artifact captured: %+v", c.form)
		}
		wantReplayRefused(t, e, c)
	})
}

// The IdP's artifact resolution service out of reach: on a non-public address without
// --outbound-allow-private (refused by the guard before any connection; the page says why), or
// not answering (a closed port). Both 502.
func TestSAMLArtifactUnreachable(t *testing.T) {
	t.Run("private address", func(t *testing.T) {
		e := newArtifactEnv(t, saml.HTTPRedirectBinding, false, nil)
		if body := e.wantArtifactRefused(t, http.StatusBadGateway, nil); !strings.Contains(body, "loopback") {
			t.Fatalf("the page does not say why: %s", body)
		}
		if len(e.idp.Resolves()) != 0 {
			t.Fatal("the IdP on a private address was asked")
		}
	})
	t.Run("closed port", func(t *testing.T) {
		e := newArtifactEnv(t, saml.HTTPRedirectBinding, true, func(c *SAMLConfig) {
			ars := regexp.MustCompile(`Location="https://127\.0\.0\.1:\d+/artifact"`)
			if !ars.MatchString(c.IdPMetadata) {
				t.Fatal("no artifact resolution service in the IdP's metadata")
			}
			c.IdPMetadata = ars.ReplaceAllString(c.IdPMetadata, `Location="https://127.0.0.1:1/artifact"`)
		})
		e.wantArtifactRefused(t, http.StatusBadGateway, nil)
	})
}
