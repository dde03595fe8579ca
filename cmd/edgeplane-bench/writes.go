package main

import (
	"context"
	"fmt"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// writePolicies is the number of IP policies the create scenarios spread their rules over: one
// policy holds at most ep.MaxRulesPerIPPolicy rules, and a run creates far more than that. Each
// request picks a policy at random, so the policies fill evenly; together they hold about a
// million rules, and a run that creates half as many stays clear of the limit in every one.
const writePolicies = 1000

// seedWritePolicies creates the policies of the writes account that creates go to.
func seedWritePolicies(ctx context.Context, st *store.Store, ds *dataset) error {
	desc := "benchmark writes"
	for range writePolicies {
		pol, err := st.Create(ctx, ds.writes.caller, ep.IPPolicies, "", &ep.IPPolicyCreate{AnnotationFields: ep.AnnotationFields{Description: &desc}})
		if err != nil {
			return err
		}
		ds.writePolicies = append(ds.writePolicies, pol.Base().ID)
	}
	return nil
}

// createReqs are the rule creates of a create scenario against the server at addr: one request
// per write policy, each with the same rule.
func (ds *dataset) createReqs(addr, cidr, action, desc string) []*req {
	out := make([]*req, len(ds.writePolicies))
	for i, p := range ds.writePolicies {
		out[i] = request("POST", addr, "/ip_policy_rules", ds.writes.token, createBody(p, cidr, action, desc))
	}
	return out
}

// createBody is the body of a rule create in policy.
func createBody(policy, cidr, action, desc string) []byte {
	return fmt.Appendf(nil, `{"ip_policy_id":%q,"cidr":%q,"action":%q,"description":%q}`, policy, cidr, action, desc)
}
