package store

import (
	"context"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestFillPolicyCosts: the shares of objects written before policy_costs existed (here: their
// rows removed and the migration's task left again) are recorded at the next start, the enabled
// policies' only, and a write then counts them.
func TestFillPolicyCosts(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		a := ensureAccount(t, s, "a")
		doc := func(n int) string {
			b := []byte(`on_tcp_connect: [{actions: [{type: deny}], expressions: [`)
			for i := range n {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `"true"`...)
			}
			return string(append(b, "]}]"...))
		}
		big := doc(6000)
		if c := ep.TrafficPolicyCost(big); 2*c <= ep.MaxAccountPolicyCost || c > ep.MaxAccountPolicyCost {
			t.Fatalf("the document's cost %d: one must fit, two must not", c)
		}
		on, off := true, false
		create := func(value string, enabled *bool) error {
			_, err := s.Create(ctx, a, ep.TLSEdges, "", &ep.TLSEdgeBody{TrafficPolicy: &ep.EndpointTrafficPolicyMutate{Value: &value, Enabled: enabled}})
			return err
		}
		if err := create(big, &on); err != nil {
			t.Fatal(err)
		}
		if err := create(doc(5999), &off); err != nil {
			t.Fatal(err)
		}
		// As before migration 0018: no shares, and the task pending.
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM policy_costs`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO store_tasks (name) VALUES (?)`), fillPolicyCostsTask)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = openStore(t, dsn)
		var n int
		if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM policy_costs`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d shares after the start (%v), want the enabled policy's", n, err)
		}
		err := create(doc(5998), &on)
		if e, ok := err.(*ep.Error); !ok || e.Status != 400 || e.Code != ep.CodeInvalid || e.Field != "traffic_policy" {
			t.Fatalf("a second document beside the recorded one: %v, want 400 on traffic_policy", err)
		}
	})
}
