package server_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestAccountIsolation: with two accounts A and B, each holding one object of every collection
// with every module configured, every operation of the OpenAPI document is tried with A's key on
// each of B's objects (and on ids of the right prefix that exist nowhere). Every such request is
// 404 ERR_NGROK_404, with the same message as for the id that exists nowhere: never 403, never a
// 2xx, never a 400 or 409 that would tell B's objects from missing ones; that holds for a POST
// under B's edge and for a module PUT on B's object with a valid body too. Requests that name B's
// objects inside a body (a rule's policy, a certificate's CA, a module's backend …) are refused
// exactly as for missing objects. No response to A (lists, errors, uris) carries anything of B,
// and afterwards neither account holds anything new or changed.
func TestAccountIsolation(t *testing.T) {
	e := newEnv(t)
	a, b := e.newAccount("isolation-a"), e.newAccount("isolation-b")
	populate(t, e, a)
	populate(t, e, b)
	e.t = t
	// Valid bodies, from A's point of view, for the operations that take one (made before the
	// snapshots: they create what they refer to).
	createBody := map[*ep.Resource]any{}
	for _, res := range ep.Resources {
		if res.Parent != nil {
			createBody[res] = fixtures[res.Kind].create(e, a)
		}
	}
	moduleBody := map[string]any{}
	for key, fx := range moduleFixtures {
		moduleBody[key] = edgeKit{e, a}.expand(fx)
	}
	bodyOf := func(op apiOp) any {
		switch {
		case !op.body:
			return nil
		case op.module != "":
			return moduleBody[op.res.Kind+"/"+op.module]
		case op.method == "POST":
			return createBody[op.res]
		case op.method == "PATCH":
			return fixtures[op.res.Kind].update
		}
		t.Fatalf("%s %s takes a body the test has none for", op.method, op.pattern)
		return nil
	}

	beforeA, beforeB := snapshot(t, e, a), snapshot(t, e, b)

	// What must never reach A: B's ids, account and principal, token, and the values unique to
	// B's objects (names, addresses, generated keys and certificates).
	marks := map[string]string{b.caller.AccountID: "B's account id", b.caller.Principal.ID: "B's admin id", b.token: "B's API key token"}
	for _, o := range beforeB {
		marks[o.id] = "the id of B's " + o.res.Kind
		for _, field := range []string{"domain", "addr", "cname_target", "acme_challenge_cname_target", "public_key", "certificate"} {
			if s, ok := o.doc[field].(string); ok && len(s) >= 8 {
				marks[s] = "the " + field + " of B's " + o.res.Kind
			}
		}
		if hp, ok := o.doc["hostports"].([]any); ok {
			for _, h := range hp {
				marks[h.(string)] = "a hostport of B's " + o.res.Kind
			}
		}
	}
	for _, o := range beforeA { // values both accounts share (the test PKI's keys) are not B's
		for m := range marks {
			if strings.Contains(o.raw, m) {
				delete(marks, m)
			}
		}
	}
	requests := 0
	// send makes a request as A and checks that the response carries nothing of B that the
	// request itself did not name.
	send := func(method, path string, body any) resp {
		t.Helper()
		requests++
		r := e.do(a.token, method, path, body)
		sent := path
		if body != nil {
			data, _ := json.Marshal(body)
			sent += string(data)
		}
		for m, what := range marks {
			if strings.Contains(string(r.raw), m) && !strings.Contains(sent, m) {
				t.Fatalf("%s %s: the response to account A shows %s (%s): %s", method, path, what, m, r.raw)
			}
			if strings.Contains(r.header.Get("Location"), m) {
				t.Fatalf("%s %s: a header shows %s", method, path, what)
			}
		}
		return r
	}

	// A's lists, including the routes of A's edges, and every object and module of A: nothing of B.
	for _, res := range ep.Resources {
		if res.Parent == nil {
			send("GET", res.Path, nil).must(t, 200)
			continue
		}
		for _, p := range objectsOf(beforeA, res.Parent) {
			send("GET", fill(res.Path, p.id, ""), nil).must(t, 200)
		}
	}
	for _, o := range sortedObjects(beforeA) {
		send("GET", o.path, nil).must(t, 200)
	}

	// normalized is the part of an error body that must not tell B's ids from missing ones.
	normalized := func(r resp, ids ...string) string {
		msg := r.msg()
		for i, id := range ids {
			if id == "" {
				continue
			}
			msg = strings.ReplaceAll(msg, id, fmt.Sprintf("<id%d>", i))
		}
		return fmt.Sprintf("%d %v %s", r.status, r.body["error_code"], msg)
	}

	// Every operation with an id in its path, on B's objects and on missing ids.
	tried := map[string]int{}
	for _, op := range storedOps(t, e) {
		if !strings.Contains(op.pattern, "{") {
			continue
		}
		body := bodyOf(op)
		type target struct{ edge, id, what string }
		var targets []target
		var missingEdge, missingID string
		if op.res.Parent != nil {
			missingEdge, _ = ep.NewID(op.res.Parent.Prefix)
		}
		missingID, _ = ep.NewID(op.res.Prefix)
		nested := op.res.Parent != nil
		switch {
		case nested && !strings.Contains(op.pattern, "{id}"): // the routes of an edge
			for _, edge := range objectsOf(beforeB, op.res.Parent) {
				targets = append(targets, target{edge.id, "", "B's edge"})
			}
		case nested:
			for _, o := range objectsOf(beforeB, op.res) {
				targets = append(targets, target{o.parent, o.id, "B's route under B's edge"})
				if as := objectsOf(beforeA, op.res.Parent); len(as) > 0 {
					targets = append(targets, target{as[0].id, o.id, "B's route under A's edge"})
				}
			}
			for _, o := range objectsOf(beforeA, op.res) {
				if bs := objectsOf(beforeB, op.res.Parent); len(bs) > 0 {
					targets = append(targets, target{bs[0].id, o.id, "A's route under B's edge"})
				}
				break
			}
		default:
			for _, o := range objectsOf(beforeB, op.res) {
				targets = append(targets, target{"", o.id, "B's " + op.res.Kind})
			}
		}
		if len(targets) == 0 {
			t.Fatalf("%s %s: account B has no object to try it on", op.method, op.pattern)
		}
		missing := send(op.method, fill(op.pattern, missingEdge, missingID), body)
		missing.wantError(t, 404, ep.CodeNotFound)
		for _, tg := range targets {
			path := fill(op.pattern, tg.edge, tg.id)
			r := send(op.method, path, body)
			if r.status != 404 {
				t.Fatalf("%s %s (%s) as account A: status %d, want 404: %s", op.method, path, tg.what, r.status, r.raw)
			}
			r.wantError(t, 404, ep.CodeNotFound)
			if got, want := normalized(r, tg.edge, tg.id), normalized(missing, missingEdge, missingID); got != want {
				t.Fatalf("%s %s (%s): the answer differs from the one for a missing id:\n got %s\nwant %s", op.method, path, tg.what, got, want)
			}
			tried[op.method]++
		}
	}
	for _, m := range []string{"GET", "PATCH", "DELETE", "PUT", "POST"} {
		if tried[m] == 0 {
			t.Errorf("no %s operation was tried on B's ids", m)
		}
	}

	// Bodies that name B's objects are refused as if they named missing ones.
	first := func(snap map[string]object, res *ep.Resource) object {
		t.Helper()
		os := objectsOf(snap, res)
		if len(os) == 0 {
			t.Fatalf("no %s in the account", res.Kind)
		}
		return os[0]
	}
	aTLSEdge, aHTTPSEdge := first(beforeA, ep.TLSEdges), first(beforeA, ep.HTTPSEdges)
	aRoute, aDomain := first(beforeA, ep.HTTPSEdgeRoutes), first(beforeA, ep.ReservedDomains)
	bDomain, bAddr := first(beforeB, ep.ReservedDomains).doc["domain"].(string), first(beforeB, ep.ReservedAddrs).doc["addr"].(string)
	sshKey := testPKI(t).sshEd25519
	refs := []struct {
		method, path string
		res          *ep.Resource // the collection of the named object
		body         func(id string) any
	}{
		{"POST", "/ip_policy_rules", ep.IPPolicies, func(id string) any {
			return map[string]any{"ip_policy_id": id, "cidr": "10.0.0.0/8", "action": "allow"}
		}},
		{"POST", "/ssh_user_certificates", ep.SSHCertificateAuthorities, func(id string) any {
			return map[string]any{"ssh_certificate_authority_id": id, "public_key": sshKey}
		}},
		{"POST", "/ssh_host_certificates", ep.SSHCertificateAuthorities, func(id string) any {
			return map[string]any{"ssh_certificate_authority_id": id, "public_key": sshKey}
		}},
		{"POST", "/backends/failover", ep.StaticBackends, func(id string) any { return map[string]any{"backends": []any{id}} }},
		{"POST", "/backends/weighted", ep.StaticBackends, func(id string) any { return map[string]any{"backends": map[string]any{id: 1}} }},
		{"POST", "/reserved_domains", ep.TLSCertificates, func(id string) any {
			return map[string]any{"domain": freshDomain("iso"), "certificate_id": id}
		}},
		{"PATCH", aDomain.path, ep.TLSCertificates, func(id string) any { return map[string]any{"certificate_id": id} }},
		{"POST", "/api_keys", ep.BotUsers, func(id string) any { return map[string]any{"owner_id": id} }},
		{"POST", "/credentials", ep.BotUsers, func(id string) any { return map[string]any{"owner_id": id} }},
		{"PUT", aTLSEdge.path + "/backend", ep.StaticBackends, func(id string) any { return map[string]any{"backend_id": id} }},
		{"PUT", aTLSEdge.path + "/ip_restriction", ep.IPPolicies, func(id string) any { return map[string]any{"ip_policy_ids": []any{id}} }},
		{"PUT", aHTTPSEdge.path + "/mutual_tls", ep.CertificateAuthorities, func(id string) any {
			return map[string]any{"certificate_authority_ids": []any{id}}
		}},
		{"PUT", aRoute.path + "/backend", ep.FailoverBackends, func(id string) any { return map[string]any{"backend_id": id} }},
		{"PATCH", aRoute.path, ep.IPPolicies, func(id string) any {
			return map[string]any{"ip_restriction": map[string]any{"ip_policy_ids": []any{id}}}
		}},
		{"POST", "/edges/tcp", ep.WeightedBackends, func(id string) any { return map[string]any{"backend": map[string]any{"backend_id": id}} }},
	}
	for _, rf := range refs {
		missingID, _ := ep.NewID(rf.res.Prefix)
		missing := send(rf.method, rf.path, rf.body(missingID))
		if missing.status < 400 || missing.status > 499 {
			t.Fatalf("%s %s naming a missing %s: status %d: %s", rf.method, rf.path, rf.res.Kind, missing.status, missing.raw)
		}
		for _, o := range objectsOf(beforeB, rf.res) {
			r := send(rf.method, rf.path, rf.body(o.id))
			if got, want := normalized(r, o.id), normalized(missing, missingID); got != want {
				t.Fatalf("%s %s naming B's %s: the answer differs from the one for a missing object:\n got %s\nwant %s",
					rf.method, rf.path, rf.res.Kind, got, want)
			}
		}
	}
	// B's reserved names, as hostports of A's edges, are refused like names nobody reserved.
	for _, c := range []struct{ path, mine, nobodys string }{
		{"/edges/tls", bDomain + ":443", freshDomain("nobody") + ":443"},
		{"/edges/https", bDomain + ":443", freshDomain("nobody") + ":443"},
		{"/edges/tcp", bAddr, "9.tcp.edgeplane.app:" + strings.Split(bAddr, ":")[1]},
	} {
		r := send("POST", c.path, map[string]any{"hostports": []any{c.mine}})
		n := send("POST", c.path, map[string]any{"hostports": []any{c.nobodys}})
		host := func(hp string) string { return hp[:strings.LastIndex(hp, ":")] }
		if r.status < 400 || normalized(r, c.mine, host(c.mine)) != normalized(n, c.nobodys, host(c.nobodys)) {
			t.Fatalf("POST %s with B's hostport %s: %s; with a hostport nobody reserved: %s", c.path, c.mine, r.raw, n.raw)
		}
	}

	// Nothing changed in either account.
	for name, c := range map[string]struct {
		acct   account
		before map[string]object
	}{"A": {a, beforeA}, "B": {b, beforeB}} {
		after := snapshot(t, e, c.acct)
		var diffs []string
		for p, o := range c.before {
			if n, ok := after[p]; !ok {
				diffs = append(diffs, "deleted "+p)
			} else if n.raw != o.raw {
				diffs = append(diffs, "changed "+p+"\n  before "+o.raw+"\n  after  "+n.raw)
			}
		}
		for p := range after {
			if _, ok := c.before[p]; !ok {
				diffs = append(diffs, "created "+p)
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 0 {
			t.Errorf("account %s changed:\n%s", name, strings.Join(diffs, "\n"))
		}
	}
	if len(marks) < len(beforeB) {
		t.Fatalf("only %d values of B to look for, fewer than B's %d objects", len(marks), len(beforeB))
	}
	t.Logf("%d requests as account A; %d objects in B, %d values of B looked for; operations tried on B's ids by method: %v",
		requests, len(beforeB), len(marks), tried)
}
