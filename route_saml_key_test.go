package edgeplane_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// Tests of the SAML module's request signing key against a real store: the key behind
// request_signing_certificate_pem is kept encrypted beside the route, reaches the data plane's
// snapshot, stays across PUTs and restarts, and never shows in a document.

const keyTestIdPMetadata = `<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="https://idp.example.com/metadata">
  <md:IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">
    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST" Location="https://idp.example.com/sso"/>
  </md:IDPSSODescriptor>
</md:EntityDescriptor>`

func samlModule(t *testing.T) *ep.Module {
	t.Helper()
	for _, m := range ep.ModulesOf(ep.HTTPSEdgeRoutes) {
		if m.Name == "saml" {
			return m
		}
	}
	t.Fatal("no saml module on routes")
	return nil
}

// createJSON creates an object of res from a JSON body, as the API would.
func createJSON[T any, PT interface {
	*T
	ep.Creator
}](t *testing.T, s *store.Store, c ep.Caller, res *ep.Resource, parent, body string) ep.Document {
	t.Helper()
	b := PT(new(T))
	if err := json.Unmarshal([]byte(body), b); err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("%s: %v", res.Kind, err)
	}
	d, err := s.Create(context.Background(), c, res, parent, b)
	if err != nil {
		t.Fatalf("%s: %v", res.Kind, err)
	}
	return d
}

// putSAML writes the route's saml module as PUT <route>/saml does.
func putSAML(t *testing.T, s *store.Store, c ep.Caller, edge, route, body string) *ep.EndpointSAML {
	t.Helper()
	m := samlModule(t)
	req := m.NewRequest()
	if err := json.Unmarshal([]byte(body), req); err != nil {
		t.Fatal(err)
	}
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	var out any
	if _, err := s.Update(context.Background(), c, ep.HTTPSEdgeRoutes, edge, route, func(op *ep.Op, doc ep.Document) error {
		v, err := ep.SetModule(op, m, doc, req)
		out = v
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out.(*ep.EndpointSAML)
}

// snapshotKey returns the route's key in the account's data-plane snapshot.
func snapshotKey(t *testing.T, s *store.Store, account, route string) string {
	t.Helper()
	docs, err := s.Snapshot(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	return docs.Keys[route]
}

func noKeyIn(t *testing.T, what string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("%s shows a private key: %s", what, b)
	}
}

func TestSAMLSigningKeyKept(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			dsn := testdb.Fresh(t, engine)
			ctx := context.Background()
			s, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			c, _, err := s.EnsureAccount(ctx, "saml-keys")
			if err != nil {
				t.Fatal(err)
			}
			createJSON[ep.ReservedDomainCreate](t, s, c, ep.ReservedDomains, "", `{"domain":"app.example.test"}`)
			edge := createJSON[ep.HTTPSEdgeBody](t, s, c, ep.HTTPSEdges, "", `{"hostports":["app.example.test:443"]}`).Base().ID
			route := createJSON[ep.HTTPSEdgeRouteBody](t, s, c, ep.HTTPSEdgeRoutes, edge, `{"match_type":"path_prefix","match":"/"}`).Base().ID

			first := putSAML(t, s, c, edge, route, `{"idp_metadata":`+jsonString(keyTestIdPMetadata)+`}`)
			noKeyIn(t, "the module", first)
			want := "https://app.example.test/ngrok/saml/" + route
			if first.EntityID != want+"/metadata" || first.MetadataURL != want+"/metadata" ||
				first.AssertionConsumerServiceURL != want+"/acs" || first.SingleLogoutURL != want+"/slo" {
				t.Fatalf("service provider URLs not on the edge's host under %s: %+v", want, first)
			}
			key := snapshotKey(t, s, c.AccountID, route)
			if _, err := ep.SAMLKeyPair(first.RequestSigningCertificatePEM, key); err != nil {
				t.Fatalf("the snapshot's key does not sign for the certificate: %v", err)
			}
			doc, err := s.Get(ctx, c.AccountID, ep.HTTPSEdges, "", edge)
			if err != nil {
				t.Fatal(err)
			}
			noKeyIn(t, "the edge with its routes", doc)

			// A PUT changing other fields keeps the certificate and its key.
			second := putSAML(t, s, c, edge, route, `{"idp_metadata":`+jsonString(keyTestIdPMetadata)+`,"authorized_groups":["ops"]}`)
			if second.RequestSigningCertificatePEM != first.RequestSigningCertificatePEM || snapshotKey(t, s, c.AccountID, route) != key {
				t.Fatal("a PUT of the module changed the signing certificate or its key")
			}

			// A restart (a new process on the same database) reads the same key.
			s.Close()
			if s, err = store.Open(ctx, dsn); err != nil {
				t.Fatal(err)
			}
			if got := snapshotKey(t, s, c.AccountID, route); got != key {
				t.Fatal("the signing key changed across a restart")
			}

			// After DELETE, a new configuration gets a new certificate with a new key.
			if _, err := s.Update(ctx, c, ep.HTTPSEdgeRoutes, edge, route, func(_ *ep.Op, doc ep.Document) error {
				return ep.ClearModule(samlModule(t), doc)
			}); err != nil {
				t.Fatal(err)
			}
			if got := snapshotKey(t, s, c.AccountID, route); got != "" {
				t.Fatal("a route without saml has a key in the snapshot")
			}
			third := putSAML(t, s, c, edge, route, `{"idp_metadata":`+jsonString(keyTestIdPMetadata)+`}`)
			newKey := snapshotKey(t, s, c.AccountID, route)
			if third.RequestSigningCertificatePEM == first.RequestSigningCertificatePEM || newKey == key {
				t.Fatal("a new configuration kept the deleted one's certificate or key")
			}
			if _, err := ep.SAMLKeyPair(third.RequestSigningCertificatePEM, newKey); err != nil {
				t.Fatalf("new pair: %v", err)
			}
			if _, err := ep.SAMLKeyPair(third.RequestSigningCertificatePEM, key); err == nil {
				t.Fatal("a certificate was paired with another configuration's key")
			}

			// A route created with saml in its body keeps its key from the start; on an edge
			// without hostports the URLs fall back to the base URL.
			bare := createJSON[ep.HTTPSEdgeBody](t, s, c, ep.HTTPSEdges, "", `{}`).Base().ID
			r := createJSON[ep.HTTPSEdgeRouteBody](t, s, c, ep.HTTPSEdgeRoutes, bare,
				`{"match_type":"path_prefix","match":"/","saml":{"idp_metadata":`+jsonString(keyTestIdPMetadata)+`}}`).(*ep.HTTPSEdgeRoute)
			if _, err := ep.SAMLKeyPair(r.SAML.RequestSigningCertificatePEM, snapshotKey(t, s, c.AccountID, r.ID)); err != nil {
				t.Fatalf("route created with saml: %v", err)
			}
			if !strings.HasSuffix(r.SAML.EntityID, "/saml/"+r.ID+"/metadata") || strings.Contains(r.SAML.EntityID, "/ngrok/") {
				t.Fatalf("entity id on an edge without hostports: %s", r.SAML.EntityID)
			}
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
