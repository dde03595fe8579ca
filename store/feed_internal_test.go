package store

import (
	"context"
	"slices"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// A change of a credential or a reservation reaches the agent gateway's subscription and not the
// planner's (a credential does not change a routing plan); a change of a plan collection reaches
// both. On PostgreSQL the change is committed through one replica and heard on another.
func TestAgentChangesReachOnlyAgentSubscribers(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine, dsn string) {
		writer := openStore(t, dsn)
		hearer := writer
		if engine != "sqlite" {
			hearer = openStore(t, dsn)
		}
		plans, agents := hearer.Subscribe(), hearer.SubscribeAgents()
		defer plans.Close()
		defer agents.Close()
		// commitAndWait commits a change of res in account and takes from sub until the account
		// arrives, returning everything taken. The commit is repeated every second: the other
		// replica's LISTEN may not have started when the first was sent.
		commitAndWait := func(sub *Subscription, account string, res *ep.Resource) []string {
			t.Helper()
			var got []string
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; !slices.Contains(got, account); i++ {
				if time.Now().After(deadline) {
					t.Fatalf("%s never announced; got %v", account, got)
				}
				if i%10 == 0 {
					writer.committed(account, res, nil)
				}
				select {
				case <-sub.Wake():
				case <-time.After(100 * time.Millisecond):
				}
				got = append(got, sub.Take()...)
			}
			return got
		}
		for _, res := range []*ep.Resource{ep.Credentials, ep.BotUsers} {
			account := "acct_" + res.Kind
			commitAndWait(agents, account, res)
			if got := plans.Take(); slices.Contains(got, account) {
				t.Errorf("a %s change was announced to the planner: %v", res.Kind, got)
			}
		}
		for _, res := range []*ep.Resource{ep.ReservedDomains, ep.HTTPSEdges} {
			account := "acct_" + res.Kind
			commitAndWait(agents, account, res)
			commitAndWait(plans, account, res)
		}
		// A failed write announces nothing.
		writer.committed("acct_failed", ep.Credentials, context.Canceled)
		if got := commitAndWait(agents, "acct_last", ep.Credentials); slices.Contains(got, "acct_failed") {
			t.Errorf("a failed write was announced: %v", got)
		}
	})
}
