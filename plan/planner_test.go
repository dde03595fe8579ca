package plan_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/store"
)

// TestPlannerFollowsTheStore: a planner on a real store builds the plan of every account at
// start, then follows the change feed: an edge account B creates is served (as B's), an edge
// account A deletes stops being served, and neither account's change touches the other's part.
func TestPlannerFollowsTheStore(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			st, err := store.Open(ctx, testdb.Fresh(t, engine))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			a, _, err := st.EnsureAccount(ctx, "planner-a")
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := st.EnsureAccount(ctx, "planner-b")
			if err != nil {
				t.Fatal(err)
			}
			edgeA := edgeOn(t, st, a, "a.planner.test")

			p, err := plan.NewPlanner(ctx, st, nil, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if e := p.Plan().HTTPS("a.planner.test"); e == nil || e.Account != a.AccountID || e.ID != edgeA {
				t.Fatalf("at start, a.planner.test is served by %+v, want A's edge %s", e, edgeA)
			}
			if p.Plan().Serves("b.planner.test") {
				t.Fatal("b.planner.test is served before B made its edge")
			}
			p.Start()

			edgeB := edgeOn(t, st, b, "b.planner.test")
			waitFor(t, "B's edge", func() bool { e := p.Plan().HTTPS("b.planner.test"); return e != nil && e.ID == edgeB })
			if e := p.Plan().HTTPS("b.planner.test"); e.Account != b.AccountID {
				t.Errorf("B's edge is in the plan as %s's", e.Account)
			}
			if e := p.Plan().HTTPS("a.planner.test"); e == nil || e.Account != a.AccountID {
				t.Errorf("A's edge after B's change: %+v", e)
			}

			if err := st.Delete(ctx, a, ep.HTTPSEdges, "", edgeA); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "A's edge gone", func() bool { return !p.Plan().Serves("a.planner.test") })
			if !p.Plan().Serves("b.planner.test") {
				t.Error("B's edge went with A's")
			}
			if p.Rebuilds() < 3 {
				t.Errorf("%d plans swapped in, want at least 3 (start, B's edge, A's deletion)", p.Rebuilds())
			}
		})
	}
}

// edgeOn reserves host for caller and makes an HTTPS edge on it; it returns the edge's id.
func edgeOn(t *testing.T, st *store.Store, caller ep.Caller, host string) string {
	t.Helper()
	create := func(res *ep.Resource, body string) ep.Document {
		c := res.NewCreate()
		if err := json.Unmarshal([]byte(body), c); err != nil {
			t.Fatal(err)
		}
		d, err := st.Create(context.Background(), caller, res, "", c)
		if err != nil {
			t.Fatalf("%s: %v", res.Kind, err)
		}
		return d
	}
	create(ep.ReservedDomains, `{"domain":"`+host+`"}`)
	return create(ep.HTTPSEdges, `{"hostports":["`+host+`:443"]}`).Base().ID
}

// waitFor waits until cond holds: the planner rebuilds within a second of a write, and the
// minute allowed is only spent in full when something is wrong.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in the plan after a minute", what)
		}
	}
}
