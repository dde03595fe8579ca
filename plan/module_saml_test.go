package plan

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/samltest"
)

// TestSAMLStage: a saml module with its kept key becomes a stage, and its URLs reach the route
// whatever its match; without the key, with URLs on no host of the edge, or without the session
// key, the route fails closed naming the module and the reason.
func TestSAMLStage(t *testing.T) {
	idp := samltest.NewIdP(t, nil)
	key, cert := samltest.NewKeyPair(t, "sp")
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	module := func(host string) *ep.EndpointSAML {
		sp := "https://" + host + "/ngrok/saml/edghtsrt_id"
		m := &ep.EndpointSAML{Enabled: true, IdPMetadata: idp.Metadata(), EntityID: sp + "/metadata", MetadataURL: sp + "/metadata",
			AssertionConsumerServiceURL: sp + "/acs", SingleLogoutURL: sp + "/slo", RequestSigningCertificatePEM: certPEM,
			NameIDFormat: ep.DefaultNameIDFormat}
		m.CookiePrefix = "ngrok."
		return m
	}
	build := func(env *Env, m *ep.EndpointSAML, keys map[string]string) *HTTPSEdge {
		r := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_id"}, MatchType: ep.MatchPathPrefix, Match: "/app"}
		r.SAML = m
		other := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_other"}, MatchType: ep.MatchPathPrefix, Match: "/"}
		s := &Snapshot{Account: "acct_id", Env: env, SAMLKeys: keys, HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_id"},
			Hostports: []string{"id.example.com:443"}}, Routes: []*ep.HTTPSEdgeRoute{r, other}}}}
		return testLive.Build(s, nil).HTTPS[0]
	}
	env := &Env{Outbound: http.DefaultClient, SessionKey: make([]byte, 32)}
	if !Enforced("saml") {
		t.Fatal("saml is not enforced")
	}
	e := build(env, module("id.example.com"), map[string]string{"edghtsrt_id": keyPEM})
	rt := e.Route("/app/x")
	if rt == nil || rt.ID != "edghtsrt_id" || rt.Unenforced != "" || rt.Chain == nil || rt.Chain.HTTP[0].Name() != "saml" {
		t.Fatalf("a complete module: %+v", rt)
	}
	for _, p := range []string{"/ngrok/saml/edghtsrt_id/acs", "/ngrok/saml/edghtsrt_id/metadata", "/ngrok/saml/edghtsrt_id/slo"} {
		if got := e.Route(p); got == nil || got.ID != "edghtsrt_id" {
			t.Errorf("%s goes to %+v, want the saml route", p, got)
		}
	}
	if got := e.Route("/ngrok/saml/edghtsrt_other/acs"); got == nil || got.ID != "edghtsrt_other" {
		t.Errorf("a path naming a route without saml: %+v", got)
	}

	_, otherCert := samltest.NewKeyPair(t, "other")
	wrongCert := module("id.example.com")
	wrongCert.RequestSigningCertificatePEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherCert.Raw}))
	for name, e := range map[string]*HTTPSEdge{
		"no key":               build(env, module("id.example.com"), nil),
		"key of another cert":  build(env, wrongCert, map[string]string{"edghtsrt_id": keyPEM}),
		"URLs on another host": build(env, module("api.example.com"), map[string]string{"edghtsrt_id": keyPEM}),
		"no session key":       build(&Env{Outbound: http.DefaultClient}, module("id.example.com"), map[string]string{"edghtsrt_id": keyPEM}),
	} {
		rt := e.Route("/app")
		if !strings.HasPrefix(rt.Unenforced, "saml (") {
			t.Errorf("%s: Unenforced %q, want the module and the reason", name, rt.Unenforced)
		}
		if got := e.Route("/ngrok/saml/edghtsrt_id/acs"); got != nil && got.ID == "edghtsrt_id" {
			t.Errorf("%s: the SAML URLs of a route failing closed by match only, got %+v", name, got)
		}
	}
}
