package plan

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"net/url"
	"strings"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The saml route module: a SAML service provider in front of the route, signing its requests
// with the route's kept key (Snapshot.SAMLKeys) and sealing sessions under the deployment's
// identity-sessions key. Its URLs (https://<edge host>/ngrok/saml/<route id>/...) reach the
// route whatever its match: HTTPSEdge.Route sends paths under ep.SAMLPathPrefix to the route
// they name (samlRoute). A route whose URLs are not on its edge's hosts (made when the edge
// had no hostport), or whose key is missing, fails closed: no sign-in could complete.
func routeSAML(cfg any, at RouteEnv) (enforce.Stage, error) {
	m, s, r, e := cfg.(*ep.EndpointSAML), at.Snapshot, at.Route, at.Edge
	pair, err := ep.SAMLKeyPair(m.RequestSigningCertificatePEM, s.SAMLKeys[r.ID])
	if err != nil {
		return nil, errors.New("no request signing key is kept for the route's certificate; PUT the saml module again for a new pair")
	}
	if err := samlURLsServed(m, r, e); err != nil {
		return nil, err
	}
	sess, err := sessionConfig(s, m.CookiePrefix, m.InactivityTimeout, m.MaximumDuration, m.OptionsPassthrough)
	if err != nil {
		return nil, err
	}
	if r.MatchType == ep.MatchPathPrefix && strings.HasPrefix(r.Match, "/") {
		sess.Base = r.Match
	}
	return enforce.NewSAML(enforce.SAMLConfig{IdPMetadata: m.IdPMetadata, EntityID: m.EntityID, MetadataURL: m.MetadataURL,
		ACSURL: m.AssertionConsumerServiceURL, SLOURL: m.SingleLogoutURL, Key: pair.PrivateKey.(*rsa.PrivateKey), Certificate: pair.Leaf,
		ForceAuthn: m.ForceAuthn, AllowIdPInitiated: m.AllowIdPInitiated, AuthorizedGroups: m.AuthorizedGroups,
		NameIDFormat: m.NameIDFormat, Session: sess, RouteID: r.ID, UseOnce: s.Env.UseOnce,
		Revocations: s.Env.Revocations, Client: s.Env.Outbound, Log: s.Env.Log})
}

// samlURLsServed checks that the module's URLs are the ones this data plane serves for the
// route: on a host of its edge, under ep.SAMLPathPrefix and the route's id.
func samlURLsServed(m *ep.EndpointSAML, r *ep.HTTPSEdgeRoute, e *ep.HTTPSEdge) error {
	base := ep.SAMLPathPrefix + r.ID
	for _, raw := range []string{m.EntityID, m.MetadataURL, m.AssertionConsumerServiceURL, m.SingleLogoutURL} {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || !strings.HasPrefix(u.Path, base+"/") || !edgeHasHost(e, u.Hostname()) {
			return fmt.Errorf("the service provider URL %s is not served by this edge (made when the edge had no such hostport); PUT the saml module again", raw)
		}
	}
	return nil
}

func edgeHasHost(e *ep.HTTPSEdge, host string) bool {
	for _, hp := range e.Hostports {
		h, _, _ := strings.Cut(hp, ":")
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// samlRoute returns the route a path under ep.SAMLPathPrefix names, when it has a saml stage:
// the service provider's URLs are the route's whatever its match.
func (e *HTTPSEdge) samlRoute(path string) *Route {
	id, _, _ := strings.Cut(strings.TrimPrefix(path, ep.SAMLPathPrefix), "/")
	for _, r := range e.Routes {
		if r.ID != id || r.Chain == nil {
			continue
		}
		for _, st := range r.Chain.HTTP {
			if st.Name() == "saml" {
				return r
			}
		}
	}
	return nil
}
