package server_test

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
)

// connDoc is an on_tcp_connect traffic policy of n expressions; tag makes documents of one size
// differ (each is a stage of its own).
func connDoc(n int, tag string) string {
	return `on_tcp_connect: [{name: "` + tag + `", actions: [{type: deny}], expressions: [` +
		strings.TrimSuffix(strings.Repeat(`"true",`, n), ",") + `]}]`
}

// TestPolicyBudgetOnWrite: a traffic policy that fits the account's budget alone but not beside
// the account's older ones is refused on write (400 ERR_NGROK_215 on traffic_policy, naming the
// limit), on an edge's create, its module PUT and a route's module PUT, and nothing is written;
// the same document again costs nothing more (one stage), a disabled one costs nothing, another
// account's budget is its own; replacing or deleting a policy (or the edge holding its route)
// frees its share. On every engine of the test run.
func TestPolicyBudgetOnWrite(t *testing.T) {
	big := 0
	for n := 100; ep.TrafficPolicyCost(connDoc(n, "x")) < ep.MaxAccountPolicyCost*6/10; n += 100 {
		big = n
	}
	if len(connDoc(big, "x")) > ep.MaxTrafficPolicyBytes || 2*ep.TrafficPolicyCost(connDoc(big, "x")) <= ep.MaxAccountPolicyCost {
		t.Fatalf("a document of %d expressions: %d bytes, cost %d: two must not fit", big, len(connDoc(big, "x")), ep.TrafficPolicyCost(connDoc(big, "x")))
	}
	docA, docB, docC := connDoc(big, "a"), connDoc(big, "b"), connDoc(big, "c")
	policy := func(doc string) map[string]any { return map[string]any{"traffic_policy": map[string]any{"value": doc}} }
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			e := newEnvOn(t, engine, server.Config{})
			a, b := e.admin, e.newAccount("team-b")
			first := e.do(a.token, "POST", "/edges/tls", policy(docA)).must(t, 201).str("id")
			refused := func(r resp, what string) {
				t.Helper()
				r.wantError(t, 400, ep.CodeInvalid)
				wantErrField(t, r, "traffic_policy")
				if !strings.Contains(r.msg(), "MaxAccountPolicyCost") {
					t.Errorf("%s: the message does not name the limit: %s", what, r.msg())
				}
			}
			refused(e.do(a.token, "POST", "/edges/tls", policy(docB)), "a second document")
			if n := len(e.do(a.token, "GET", "/edges/tls", nil).must(t, 200).items(t, "tls_edges")); n != 1 {
				t.Fatalf("the refused create left %d TLS edges, want 1", n)
			}
			shared := e.do(a.token, "POST", "/edges/tls", policy(docA)).must(t, 201).str("id")
			e.do(a.token, "POST", "/edges/tls", map[string]any{"traffic_policy": map[string]any{"value": docB, "enabled": false}}).must(t, 201)
			e.do(b.token, "POST", "/edges/tls", policy(docB)).must(t, 201)

			k := edgeKit{e, a}
			edge := k.tcpEdge()
			refused(e.do(a.token, "PUT", "/edges/tcp/"+edge+"/traffic_policy", map[string]any{"value": docB}), "a TCP edge's module")
			https := k.httpsEdge()
			route := k.route(https)
			routePath := "/edges/https/" + https + "/routes/" + route + "/traffic_policy"
			httpDoc := strings.Replace(docB, "on_tcp_connect", "on_http_request", 1)
			refused(e.do(a.token, "PUT", routePath, map[string]any{"value": httpDoc}), "a route's module")
			if r := e.do(a.token, "GET", routePath, nil); r.status != 404 && r.str("value") != "" {
				t.Fatalf("the refused PUT left the route's traffic_policy: %d %s", r.status, r.raw)
			}

			// Replacing the first edge's policy with a small one does not free docA's share: the
			// other edge still uses it; deleting that edge then does.
			e.do(a.token, "PUT", "/edges/tls/"+first+"/traffic_policy", map[string]any{"value": connDoc(1, "small")}).must(t, 200)
			refused(e.do(a.token, "PUT", routePath, map[string]any{"value": httpDoc}), "while a shared document is in use")
			e.do(a.token, "DELETE", "/edges/tls/"+shared, nil).must(t, 204)
			e.do(a.token, "PUT", routePath, map[string]any{"value": httpDoc}).must(t, 200)
			refused(e.do(a.token, "POST", "/edges/tls", policy(docC)), "beside the route's")
			// Deleting the HTTPS edge takes its route, and the route's share, with it.
			e.do(a.token, "DELETE", "/edges/https/"+https, nil).must(t, 204)
			e.do(a.token, "POST", "/edges/tls", policy(docC)).must(t, 201)
		})
	}
}
