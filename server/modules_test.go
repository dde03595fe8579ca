package server_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// --- fixtures of the module table ----------------------------------------------------------------

// moduleFixtures holds a valid PUT body for every module of the module table that can be PUT,
// keyed "<parent kind>/<module name>" ("tls_edge/backend", "https_edge_route/circuit_breaker").
// TestEveryModuleHasFixture fails for a module table entry without one, and TestModuleLifecycle
// runs the whole module lifecycle for every entry that has one, so a new module gets its tests by
// adding one line here.
//
// String values that name another object are placeholders, replaced at run time by the id of an
// object created for the test in the caller's account (anywhere in the body, in lists too):
//
//	"$backend"   a static backend
//	"$ip_policy" an IP policy
//	"$ca"        a certificate authority
//
// A body should leave "enabled" out: the lifecycle test sets it itself.
var moduleFixtures = map[string]map[string]any{
	"tls_edge/backend":         {"backend_id": "$backend"},
	"tls_edge/ip_restriction":  {"ip_policy_ids": []any{"$ip_policy", "$ip_policy"}},
	"tls_edge/mutual_tls":      {"certificate_authority_ids": []any{"$ca"}},
	"tls_edge/tls_termination": {"terminate_at": "edge", "min_version": "1.3"},
	"tls_edge/traffic_policy":  {"value": `{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}`},

	"https_edge/mutual_tls":      {"certificate_authority_ids": []any{"$ca", "$ca"}},
	"https_edge/tls_termination": {"min_version": "1.1"},

	"tcp_edge/backend":        {"backend_id": "$backend"},
	"tcp_edge/ip_restriction": {"ip_policy_ids": []any{"$ip_policy"}},
	"tcp_edge/traffic_policy": {"value": "on_tcp_connect:\n  - actions:\n      - type: deny\n"},

	"https_edge_route/backend":        {"backend_id": "$backend"},
	"https_edge_route/ip_restriction": {"ip_policy_ids": []any{"$ip_policy"}},
	"https_edge_route/circuit_breaker": {"tripped_duration": 30, "rolling_window": 60, "num_buckets": 20,
		"volume_threshold": 50, "error_threshold_percentage": 0.25},
	"https_edge_route/compression":             {},
	"https_edge_route/request_headers":         {"add": map[string]any{"X-Edge": "edgeplane", "X-Trace": "a b\tc"}, "remove": []any{"X-Internal"}},
	"https_edge_route/response_headers":        {"add": map[string]any{"Strict-Transport-Security": "max-age=63072000"}, "remove": []any{"Server", "X-Powered-By"}},
	"https_edge_route/webhook_verification":    {"provider": "github", "secret": "whsec_0123456789"},
	"https_edge_route/websocket_tcp_converter": {},
	"https_edge_route/traffic_policy":          {"value": "on_http_request:\n  - actions:\n      - type: custom-response\n        config:\n          status_code: 418\n"},
}

// authModuleNames are the route authentication modules another change adds (OAuth, SAML, OIDC,
// user agent filter, JWT validation). Their fixtures live in auth_modules_test.go, which
// registers them with registerModuleFixtures from an init function; until it does, the
// missing-fixture check skips them rather than failing on a module this file cannot know.
var authModuleNames = map[string]bool{"oauth": true, "saml": true, "oidc": true, "user_agent_filter": true, "jwt_validation": true}

// registerModuleFixtures adds PUT bodies to moduleFixtures, for test files of modules defined
// elsewhere (call it from an init function). Keys and placeholders are those of moduleFixtures;
// registering a key twice is a mistake and panics.
func registerModuleFixtures(m map[string]map[string]any) {
	for k, v := range m {
		if _, dup := moduleFixtures[k]; dup {
			panic("registerModuleFixtures: " + k + " is already registered")
		}
		moduleFixtures[k] = v
	}
}

// moduleResponseKeys are the exact keys of the response of the modules this file knows, by
// module name; a module without an entry is checked against its request fields only.
var moduleResponseKeys = map[string][]string{
	"backend":                 {"enabled", "backend"},
	"ip_restriction":          {"enabled", "ip_policies"},
	"mutual_tls":              {"enabled", "certificate_authorities"},
	"tls_termination":         {"enabled", "terminate_at", "min_version"},
	"traffic_policy":          {"enabled", "value"},
	"circuit_breaker":         {"enabled", "tripped_duration", "rolling_window", "num_buckets", "volume_threshold", "error_threshold_percentage"},
	"compression":             {"enabled"},
	"websocket_tcp_converter": {"enabled"},
	"request_headers":         {"enabled", "add", "remove"},
	"response_headers":        {"enabled", "add", "remove"},
	"webhook_verification":    {"enabled", "provider", "secret"},
}

func moduleKey(m *ep.Module) string { return m.Parent.Kind + "/" + m.Name }

// TestEveryModuleHasFixture fails for a module table entry that can be PUT but has no fixture.
// The delete-only parts of reserved domains are covered by TestReservedDomainDetach.
func TestEveryModuleHasFixture(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range ep.Modules {
		key := moduleKey(m)
		if seen[key] {
			t.Errorf("module %s is in the module table twice", key)
		}
		seen[key] = true
		if !m.Ops.Has(ep.OpUpdate) {
			continue
		}
		if _, ok := moduleFixtures[key]; ok {
			continue
		}
		if authModuleNames[m.Name] {
			t.Logf("module %s has no fixture yet; auth_modules_test.go registers it", key)
			continue
		}
		t.Errorf("module %s has no fixture in moduleFixtures (modules_test.go): add a valid PUT body so it gets lifecycle tests", key)
	}
	for key := range moduleFixtures {
		if !seen[key] {
			t.Errorf("moduleFixtures has %s, which is not in the module table", key)
		}
	}
}

// --- helpers -----------------------------------------------------------------------------------

// edgeKit creates the objects edge and module tests need in one account.
type edgeKit struct {
	e *env
	a account
}

func (k edgeKit) post(path string, body any) resp {
	k.e.t.Helper()
	return k.e.do(k.a.token, "POST", path, body).must(k.e.t, 201)
}

func (k edgeKit) domain() string { k.e.t.Helper(); return reserve(k.e, k.a) }

func (k edgeKit) tlsEdge() string {
	k.e.t.Helper()
	return k.post("/edges/tls", map[string]any{"hostports": []any{k.domain() + ":443"}}).str("id")
}

func (k edgeKit) httpsEdge() string {
	k.e.t.Helper()
	return k.post("/edges/https", map[string]any{"hostports": []any{k.domain() + ":443"}}).str("id")
}

func (k edgeKit) tcpEdge() string {
	k.e.t.Helper()
	return k.post("/edges/tcp", map[string]any{"hostports": []any{reserveAddr(k.e, k.a)}}).str("id")
}

func (k edgeKit) route(edgeID string) string {
	k.e.t.Helper()
	return k.post("/edges/https/"+edgeID+"/routes", map[string]any{"match_type": "path_prefix", "match": routeMatch()}).str("id")
}

func (k edgeKit) backend() string { k.e.t.Helper(); return staticBackend(k.e, k.a) }

func (k edgeKit) ipPolicy() string {
	k.e.t.Helper()
	return k.post("/ip_policies", map[string]any{}).str("id")
}

func (k edgeKit) ca() string {
	k.e.t.Helper()
	return k.post("/certificate_authorities", map[string]any{"ca_pem": testPKI(k.e.t).root.pem}).str("id")
}

// moduleParent is a new parent object of a module.
type moduleParent struct {
	path   string // the parent's object path: /edges/tls/{id}, /edges/https/{edge}/routes/{id}
	id     string
	edgeID string // the edge of a route, "" otherwise
	prefix string // id prefix of the parent
}

// parent creates a parent of the kind a module hangs on: an edge with a reserved hostport, or a
// route under a new HTTPS edge.
func (k edgeKit) parent(res *ep.Resource) moduleParent {
	k.e.t.Helper()
	switch res {
	case ep.TLSEdges:
		id := k.tlsEdge()
		return moduleParent{path: "/edges/tls/" + id, id: id, prefix: res.Prefix}
	case ep.HTTPSEdges:
		id := k.httpsEdge()
		return moduleParent{path: "/edges/https/" + id, id: id, prefix: res.Prefix}
	case ep.TCPEdges:
		id := k.tcpEdge()
		return moduleParent{path: "/edges/tcp/" + id, id: id, prefix: res.Prefix}
	case ep.HTTPSEdgeRoutes:
		edge := k.httpsEdge()
		id := k.route(edge)
		return moduleParent{path: "/edges/https/" + edge + "/routes/" + id, id: id, edgeID: edge, prefix: res.Prefix}
	}
	k.e.t.Fatalf("no way to build a parent of kind %s: teach edgeKit.parent", res.Kind)
	return moduleParent{}
}

// expand returns a deep copy of a fixture body in which placeholders are replaced by the ids of
// new objects of the account, one object per occurrence (so lists hold distinct ids).
func (k edgeKit) expand(body map[string]any) map[string]any {
	k.e.t.Helper()
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			if !strings.HasPrefix(x, "$") {
				return x
			}
			var id string
			switch x {
			case "$backend":
				id = k.backend()
			case "$ip_policy":
				id = k.ipPolicy()
			case "$ca":
				id = k.ca()
			default:
				k.e.t.Fatalf("unknown fixture placeholder %q", x)
			}
			return id
		case []any:
			out := make([]any, len(x))
			for i := range x {
				out[i] = walk(x[i])
			}
			return out
		case map[string]any:
			out := make(map[string]any, len(x))
			for kk, vv := range x {
				out[kk] = walk(vv)
			}
			return out
		}
		return v
	}
	return walk(body).(map[string]any)
}

// normJSON round-trips v through JSON, so Go ints compare equal to decoded float64s.
func normJSON(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonSubset reports whether every member of want is in got with an equal value; objects may
// have more members in got, arrays must have the same length.
func jsonSubset(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok || !jsonSubset(gv, v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !jsonSubset(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// refJSON is the wire form of a Ref to id.
func refJSON(e *env, id string) map[string]any {
	return map[string]any{"id": id, "uri": e.base + ep.PathOf(id)}
}

// refField is the response field of an id field of a request shape: backend_id -> backend,
// ip_policy_ids -> ip_policies, certificate_authority_ids -> certificate_authorities.
func refField(field string) (name string, list, ok bool) {
	if s, cut := strings.CutSuffix(field, "_ids"); cut {
		if y, cut := strings.CutSuffix(s, "y"); cut {
			return y + "ies", true, true
		}
		return s + "s", true, true
	}
	if s, cut := strings.CutSuffix(field, "_id"); cut {
		return s, false, true
	}
	return "", false, false
}

// isObjectRef reports whether the value of an id field names objects of edgeplane (a field like
// oidc's client_id is an id of something else, and is shown as it is).
func isObjectRef(v any, list bool) bool {
	vals := []any{v}
	if list {
		l, ok := v.([]any)
		if !ok {
			return false
		}
		vals = l
	}
	for _, x := range vals {
		if s, ok := x.(string); !ok || ep.PathOf(s) == "" {
			return false
		}
	}
	return true
}

// writeOnly removes the client secrets from want, a module's request normalized, after checking
// that got, the response, shows each as null: the API never returns them.
func writeOnly(t *testing.T, path string, want, got map[string]any) {
	t.Helper()
	for k, v := range want {
		if k == "client_secret" {
			if g, ok := got[k]; !ok || g != nil {
				t.Fatalf("%s: client_secret = %v (present %v), want null: the API never returns it", path, g, ok)
			}
			delete(want, k)
			continue
		}
		if wm, ok := v.(map[string]any); ok {
			if gm, ok := got[k].(map[string]any); ok {
				writeOnly(t, path+"."+k, wm, gm)
			}
		}
	}
}

// checkModuleResponse asserts the response of a module built from req: enabled as requested
// (true when absent or null), every id field shown as Refs with id and uri, every other request
// field shown with its value (client secrets: null), and, for the modules this file knows,
// exactly the documented keys.
func checkModuleResponse(t *testing.T, e *env, name string, req map[string]any, got map[string]any) {
	t.Helper()
	want := normJSON(t, req).(map[string]any)
	writeOnly(t, name, want, got)
	wantEnabled := true
	if v, ok := want["enabled"].(bool); ok {
		wantEnabled = v
	}
	if got["enabled"] != wantEnabled {
		t.Fatalf("%s: enabled = %v, want %v: %v", name, got["enabled"], wantEnabled, got)
	}
	for field, v := range want {
		if field == "enabled" {
			continue
		}
		if ref, list, ok := refField(field); ok && isObjectRef(v, list) {
			var w any
			if list {
				refs := []any{}
				for _, id := range v.([]any) {
					refs = append(refs, refJSON(e, id.(string)))
				}
				w = refs
			} else {
				w = refJSON(e, v.(string))
			}
			if !reflect.DeepEqual(got[ref], w) {
				t.Fatalf("%s: %s = %v, want Refs %v (from %s)", name, ref, got[ref], w, field)
			}
			if _, shown := got[field]; shown {
				t.Fatalf("%s: the response shows the request field %s: %v", name, field, got)
			}
			continue
		}
		gv, ok := got[field]
		if !ok {
			t.Fatalf("%s: the response has no %s: %v", name, field, got)
		}
		if !jsonSubset(gv, v) {
			t.Fatalf("%s: %s = %v, want %v", name, field, gv, v)
		}
	}
	if keys, ok := moduleResponseKeys[name]; ok {
		var have []string
		for k := range got {
			have = append(have, k)
		}
		sort.Strings(have)
		w := append([]string(nil), keys...)
		sort.Strings(w)
		if !reflect.DeepEqual(have, w) {
			t.Fatalf("%s: response keys %v, want %v", name, have, w)
		}
	}
}

// sameJSON compares two decoded bodies.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// --- the generic module lifecycle ----------------------------------------------------------------

// TestModuleLifecycle runs, for every module of the module table with a fixture: PUT, GET, the
// parent showing it, the three body shapes, enabled defaults, body errors, another account, and
// DELETE with the parent showing null afterwards.
func TestModuleLifecycle(t *testing.T) {
	e := newEnv(t)
	a := e.newAccount("modules")
	other := e.newAccount("modules-other")
	for _, m := range ep.Modules {
		fx, ok := moduleFixtures[moduleKey(m)]
		if !ok || !m.Ops.Has(ep.OpUpdate) {
			continue
		}
		t.Run(moduleKey(m), func(t *testing.T) {
			e.t = t
			k := edgeKit{e, a}
			p := k.parent(m.Parent)
			body := k.expand(fx)
			path := p.path + "/" + m.Name

			parentShows := func(want any) {
				t.Helper()
				pb := e.do(a.token, "GET", p.path, nil).must(t, 200)
				v, present := pb.body[m.Name]
				if !present {
					t.Fatalf("parent has no %s field: %s", m.Name, pb.raw)
				}
				sameJSON(t, "parent's "+m.Name, v, want)
				if p.edgeID == "" {
					return
				}
				// The edge embeds the route with its modules.
				edge := e.do(a.token, "GET", "/edges/https/"+p.edgeID, nil).must(t, 200)
				routes := edge.items(t, "routes")
				if len(routes) != 1 || routes[0]["id"] != p.id {
					t.Fatalf("edge does not show its route %s: %s", p.id, edge.raw)
				}
				sameJSON(t, "edge's route's "+m.Name, routes[0][m.Name], want)
			}

			// Not configured yet.
			e.do(a.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
			e.do(a.token, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)
			parentShows(nil)

			put := e.do(a.token, "PUT", path, body).must(t, 200)
			checkModuleResponse(t, e, m.Name, body, put.body)
			sameJSON(t, "GET after PUT", e.do(a.token, "GET", path, nil).must(t, 200).body, put.body)
			parentShows(put.body)

			// The three body shapes give the same module.
			echo := map[string]any{"id": p.id, "module": body}
			if p.edgeID != "" {
				echo["edge_id"] = p.edgeID
			}
			for _, shape := range []any{body, map[string]any{"module": body}, echo, merge(body, map[string]any{"id": p.id})} {
				r := e.do(a.token, "PUT", path, shape).must(t, 200)
				sameJSON(t, fmt.Sprintf("PUT %v", shape), r.body, put.body)
			}

			// enabled: absent or null means true; false is kept; PUT replaces it wholly.
			off := e.do(a.token, "PUT", path, merge(body, map[string]any{"enabled": false})).must(t, 200)
			checkModuleResponse(t, e, m.Name, merge(body, map[string]any{"enabled": false}), off.body)
			sameJSON(t, "GET of a disabled module", e.do(a.token, "GET", path, nil).must(t, 200).body, off.body)
			parentShows(off.body)
			on := e.do(a.token, "PUT", path, map[string]any{"module": merge(body, map[string]any{"enabled": nil})}).must(t, 200)
			sameJSON(t, `PUT with "enabled": null`, on.body, put.body)
			e.do(a.token, "PUT", path, merge(body, map[string]any{"enabled": false})).must(t, 200)
			sameJSON(t, "PUT without enabled after a disabled one", e.do(a.token, "PUT", path, body).must(t, 200).body, put.body)

			// Body errors change nothing.
			wrongID, _ := ep.NewID(p.prefix)
			e.do(a.token, "PUT", path, map[string]any{"id": wrongID, "module": body}).wantError(t, 400, ep.CodeInvalid)
			e.do(a.token, "PUT", path, merge(body, map[string]any{"id": wrongID})).wantError(t, 400, ep.CodeInvalid)
			if p.edgeID != "" {
				wrongEdge, _ := ep.NewID(ep.HTTPSEdges.Prefix)
				e.do(a.token, "PUT", path, map[string]any{"id": p.id, "edge_id": wrongEdge, "module": body}).wantError(t, 400, ep.CodeInvalid)
			} else {
				e.do(a.token, "PUT", path, map[string]any{"id": p.id, "edge_id": "edghts_x", "module": body}).wantError(t, 400, ep.CodeInvalid)
			}
			r := e.do(a.token, "PUT", path, map[string]any{"module": body, "extra": 1}).wantError(t, 400, ep.CodeUnknownField)
			if !strings.Contains(r.msg(), `"extra"`) {
				t.Fatalf("message should name the extra key: %s", r.msg())
			}
			r = e.do(a.token, "PUT", path, merge(body, map[string]any{"no_such_field": 1})).wantError(t, 400, ep.CodeUnknownField)
			if !strings.Contains(r.msg(), `"no_such_field"`) || !strings.Contains(r.msg(), "enabled") {
				t.Fatalf("message should name the field and the supported ones: %s", r.msg())
			}
			e.do(a.token, "PUT", path, map[string]any{"module": merge(body, map[string]any{"no_such_field": 1})}).wantError(t, 400, ep.CodeUnknownField)
			e.do(a.token, "PUT", path, map[string]any{"enabled": "yes"}).wantError(t, 400, ep.CodeInvalid)
			e.do(a.token, "PUT", path, `{"enabled": true`).wantError(t, 400, ep.CodeBadJSON)
			e.do(a.token, "PUT", path, `[]`).wantError(t, 400, ep.CodeBadJSON)
			sameJSON(t, "GET after rejected PUTs", e.do(a.token, "GET", path, nil).must(t, 200).body, put.body)

			// Another account sees nothing and changes nothing; a missing parent is 404.
			e.do(other.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
			e.do(other.token, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)
			otherBody := edgeKit{e, other}.expand(fx)
			e.do(other.token, "PUT", path, otherBody).wantError(t, 404, ep.CodeNotFound)
			missing, _ := ep.NewID(p.prefix)
			e.do(a.token, "PUT", strings.TrimSuffix(p.path, p.id)+missing+"/"+m.Name, body).wantError(t, 404, ep.CodeNotFound)
			e.do(a.token, "GET", strings.TrimSuffix(p.path, p.id)+missing+"/"+m.Name, nil).wantError(t, 404, ep.CodeNotFound)
			sameJSON(t, "GET after another account's requests", e.do(a.token, "GET", path, nil).must(t, 200).body, put.body)

			// DELETE: 204 without a body; then 404 and null in the parent.
			del := e.do(a.token, "DELETE", path, nil).must(t, 204)
			if len(del.raw) != 0 {
				t.Fatalf("204 with a body: %q", del.raw)
			}
			e.do(a.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
			parentShows(nil)
			e.do(a.token, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)

			// And it can be configured again (generated fields, like a SAML module's signing
			// certificate, may be new).
			again := e.do(a.token, "PUT", path, body).must(t, 200)
			checkModuleResponse(t, e, m.Name, body, again.body)
			parentShows(again.body)
		})
	}
}

// --- module rules ------------------------------------------------------------------------------

// modulesNamed returns the module table entries with the name, on whatever parent.
func modulesNamed(name string) []*ep.Module {
	var out []*ep.Module
	for _, m := range ep.Modules {
		if m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// wantErrField asserts that the error names the field in details.field and its message starts with it.
func wantErrField(t *testing.T, r resp, field string) {
	t.Helper()
	details, _ := r.body["details"].(map[string]any)
	if details["field"] != field {
		t.Fatalf("details.field = %v, want %s: %s", details["field"], field, r.raw)
	}
	if !strings.HasPrefix(r.msg(), field) {
		t.Fatalf("message should start with %s: %s", field, r.msg())
	}
}

// TestModuleReferences: backend (6501), IP policies (7007) and CAs (7072) must exist in the
// caller's account, on every parent that has the module.
func TestModuleReferences(t *testing.T) {
	e := newEnv(t)
	a, other := e.admin, e.newAccount("refs-other")
	k, ko := edgeKit{e, a}, edgeKit{e, other}
	missingBackend, _ := ep.NewID(ep.StaticBackends.Prefix)
	missingPolicy, _ := ep.NewID(ep.IPPolicies.Prefix)
	missingCA, _ := ep.NewID(ep.CertificateAuthorities.Prefix)

	for _, m := range modulesNamed("backend") {
		t.Run(moduleKey(m), func(t *testing.T) {
			e.t = t
			path := k.parent(m.Parent).path + "/backend"
			for _, b := range []map[string]any{
				{}, {"backend_id": nil}, {"backend_id": ""}, {"backend_id": missingBackend},
				{"backend_id": ko.backend()}, {"backend_id": k.ipPolicy()}, {"backend_id": "not-an-id"},
			} {
				r := e.do(a.token, "PUT", path, b).wantError(t, 400, ep.CodeBackendMissing)
				wantErrField(t, r, "backend_id")
			}
			e.do(a.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
		})
	}
	for _, m := range modulesNamed("ip_restriction") {
		t.Run(moduleKey(m), func(t *testing.T) {
			e.t = t
			path := k.parent(m.Parent).path + "/ip_restriction"
			for _, b := range []map[string]any{
				{}, {"ip_policy_ids": []any{}}, {"ip_policy_ids": nil}, {"ip_policy_ids": []any{missingPolicy}},
				{"ip_policy_ids": []any{k.ipPolicy(), ko.ipPolicy()}}, {"ip_policy_ids": []any{k.backend()}},
			} {
				r := e.do(a.token, "PUT", path, b).wantError(t, 400, ep.CodeIPPolicyMissing)
				wantErrField(t, r, "ip_policy_ids")
			}
			p := k.ipPolicy()
			e.do(a.token, "PUT", path, map[string]any{"ip_policy_ids": []any{p, p}}).wantError(t, 400, ep.CodeInvalid)
			e.do(a.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
		})
	}
	for _, m := range modulesNamed("mutual_tls") {
		t.Run(moduleKey(m), func(t *testing.T) {
			e.t = t
			path := k.parent(m.Parent).path + "/mutual_tls"
			for _, b := range []map[string]any{
				{}, {"certificate_authority_ids": []any{}}, {"certificate_authority_ids": []any{missingCA}},
				{"certificate_authority_ids": []any{ko.ca()}}, {"certificate_authority_ids": []any{k.ipPolicy()}},
			} {
				r := e.do(a.token, "PUT", path, b).wantError(t, 400, ep.CodeCAMissing)
				wantErrField(t, r, "certificate_authority_ids")
			}
			e.do(a.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
		})
	}

	// Every kind of backend can be the backend of a module; its Ref points at its collection.
	t.Run("backend kinds", func(t *testing.T) {
		e.t = t
		path := k.parent(ep.HTTPSEdgeRoutes).path + "/backend"
		s := k.backend()
		for _, id := range []string{
			s,
			k.post("/backends/tunnel_group", map[string]any{"labels": map[string]any{"app": "web"}}).str("id"),
			k.post("/backends/http_response", map[string]any{"status_code": 204}).str("id"),
			k.post("/backends/failover", map[string]any{"backends": []any{s}}).str("id"),
			k.post("/backends/weighted", map[string]any{"backends": map[string]any{s: 1}}).str("id"),
		} {
			r := e.do(a.token, "PUT", path, map[string]any{"backend_id": id}).must(t, 200)
			sameJSON(t, "backend ref", r.body["backend"], refJSON(e, id))
			if !strings.Contains(r.body["backend"].(map[string]any)["uri"].(string), "/backends/") {
				t.Fatalf("backend uri %v", r.body["backend"])
			}
		}
	})

	// In an edge or route body the rule is the same, and the field names the module.
	t.Run("in bodies", func(t *testing.T) {
		e.t = t
		r := e.do(a.token, "POST", "/edges/tls", map[string]any{"hostports": []any{k.domain() + ":443"},
			"backend": map[string]any{"backend_id": missingBackend}}).wantError(t, 400, ep.CodeBackendMissing)
		wantErrField(t, r, "backend.backend_id")
		r = e.do(a.token, "POST", "/edges/tcp", map[string]any{"ip_restriction": map[string]any{"ip_policy_ids": []any{missingPolicy}}}).
			wantError(t, 400, ep.CodeIPPolicyMissing)
		wantErrField(t, r, "ip_restriction.ip_policy_ids")
		r = e.do(a.token, "PATCH", "/edges/https/"+k.httpsEdge(), map[string]any{"mutual_tls": map[string]any{"certificate_authority_ids": []any{missingCA}}}).
			wantError(t, 400, ep.CodeCAMissing)
		wantErrField(t, r, "mutual_tls.certificate_authority_ids")
		edge := k.httpsEdge()
		r = e.do(a.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "exact_path", "match": "/x",
			"backend": map[string]any{}}).wantError(t, 400, ep.CodeBackendMissing)
		wantErrField(t, r, "backend.backend_id")
		// The rejected create made no route, so its match is still free.
		k.post("/edges/https/"+edge+"/routes", map[string]any{"match_type": "exact_path", "match": "/x"})
	})
}

// TestDeletedReferenceKept: an IP policy or a CA that a module references can be deleted; the
// module keeps the Ref (and behaves as if the object had no rules or certificates).
func TestDeletedReferenceKept(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	for _, c := range []struct {
		module, field, ref, path string
		make                     func() string
	}{
		{"ip_restriction", "ip_policy_ids", "ip_policies", "/ip_policies/", k.ipPolicy},
		{"mutual_tls", "certificate_authority_ids", "certificate_authorities", "/certificate_authorities/", k.ca},
	} {
		t.Run(c.module, func(t *testing.T) {
			e.t = t
			edge := k.tlsEdge()
			kept, gone := c.make(), c.make()
			put := e.do(tok, "PUT", "/edges/tls/"+edge+"/"+c.module, map[string]any{c.field: []any{kept, gone}}).must(t, 200)
			e.do(tok, "DELETE", c.path+gone, nil).must(t, 204)
			e.do(tok, "GET", c.path+gone, nil).wantError(t, 404, ep.CodeNotFound)
			got := e.do(tok, "GET", "/edges/tls/"+edge+"/"+c.module, nil).must(t, 200)
			sameJSON(t, "module after deleting a referenced object", got.body, put.body)
			sameJSON(t, "refs", got.body[c.ref], []any{refJSON(e, kept), refJSON(e, gone)})
			sameJSON(t, "parent after deleting a referenced object", e.do(tok, "GET", "/edges/tls/"+edge, nil).must(t, 200).body[c.module], put.body)
			// The edge can still be changed, and the kept module is untouched by it.
			patched := e.do(tok, "PATCH", "/edges/tls/"+edge, map[string]any{"description": "still fine"}).must(t, 200)
			sameJSON(t, "module after PATCH", patched.body[c.module], put.body)
			// A new PUT must name existing objects only.
			code := ep.CodeIPPolicyMissing
			if c.module == "mutual_tls" {
				code = ep.CodeCAMissing
			}
			e.do(tok, "PUT", "/edges/tls/"+edge+"/"+c.module, map[string]any{c.field: []any{kept, gone}}).wantError(t, 400, code)
			e.do(tok, "PUT", "/edges/tls/"+edge+"/"+c.module, map[string]any{c.field: []any{kept}}).must(t, 200)
		})
	}
}

// TestTLSTerminationRules: terminate_at and min_version on TLS edges, and the at-edge variant on
// HTTPS edges.
func TestTLSTerminationRules(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	str := func(s string) *string { return &s }

	t.Run("tls_edge", func(t *testing.T) {
		e.t = t
		path := "/edges/tls/" + k.tlsEdge() + "/tls_termination"
		for _, c := range []struct {
			body   map[string]any
			at     string
			minVer *string
		}{
			{map[string]any{}, "edge", str("1.2")},
			{map[string]any{"terminate_at": "edge"}, "edge", str("1.2")},
			{map[string]any{"terminate_at": ""}, "edge", str("1.2")},
			{map[string]any{"terminate_at": nil, "min_version": nil}, "edge", str("1.2")},
			{map[string]any{"min_version": "1.0"}, "edge", str("1.0")},
			{map[string]any{"min_version": "1.3"}, "edge", str("1.3")},
			{map[string]any{"terminate_at": "upstream"}, "upstream", nil},
			{map[string]any{"terminate_at": "upstream", "min_version": nil}, "upstream", nil},
		} {
			r := e.do(tok, "PUT", path, c.body).must(t, 200)
			var want any
			if c.minVer != nil {
				want = *c.minVer
			}
			if r.body["terminate_at"] != c.at || r.body["min_version"] != want || r.body["enabled"] != true {
				t.Fatalf("PUT %v: %s", c.body, r.raw)
			}
			if v, present := r.body["min_version"]; !present && v == nil {
				t.Fatalf("min_version must be present (null with upstream): %s", r.raw)
			}
		}
		for _, c := range []struct {
			body  map[string]any
			code  int
			field string
		}{
			{map[string]any{"terminate_at": "middle"}, ep.CodeBadTerminateAt, "terminate_at"},
			{map[string]any{"terminate_at": "EDGE"}, ep.CodeBadTerminateAt, "terminate_at"},
			{map[string]any{"min_version": "1.4"}, ep.CodeUnsupportedTLSVersion, "min_version"},
			{map[string]any{"min_version": "1"}, ep.CodeUnsupportedTLSVersion, "min_version"},
			{map[string]any{"min_version": ""}, ep.CodeUnsupportedTLSVersion, "min_version"},
			{map[string]any{"min_version": "TLS1.2"}, ep.CodeUnsupportedTLSVersion, "min_version"},
			{map[string]any{"terminate_at": "upstream", "min_version": "1.2"}, ep.CodeUnsupportedTLSVersion, "min_version"},
			{map[string]any{"terminate_at": "upstream", "min_version": "1.3"}, ep.CodeUnsupportedTLSVersion, "min_version"},
		} {
			r := e.do(tok, "PUT", path, c.body).wantError(t, 400, c.code)
			wantErrField(t, r, c.field)
		}
		e.do(tok, "PUT", path, map[string]any{"min_version": 1.2}).wantError(t, 400, ep.CodeInvalid)
		// In an edge body too, with the module's name in front of the field.
		r := e.do(tok, "POST", "/edges/tls", map[string]any{"tls_termination": map[string]any{"terminate_at": "upstream", "min_version": "1.2"}}).
			wantError(t, 400, ep.CodeUnsupportedTLSVersion)
		wantErrField(t, r, "tls_termination.min_version")
		r = e.do(tok, "POST", "/edges/tls", map[string]any{"tls_termination": map[string]any{"terminate_at": "both"}}).
			wantError(t, 400, ep.CodeBadTerminateAt)
		wantErrField(t, r, "tls_termination.terminate_at")
		created := e.do(tok, "POST", "/edges/tls", map[string]any{"tls_termination": map[string]any{}}).must(t, 201)
		sameJSON(t, "default termination in a create body", created.body["tls_termination"],
			map[string]any{"enabled": true, "terminate_at": "edge", "min_version": "1.2"})
	})

	t.Run("https_edge", func(t *testing.T) {
		e.t = t
		edge := k.httpsEdge()
		path := "/edges/https/" + edge + "/tls_termination"
		r := e.do(tok, "PUT", path, map[string]any{}).must(t, 200)
		sameJSON(t, "at-edge default", r.body, map[string]any{"enabled": true, "terminate_at": "edge", "min_version": "1.2"})
		r = e.do(tok, "PUT", path, map[string]any{"min_version": "1.3", "enabled": false}).must(t, 200)
		sameJSON(t, "at-edge 1.3", r.body, map[string]any{"enabled": false, "terminate_at": "edge", "min_version": "1.3"})
		for _, at := range []any{"edge", "upstream", nil} {
			r := e.do(tok, "PUT", path, map[string]any{"terminate_at": at}).wantError(t, 400, ep.CodeUnknownField)
			if !strings.Contains(r.msg(), "terminate_at") {
				t.Fatalf("message should name terminate_at: %s", r.msg())
			}
		}
		wantErrField(t, e.do(tok, "PUT", path, map[string]any{"min_version": "1.5"}).wantError(t, 400, ep.CodeUnsupportedTLSVersion), "min_version")
		e.do(tok, "PATCH", "/edges/https/"+edge, map[string]any{"tls_termination": map[string]any{"terminate_at": "upstream"}}).
			wantError(t, 400, ep.CodeUnknownField)
		got := e.do(tok, "GET", "/edges/https/"+edge, nil).must(t, 200)
		sameJSON(t, "edge after rejected requests", got.body["tls_termination"], map[string]any{"enabled": false, "terminate_at": "edge", "min_version": "1.3"})
	})
}

// TestMutualTLSNeedsEdgeTermination: a TLS edge whose TLS passes through (terminate_at upstream)
// cannot have mutual TLS, whichever comes first and whichever way it is set (7062).
func TestMutualTLSNeedsEdgeTermination(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	upstream := map[string]any{"terminate_at": "upstream"}

	t.Run("mutual_tls after upstream", func(t *testing.T) {
		e.t = t
		edge := k.tlsEdge()
		e.do(tok, "PUT", "/edges/tls/"+edge+"/tls_termination", upstream).must(t, 200)
		r := e.do(tok, "PUT", "/edges/tls/"+edge+"/mutual_tls", map[string]any{"certificate_authority_ids": []any{k.ca()}}).
			wantError(t, 400, ep.CodeNeedsEdgeTermination)
		if !strings.Contains(r.msg(), "mutual_tls") {
			t.Fatalf("message should name mutual_tls: %s", r.msg())
		}
		e.do(tok, "GET", "/edges/tls/"+edge+"/mutual_tls", nil).wantError(t, 404, ep.CodeNotFound)
		e.do(tok, "PATCH", "/edges/tls/"+edge, map[string]any{"mutual_tls": map[string]any{"certificate_authority_ids": []any{k.ca()}}}).
			wantError(t, 400, ep.CodeNeedsEdgeTermination)
		if got := e.do(tok, "GET", "/edges/tls/"+edge, nil).must(t, 200); got.body["mutual_tls"] != nil {
			t.Fatalf("a refused mutual_tls was stored: %s", got.raw)
		}
		// Terminating at the edge again makes room for it, also in the same PATCH.
		e.do(tok, "PATCH", "/edges/tls/"+edge, map[string]any{"tls_termination": map[string]any{"terminate_at": "edge"},
			"mutual_tls": map[string]any{"certificate_authority_ids": []any{k.ca()}}}).must(t, 200)
	})

	t.Run("upstream after mutual_tls", func(t *testing.T) {
		e.t = t
		edge := k.tlsEdge()
		e.do(tok, "PUT", "/edges/tls/"+edge+"/mutual_tls", map[string]any{"certificate_authority_ids": []any{k.ca()}}).must(t, 200)
		e.do(tok, "PUT", "/edges/tls/"+edge+"/tls_termination", map[string]any{"terminate_at": "edge"}).must(t, 200)
		e.do(tok, "PUT", "/edges/tls/"+edge+"/tls_termination", upstream).wantError(t, 400, ep.CodeNeedsEdgeTermination)
		e.do(tok, "PUT", "/edges/tls/"+edge+"/tls_termination", map[string]any{"module": upstream}).wantError(t, 400, ep.CodeNeedsEdgeTermination)
		e.do(tok, "PATCH", "/edges/tls/"+edge, map[string]any{"tls_termination": upstream}).wantError(t, 400, ep.CodeNeedsEdgeTermination)
		got := e.do(tok, "GET", "/edges/tls/"+edge+"/tls_termination", nil).must(t, 200)
		if got.body["terminate_at"] != "edge" {
			t.Fatalf("a refused termination was stored: %s", got.raw)
		}
		// Without mutual TLS, upstream is fine.
		e.do(tok, "DELETE", "/edges/tls/"+edge+"/mutual_tls", nil).must(t, 204)
		e.do(tok, "PUT", "/edges/tls/"+edge+"/tls_termination", upstream).must(t, 200)
	})

	t.Run("both in a create body", func(t *testing.T) {
		e.t = t
		hp := k.domain() + ":443"
		e.do(tok, "POST", "/edges/tls", map[string]any{"hostports": []any{hp}, "tls_termination": upstream,
			"mutual_tls": map[string]any{"certificate_authority_ids": []any{k.ca()}}}).wantError(t, 400, ep.CodeNeedsEdgeTermination)
		// Nothing was created: the hostport is free.
		k.post("/edges/tls", map[string]any{"hostports": []any{hp}, "tls_termination": upstream})
	})
}

// TestCircuitBreakerRules: defaults for values left 0 or absent, and the ranges.
func TestCircuitBreakerRules(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	edge := k.httpsEdge()
	path := "/edges/https/" + edge + "/routes/" + k.route(edge) + "/circuit_breaker"
	defaults := map[string]any{"enabled": true, "tripped_duration": 10.0, "rolling_window": 10.0, "num_buckets": 10.0,
		"volume_threshold": 20.0, "error_threshold_percentage": 0.5}
	for _, b := range []map[string]any{
		{},
		{"tripped_duration": 0, "rolling_window": 0, "num_buckets": 0, "volume_threshold": 0, "error_threshold_percentage": 0},
		{"tripped_duration": nil, "error_threshold_percentage": nil},
	} {
		sameJSON(t, fmt.Sprintf("defaults of %v", b), e.do(tok, "PUT", path, b).must(t, 200).body, defaults)
	}
	edges := map[string]any{"tripped_duration": 1, "rolling_window": 3600, "num_buckets": 128, "volume_threshold": 1, "error_threshold_percentage": 1}
	sameJSON(t, "bounds", e.do(tok, "PUT", path, edges).must(t, 200).body, normJSON(t, merge(edges, map[string]any{"enabled": true})))
	sameJSON(t, "one bucket", e.do(tok, "PUT", path, map[string]any{"num_buckets": 1, "error_threshold_percentage": 0.01}).must(t, 200).body,
		merge(defaults, map[string]any{"num_buckets": 1.0, "error_threshold_percentage": 0.01}))
	for _, c := range []struct {
		body  map[string]any
		code  int
		field string
	}{
		{map[string]any{"error_threshold_percentage": 1.5}, ep.CodeBadErrorThreshold, "error_threshold_percentage"},
		{map[string]any{"error_threshold_percentage": 50}, ep.CodeBadErrorThreshold, "error_threshold_percentage"},
		{map[string]any{"error_threshold_percentage": -0.1}, ep.CodeBadErrorThreshold, "error_threshold_percentage"},
		{map[string]any{"num_buckets": 129}, ep.CodeBadNumBuckets, "num_buckets"},
		{map[string]any{"num_buckets": 1000000}, ep.CodeBadNumBuckets, "num_buckets"},
		{map[string]any{"tripped_duration": -1}, ep.CodeInvalid, "tripped_duration"},
		{map[string]any{"rolling_window": -10}, ep.CodeInvalid, "rolling_window"},
		{map[string]any{"num_buckets": -1}, ep.CodeInvalid, "num_buckets"},
		{map[string]any{"volume_threshold": -5}, ep.CodeInvalid, "volume_threshold"},
		{map[string]any{"volume_threshold": 1.5}, ep.CodeInvalid, "volume_threshold"},
		{map[string]any{"tripped_duration": "10s"}, ep.CodeInvalid, "tripped_duration"},
	} {
		r := e.do(tok, "PUT", path, c.body).wantError(t, 400, c.code)
		wantErrField(t, r, c.field)
	}
	// In a route body, the field names the module.
	r := e.do(tok, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": routeMatch(),
		"circuit_breaker": map[string]any{"num_buckets": 129}}).wantError(t, 400, ep.CodeBadNumBuckets)
	wantErrField(t, r, "circuit_breaker.num_buckets")
}

// TestHeaderModuleRules: request_headers and response_headers take valid header names and
// values; add and remove are {} and [] when not given, never null.
func TestHeaderModuleRules(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	edge := k.httpsEdge()
	route := "/edges/https/" + edge + "/routes/" + k.route(edge)
	for _, name := range []string{"request_headers", "response_headers"} {
		t.Run(name, func(t *testing.T) {
			e.t = t
			path := route + "/" + name
			for _, b := range []map[string]any{{}, {"add": nil, "remove": nil}, {"add": map[string]any{}, "remove": []any{}}} {
				sameJSON(t, fmt.Sprintf("empty %v", b), e.do(tok, "PUT", path, b).must(t, 200).body,
					map[string]any{"enabled": true, "add": map[string]any{}, "remove": []any{}})
			}
			sameJSON(t, "route shows empty collections", e.do(tok, "GET", route, nil).must(t, 200).body[name],
				map[string]any{"enabled": true, "add": map[string]any{}, "remove": []any{}})
			ok := map[string]any{"add": map[string]any{"X-A": "1", "x-b": "", "X-Tab": "a\tb", "X-Unicode": "caf\u00e9", "!#$%&'*+-.^_`|~": "tchars"},
				"remove": []any{"Server", "x-powered-by"}}
			checkModuleResponse(t, e, name, ok, e.do(tok, "PUT", path, ok).must(t, 200).body)
			for _, b := range []map[string]any{
				{"add": map[string]any{"Bad Name": "x"}},
				{"add": map[string]any{"": "x"}},
				{"add": map[string]any{"X-Colon:": "x"}},
				{"add": map[string]any{"X-\u00e9": "x"}},
				{"add": map[string]any{"X-Ok": "a\r\nX-Injected: 1"}},
				{"add": map[string]any{"X-Ok": "a\nb"}},
				{"add": map[string]any{"X-Ok": "a\rb"}},
				{"add": map[string]any{"X-Ok": "a\x00b"}},
				{"add": map[string]any{"X-Ok": "a\x7fb"}},
				{"remove": []any{"bad name"}},
				{"remove": []any{""}},
				{"remove": []any{"X-Ok", "X(Bad)"}},
			} {
				r := e.do(tok, "PUT", path, b).wantError(t, 400, ep.CodeInvalid)
				details := r.body["details"].(map[string]any)
				if f := details["field"]; f != "add" && f != "remove" {
					t.Fatalf("%v: field %v", b, f)
				}
			}
			e.do(tok, "PUT", path, map[string]any{"add": map[string]any{"X-Num": 1}}).wantError(t, 400, ep.CodeInvalid)
			e.do(tok, "PUT", path, map[string]any{"remove": "Server"}).wantError(t, 400, ep.CodeInvalid)
			checkModuleResponse(t, e, name, ok, e.do(tok, "GET", path, nil).must(t, 200).body)
		})
	}
}

// TestWebhookVerificationRules: providers case-insensitively from the list (7030), a secret for
// every provider but sns (7027), none for sns (7026); the response always carries secret.
func TestWebhookVerificationRules(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	edge := k.httpsEdge()
	path := "/edges/https/" + edge + "/routes/" + k.route(edge) + "/webhook_verification"
	for _, c := range []struct {
		body map[string]any
		want map[string]any
	}{
		{map[string]any{"provider": "sns"}, map[string]any{"enabled": true, "provider": "sns", "secret": ""}},
		{map[string]any{"provider": "sns", "secret": ""}, map[string]any{"enabled": true, "provider": "sns", "secret": ""}},
		{map[string]any{"provider": "sns", "secret": nil}, map[string]any{"enabled": true, "provider": "sns", "secret": ""}},
		{map[string]any{"provider": "SNS"}, map[string]any{"enabled": true, "provider": "SNS", "secret": ""}},
		{map[string]any{"provider": "GitHub", "secret": "s"}, map[string]any{"enabled": true, "provider": "GitHub", "secret": "s"}},
		{map[string]any{"provider": "STRIPE", "secret": "whsec"}, map[string]any{"enabled": true, "provider": "STRIPE", "secret": "whsec"}},
		{map[string]any{"provider": "facebook_graph_api", "secret": "x", "enabled": false}, map[string]any{"enabled": false, "provider": "facebook_graph_api", "secret": "x"}},
	} {
		sameJSON(t, fmt.Sprintf("PUT %v", c.body), e.do(tok, "PUT", path, c.body).must(t, 200).body, c.want)
		sameJSON(t, fmt.Sprintf("GET after %v", c.body), e.do(tok, "GET", path, nil).must(t, 200).body, c.want)
	}
	// Every provider of the list is accepted.
	for _, p := range ep.WebhookProviders {
		body := map[string]any{"provider": p, "secret": "s"}
		if p == "sns" {
			delete(body, "secret")
		}
		e.do(tok, "PUT", path, body).must(t, 200)
	}
	for _, c := range []struct {
		body  map[string]any
		code  int
		field string
	}{
		{map[string]any{"provider": "myspace", "secret": "s"}, ep.CodeProviderUnsupported, "provider"},
		{map[string]any{"provider": "git hub", "secret": "s"}, ep.CodeProviderUnsupported, "provider"},
		{map[string]any{"secret": "s"}, ep.CodeProviderUnsupported, "provider"},
		{map[string]any{"provider": "", "secret": "s"}, ep.CodeProviderUnsupported, "provider"},
		{map[string]any{"provider": "github"}, ep.CodeProviderNeedsSecret, "secret"},
		{map[string]any{"provider": "github", "secret": ""}, ep.CodeProviderNeedsSecret, "secret"},
		{map[string]any{"provider": "Slack", "secret": nil}, ep.CodeProviderNeedsSecret, "secret"},
		{map[string]any{"provider": "sns", "secret": "s"}, ep.CodeProviderNoSecret, "secret"},
		{map[string]any{"provider": "Sns", "secret": "s"}, ep.CodeProviderNoSecret, "secret"},
	} {
		r := e.do(tok, "PUT", path, c.body).wantError(t, 400, c.code)
		wantErrField(t, r, c.field)
	}
	r := e.do(tok, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": routeMatch(),
		"webhook_verification": map[string]any{"provider": "sns", "secret": "s"}}).wantError(t, 400, ep.CodeProviderNoSecret)
	wantErrField(t, r, "webhook_verification.secret")
}

// TestTrafficPolicyRules: the value is a traffic policy document in JSON or YAML, kept as given;
// a document ngrok would refuse (not a mapping, an unknown phase or action type, an expression
// that does not compile) is refused with 400 naming the problem.
func TestTrafficPolicyRules(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	for _, m := range modulesNamed("traffic_policy") {
		t.Run(moduleKey(m), func(t *testing.T) {
			e.t = t
			path := k.parent(m.Parent).path + "/traffic_policy"
			for _, v := range []string{
				`{"on_http_request":[{"actions":[{"type":"deny"}]}]}`,
				`{}`,
				"  {\"on_tcp_connect\": []}\n",
				"on_http_request:\n  - expressions: [\"req.url.path.startsWith('/admin')\"]\n    actions:\n      - type: deny\n",
				`{"on_http_request":[{"actions":[{"type":"rate-limit","config":{"name":"rl","algorithm":"sliding_window","capacity":10,"rate":"60s","bucket_key":["conn.client_ip"]}}]}]}`,
				"---\non_http_response:\n  - actions:\n      - type: remove-headers\n        config: {headers: [server]}\n",
			} {
				r := e.do(tok, "PUT", path, map[string]any{"value": v}).must(t, 200)
				sameJSON(t, "traffic policy", r.body, map[string]any{"enabled": true, "value": v})
			}
			for _, v := range []any{
				`{"on_http_request": [`, `{"a": 1} trailing`, "{not json: at all", "key: [unclosed", "a: b: c",
				"just a string", "- a\n- b\n", `[1, 2]`, "42", "", "   ", nil,
			} {
				r := e.do(tok, "PUT", path, map[string]any{"value": v}).wantError(t, 400, ep.CodeInvalid)
				wantErrField(t, r, "value")
			}
			for v, want := range map[string]string{
				"a: 1": `"a" is not a traffic policy phase`,
				`{"on_http_request":[{"actions":[{"type":"teleport"}]}]}`:                                                   `on_http_request[0].actions[0].type: "teleport" is not a traffic policy action`,
				`{"on_http_request":[{"expressions":["req.method =="],"actions":[{"type":"deny"}]}]}`:                       `on_http_request[0].expressions[0]: ERROR`,
				`{"on_http_request":[{"expressions":["req.nope"],"actions":[{"type":"deny"}]}]}`:                            `undeclared reference to 'req'`,
				`{"on_http_request":[{"actions":[{"type":"deny","config":{"status_code":"x"}}]}]}`:                          `on_http_request[0].actions[0].config`,
				`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"Transfer-Encoding":"x"}}}]}]}`: `"Transfer-Encoding" cannot be added or removed`,
			} {
				r := e.do(tok, "PUT", path, map[string]any{"value": v}).wantError(t, 400, ep.CodeInvalid)
				wantErrField(t, r, "value")
				if !strings.Contains(r.msg(), want) {
					t.Errorf("%s: %q, want it to name %q", v, r.msg(), want)
				}
			}
			e.do(tok, "PUT", path, map[string]any{"value": map[string]any{"a": 1}}).wantError(t, 400, ep.CodeInvalid)
			sameJSON(t, "traffic policy after rejections", e.do(tok, "GET", path, nil).must(t, 200).body,
				map[string]any{"enabled": true, "value": "---\non_http_response:\n  - actions:\n      - type: remove-headers\n        config: {headers: [server]}\n"})
		})
	}
}

// TestReservedDomainDetach: the delete-only parts of a reserved domain, its certificate and its
// certificate management policy.
func TestReservedDomainDetach(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	other := e.newAccount("detach-other")
	var names []string
	for _, m := range ep.Modules {
		if m.Parent == ep.ReservedDomains {
			names = append(names, m.Name)
			if m.Ops != ep.OpDelete {
				t.Errorf("reserved_domain/%s serves more than DELETE", m.Name)
			}
		}
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"certificate", "certificate_management_policy"}) {
		t.Fatalf("delete-only parts of reserved domains: %v", names)
	}
	p := testPKI(t)

	t.Run("certificate", func(t *testing.T) {
		e.t = t
		cert := e.do(tok, "POST", "/tls_certificates", map[string]any{"certificate_pem": chainPEM(p.leafECDSA, p.inter),
			"private_key_pem": p.leafECDSA.keyPEM}).must(t, 201).str("id")
		id := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": freshDomain("detach"), "certificate_id": cert}).must(t, 201).str("id")
		path := "/reserved_domains/" + id + "/certificate"
		e.do(tok, "DELETE", "/tls_certificates/"+cert, nil).wantError(t, 409, ep.CodeCertificateInUse)
		e.do(other.token, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)
		del := e.do(tok, "DELETE", path, nil).must(t, 204)
		if len(del.raw) != 0 {
			t.Fatalf("204 with a body: %q", del.raw)
		}
		d := e.do(tok, "GET", "/reserved_domains/"+id, nil).must(t, 200)
		if v, present := d.body["certificate"]; !present || v != nil {
			t.Fatalf("certificate should be null: %s", d.raw)
		}
		e.do(tok, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)
		// Detached, the certificate is no longer in use.
		e.do(tok, "DELETE", "/tls_certificates/"+cert, nil).must(t, 204)
		missing, _ := ep.NewID(ep.ReservedDomains.Prefix)
		e.do(tok, "DELETE", "/reserved_domains/"+missing+"/certificate", nil).wantError(t, 404, ep.CodeNotFound)
	})

	t.Run("certificate_management_policy", func(t *testing.T) {
		e.t = t
		id := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": freshDomain("detach"),
			"certificate_management_policy": map[string]any{"authority": "letsencrypt"}}).must(t, 201).str("id")
		path := "/reserved_domains/" + id + "/certificate_management_policy"
		e.do(other.token, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)
		e.do(tok, "DELETE", path, nil).must(t, 204)
		d := e.do(tok, "GET", "/reserved_domains/"+id, nil).must(t, 200)
		for _, f := range []string{"certificate_management_policy", "certificate_management_status"} {
			if v, present := d.body[f]; !present || v != nil {
				t.Fatalf("%s should be null: %s", f, d.raw)
			}
		}
		e.do(tok, "DELETE", path, nil).wantError(t, 404, ep.CodeNotFound)
		// A domain that never had one: 404.
		plain := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": freshDomain("detach")}).must(t, 201).str("id")
		e.do(tok, "DELETE", "/reserved_domains/"+plain+"/certificate_management_policy", nil).wantError(t, 404, ep.CodeNotFound)
		e.do(tok, "DELETE", "/reserved_domains/"+plain+"/certificate", nil).wantError(t, 404, ep.CodeNotFound)
	})

	t.Run("other methods", func(t *testing.T) {
		e.t = t
		id := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": freshDomain("detach")}).must(t, 201).str("id")
		for _, name := range names {
			for _, method := range []string{"GET", "PUT", "PATCH", "POST"} {
				r := e.do(tok, method, "/reserved_domains/"+id+"/"+name, map[string]any{}).wantError(t, 405, ep.CodeMethodNotAllowed)
				if allow := r.header.Get("Allow"); allow != "DELETE" {
					t.Fatalf("%s %s: Allow %q, want DELETE", method, name, allow)
				}
			}
		}
	})
}
