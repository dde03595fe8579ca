package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testpki"
	"github.com/edgeplane/edgeplane/store"
)

// The snapshot cache (snapcache.go) must never change what Snapshot returns: after every step of
// random creates, updates, module changes and deletes of every kind a snapshot holds, the
// snapshot of a store that has cached the account equals a full read by a store that has not.

// snapKinds are the collections a snapshot holds, in the order the test creates them.
var snapKinds = []*ep.Resource{ep.HTTPSEdges, ep.HTTPSEdgeRoutes, ep.TLSEdges, ep.TCPEdges, ep.IPPolicyRules,
	ep.CertificateAuthorities, ep.TunnelGroupBackends, ep.StaticBackends, ep.HTTPResponseBackends,
	ep.FailoverBackends, ep.WeightedBackends, ep.ReservedDomains, ep.TLSCertificates}

// snapJSON renders a snapshot for comparison.
func snapJSON(t *testing.T, s *store.Store, account string) string {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{"keys": snap.Keys}
	for _, res := range snapKinds {
		out[res.Kind] = snap.ByKind[res]
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fullSnapJSON renders the snapshot read by a store of its own, whose cache is empty.
func fullSnapJSON(t *testing.T, dsn, account string) string {
	t.Helper()
	fresh, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	return snapJSON(t, fresh, account)
}

func TestSnapshotCacheMatchesFullRead(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		c := admin(t, s, "snap")
		rng := mrand.New(mrand.NewPCG(22, 1))
		ids := map[*ep.Resource][]string{}
		parents := map[string]string{}
		mk := func(res *ep.Resource, parent, body string) string {
			t.Helper()
			cr := decodeInto(t, body, res.NewCreate())
			if err := cr.Validate(); err != nil {
				t.Fatalf("%s %s: %v", res.Kind, body, err)
			}
			d, err := s.Create(ctx, c, res, parent, cr)
			if err != nil {
				t.Fatalf("%s %s: %v", res.Kind, body, err)
			}
			id := d.Base().ID
			ids[res] = append(ids[res], id)
			parents[id] = parent
			return id
		}
		pick := func(res *ep.Resource) (string, bool) {
			if len(ids[res]) == 0 {
				return "", false
			}
			return ids[res][rng.IntN(len(ids[res]))], true
		}
		n := 0
		policy := mk(ep.IPPolicies, "", `{}`)
		create := func(res *ep.Resource) {
			n++
			switch res {
			case ep.HTTPSEdges, ep.TLSEdges, ep.TCPEdges, ep.TunnelGroupBackends:
				mk(res, "", fmt.Sprintf(`{"description": "d%d"}`, n))
			case ep.HTTPSEdgeRoutes:
				edge, ok := pick(ep.HTTPSEdges)
				if !ok {
					return
				}
				mk(res, edge, fmt.Sprintf(`{"match_type": "path_prefix", "match": "/p%d", "webhook_verification": {"provider": "github", "secret": "wh-%d"},
					"oidc": {"issuer": "https://id.example.com", "client_id": "oidc-id", "client_secret": "oidc-%d"}}`, n, n, n))
			case ep.IPPolicyRules:
				mk(res, "", fmt.Sprintf(`{"cidr": "10.%d.0.0/16", "ip_policy_id": %q, "action": "allow"}`, n%250, policy))
			case ep.CertificateAuthorities:
				cp, _ := testpki.SelfSignedPEM(t, fmt.Sprintf("ca%d.example.com", n), true)
				mk(res, "", fmt.Sprintf(`{"ca_pem": %q}`, cp))
			case ep.StaticBackends:
				mk(res, "", fmt.Sprintf(`{"address": "127.0.0.1:%d"}`, 1000+n))
			case ep.HTTPResponseBackends:
				mk(res, "", fmt.Sprintf(`{"body": "b%d", "status_code": 200}`, n))
			case ep.FailoverBackends, ep.WeightedBackends:
				b, ok := pick(ep.TunnelGroupBackends)
				if !ok {
					return
				}
				if res == ep.FailoverBackends {
					mk(res, "", fmt.Sprintf(`{"backends": [%q]}`, b))
				} else {
					mk(res, "", fmt.Sprintf(`{"backends": {%q: 3}}`, b))
				}
			case ep.TLSCertificates:
				cp, kp := testpki.SelfSignedPEM(t, fmt.Sprintf("h%d.example.com", n), false)
				mk(res, "", fmt.Sprintf(`{"certificate_pem": %q, "private_key_pem": %q}`, cp, kp))
			case ep.ReservedDomains:
				body := fmt.Sprintf(`{"domain": "h%d.example.com"}`, n)
				if cert, ok := pick(ep.TLSCertificates); ok && rng.IntN(2) == 0 {
					body = fmt.Sprintf(`{"domain": "h%d.example.com", "certificate_id": %q}`, n, cert)
				}
				mk(res, "", body)
			}
		}
		update := func(res *ep.Resource) {
			id, ok := pick(res)
			if !ok {
				return
			}
			n++
			_, err := s.Update(ctx, c, res, parents[id], id, func(op *ep.Op, d ep.Document) error {
				if r, ok := d.(*ep.HTTPSEdgeRoute); ok {
					switch rng.IntN(3) { // a module PUT, a module DELETE, another module
					case 0:
						r.WebhookVerification = &ep.EndpointWebhookValidation{Enabled: true, Provider: "github", Secret: fmt.Sprintf("wh-%d", n)}
					case 1:
						r.WebhookVerification = nil
					case 2:
						r.Compression = &ep.EndpointToggle{Enabled: n%2 == 0}
					}
				}
				if f := reflect.ValueOf(d).Elem().FieldByName("Description"); f.IsValid() && f.CanSet() {
					f.SetString(fmt.Sprintf("u%d", n))
				}
				return nil
			})
			if err != nil && !ep.IsNotFound(err) {
				t.Fatalf("update %s %s: %v", res.Kind, id, err)
			}
		}
		del := func(res *ep.Resource) {
			id, ok := pick(res)
			if !ok {
				return
			}
			err := s.Delete(ctx, c, res, parents[id], id)
			if err != nil && !ep.IsNotFound(err) {
				return // refused while referenced: a valid outcome, nothing changed
			}
			for i, x := range ids[res] {
				if x == id {
					ids[res] = append(ids[res][:i], ids[res][i+1:]...)
					break
				}
			}
		}
		for _, res := range snapKinds {
			create(res)
		}
		for step := range 150 {
			res := snapKinds[rng.IntN(len(snapKinds))]
			switch k := rng.IntN(10); {
			case k < 4:
				create(res)
			case k < 8:
				update(res)
			default:
				del(res)
			}
			got := snapJSON(t, s, c.AccountID)
			want := fullSnapJSON(t, dsn, c.AccountID)
			if got != want {
				t.Fatalf("step %d (%s): cached snapshot differs from a full read\n got %s\nwant %s", step, res.Kind, got, want)
			}
		}
		// A rotation re-seals every secret; the snapshot still holds them opened.
		if _, err := s.RotateSecrets(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := snapJSON(t, s, c.AccountID), fullSnapJSON(t, dsn, c.AccountID); got != want {
			t.Fatalf("after rotation: cached snapshot differs from a full read\n got %s\nwant %s", got, want)
		}
	})
}
