package console

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testpki"
)

// Every module of the API's table can be turned on and off from the console: each field of its
// request is a field of its answer, or a reference the answer shows as a Ref (backend_id from
// backend) or a list of Refs (ip_policy_ids from ip_policies). A module added to the table
// with another shape fails here.
func TestEveryModuleRequestCanBeRebuiltFromItsAnswer(t *testing.T) {
	for _, m := range ep.Modules {
		if m.NewRequest == nil {
			continue
		}
		answer := map[string]bool{}
		for _, f := range jsonFields(m.Response) {
			answer[f] = true
		}
		for _, f := range jsonFields(reflect.TypeOf(m.NewRequest())) {
			base := strings.TrimSuffix(strings.TrimSuffix(f, "_ids"), "_id")
			ok := answer[f] ||
				(strings.HasSuffix(f, "_id") && answer[base]) ||
				(strings.HasSuffix(f, "_ids") && (answer[base+"s"] || answer[strings.TrimSuffix(base, "y")+"ies"]))
			if !ok {
				t.Errorf("%s/%s: the request field %q has no counterpart in the module's answer", m.Parent.Path, m.Name, f)
			}
		}
	}
}

// Turning modules off and on through the console changes their enabled flag and nothing else,
// references, secrets the API hides and secrets it shows included.
func TestToggleModules(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	tok := a.token
	e.must(tok, "POST", "/reserved_domains", map[string]any{"domain": "mods.example.com"}, 201)
	policy := e.must(tok, "POST", "/ip_policies", map[string]any{}, 201)
	caPEM, _ := testpki.SelfSignedPEM(t, "console test CA", true)
	ca := e.must(tok, "POST", "/certificate_authorities", map[string]any{"ca_pem": caPEM}, 201)
	group := e.must(tok, "POST", "/backends/tunnel_group", map[string]any{"labels": map[string]string{"app": "mods"}}, 201)
	edge := e.must(tok, "POST", "/edges/https", map[string]any{"hostports": []string{"mods.example.com:443"},
		"mutual_tls": map[string]any{"certificate_authority_ids": []string{ca}}}, 201)
	route := e.must(tok, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend":              map[string]any{"backend_id": group},
		"ip_restriction":       map[string]any{"ip_policy_ids": []string{policy}},
		"webhook_verification": map[string]any{"provider": "github", "secret": "shown-secret"},
		"oidc": map[string]any{"issuer": "https://issuer.example.com", "client_id": "client", "client_secret": "hidden-secret",
			"scopes": []string{"openid"}},
		"request_headers": map[string]any{"add": map[string]string{"X-A": "1"}, "remove": []string{"X-B"}},
		"circuit_breaker": map[string]any{"error_threshold_percentage": 0.5},
	}, 201)
	b := e.browser()
	b.signin(tok)
	page := b.get(Prefix + "edges")
	for _, want := range []string{"mutual_tls", "ip_restriction", "webhook_verification", "oidc", "request_headers", "circuit_breaker", "tunnels labeled app=mods"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the edges page does not show %q", want)
		}
	}
	if strings.Contains(page.body, "shown-secret") || strings.Contains(page.body, "hidden-secret") {
		t.Error("the edges page shows a module's secret")
	}
	type owner struct{ parent, path string }
	routePath := "/edges/https/" + edge + "/routes/" + route
	for _, c := range []struct {
		owner
		module string
	}{
		{owner{"https_edge", "/edges/https/" + edge}, "mutual_tls"},
		{owner{"https_edge_route", routePath}, "backend"},
		{owner{"https_edge_route", routePath}, "ip_restriction"},
		{owner{"https_edge_route", routePath}, "webhook_verification"},
		{owner{"https_edge_route", routePath}, "oidc"},
		{owner{"https_edge_route", routePath}, "request_headers"},
		{owner{"https_edge_route", routePath}, "circuit_breaker"},
	} {
		var before map[string]any
		e.api(tok, "GET", c.path+"/"+c.module, nil, &before)
		form := url.Values{"parent": {c.parent}, "edge": {edge}, "module": {c.module}}
		if c.parent == "https_edge_route" {
			form.Set("route", route)
		}
		for _, on := range []bool{false, true} {
			form.Set("on", map[bool]string{true: "true", false: "false"}[on])
			r := b.post(Prefix+"modules", form)
			if r.StatusCode != 303 {
				t.Fatalf("turn %s %v: %d\n%.1500s", c.module, on, r.StatusCode, r.body)
			}
			var after map[string]any
			e.api(tok, "GET", c.path+"/"+c.module, nil, &after)
			want := map[string]any{}
			for k, v := range before {
				want[k] = v
			}
			want["enabled"] = on
			if !reflect.DeepEqual(after, want) {
				a, _ := json.Marshal(after)
				w, _ := json.Marshal(want)
				t.Errorf("%s turned %v:\n got  %s\n want %s", c.module, on, a, w)
			}
		}
	}
	// The hidden client secret was kept through the round trips: the data plane's snapshot, which
	// opens module secrets, still has it.
	snap, err := e.st.Snapshot(t.Context(), a.id)
	if err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, d := range snap.ByKind[ep.HTTPSEdgeRoutes] {
		if oidc := d.(*ep.HTTPSEdgeRoute).OIDC; oidc != nil && oidc.ClientSecret != nil && *oidc.ClientSecret == "hidden-secret" {
			kept = true
		}
	}
	if !kept {
		t.Fatal("the OIDC client secret was lost turning the module off and on")
	}
	for name, form := range map[string]url.Values{
		"an unknown parent":      {"parent": {"api_key"}, "edge": {edge}, "module": {"backend"}, "on": {"false"}},
		"an unknown module":      {"parent": {"https_edge"}, "edge": {edge}, "module": {"compression"}, "on": {"false"}},
		"a route without its id": {"parent": {"https_edge_route"}, "edge": {edge}, "module": {"backend"}, "on": {"false"}},
		"an id with a slash":     {"parent": {"https_edge"}, "edge": {edge + "/../x"}, "module": {"mutual_tls"}, "on": {"false"}},
	} {
		if r := b.post(Prefix+"modules", form); r.StatusCode != 400 {
			t.Errorf("module form with %s: %d, want 400", name, r.StatusCode)
		}
	}
}
