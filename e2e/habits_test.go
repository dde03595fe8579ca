package e2e

// Raw HTTP requests shaped like the other official clients': explicit
// nulls for every unset field and "enabled": null inside modules, a first page asked for with an
// empty before_id and paging that stops only on an empty page, the three module PUT body shapes,
// and next_page_uri under a base URL with a path prefix. Each test runs against a real
// `edgeplane serve`.

import (
	"encoding"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// --- bodies with every unset field null -------------------------------------------------------

// jsonField is one field of a request type as encoding/json sees it.
type jsonField struct {
	name string
	typ  reflect.Type
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// jsonFields lists the JSON fields of a struct type, with the fields of embedded structs promoted
// as encoding/json promotes them.
func jsonFields(t reflect.Type) []jsonField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}

// structOf returns the struct type a field decodes into field by field, or nil (scalars, maps,
// slices, and types that decode themselves).
func structOf(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return nil
	}
	return t
}

// withNulls returns body with an explicit null for every field of typ that body does not set,
// recursively inside the objects it does set (modules, providers): the body a client sends when
// it serialises every field of its request type. A body key that typ does not have fails the
// test (the fixture is wrong).
func withNulls(t *testing.T, body map[string]any, typ reflect.Type) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, f := range jsonFields(typ) {
		v, ok := body[f.name]
		if !ok {
			out[f.name] = nil
			continue
		}
		if m, isMap := v.(map[string]any); isMap {
			if st := structOf(f.typ); st != nil {
				v = withNulls(t, m, st)
			}
		}
		out[f.name] = v
	}
	for k := range body {
		if _, ok := out[k]; !ok {
			t.Fatalf("fixture field %q is not a field of %v", k, typ)
		}
	}
	return out
}

// kit creates, once per test, the objects that bodies refer to, and fresh unique names.
type kit struct {
	t     *testing.T
	s     *server
	keys  map[string]string
	cache map[string]string
}

func newKit(t *testing.T, s *server) *kit {
	return &kit{t: t, s: s, keys: keyMaterial(t), cache: map[string]string{}}
}

func (k *kit) post(path string, body any) response {
	k.t.Helper()
	return k.s.do(k.t, "POST", path, body).must(k.t, 201)
}

// once creates an object with body at path the first time and returns its id ever after.
func (k *kit) once(path string, body map[string]any) string {
	k.t.Helper()
	if id, ok := k.cache[path]; ok {
		return id
	}
	id := k.post(path, body).str("id")
	k.cache[path] = id
	return id
}

func (k *kit) backend() string {
	return k.once("/backends/static", map[string]any{"address": "10.0.0.1:80"})
}
func (k *kit) policy() string { return k.once("/ip_policies", map[string]any{}) }
func (k *kit) ca() string {
	return k.once("/certificate_authorities", map[string]any{"ca_pem": k.keys["ca_pem"]})
}
func (k *kit) sshCA() string     { return k.once("/ssh_certificate_authorities", map[string]any{}) }
func (k *kit) httpsEdge() string { return k.once("/edges/https", map[string]any{}) }

var seq atomic.Int64

func next() int64 { return seq.Add(1) }

// domain reserves a new domain and returns its name.
func (k *kit) domain() string {
	k.t.Helper()
	name := fmt.Sprintf("habit%d.example.com", next())
	k.post("/reserved_domains", map[string]any{"domain": name})
	return name
}

func (k *kit) addr() string {
	k.t.Helper()
	return k.post("/reserved_addrs", map[string]any{}).str("addr")
}

// bodyFixture is a minimal create body and an update body of one collection. Bodies may hold
// modules with "enabled": null. volatile are the response fields that differ between two creates
// of the same fixture (generated or unique values).
type bodyFixture struct {
	create   func(k *kit) map[string]any
	update   func(k *kit) map[string]any
	volatile []string
}

// alwaysVolatile differ between any two objects.
var alwaysVolatile = []string{"id", "uri", "created_at", "token"}

const samlMetadata = `<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="https://idp.example.com/metadata">` +
	`<IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">` +
	`<SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect" Location="https://idp.example.com/sso"/>` +
	`</IDPSSODescriptor></EntityDescriptor>`

func enabledNull(m map[string]any) map[string]any {
	m["enabled"] = nil
	return m
}

var bodyFixtures = map[string]bodyFixture{
	"api_key": {
		create: func(*kit) map[string]any { return map[string]any{"description": "k"} },
		update: func(*kit) map[string]any { return map[string]any{"description": "k2"} },
	},
	"credential": {
		create: func(*kit) map[string]any { return map[string]any{"acl": []any{"bind:*.example.com"}} },
		update: func(*kit) map[string]any { return map[string]any{"metadata": "m"} },
	},
	"bot_user": {
		create: func(*kit) map[string]any { return map[string]any{"name": "bot"} },
		update: func(*kit) map[string]any { return map[string]any{"active": false} },
	},
	"ip_policy": {
		create: func(*kit) map[string]any { return map[string]any{"description": "p"} },
		update: func(*kit) map[string]any { return map[string]any{"metadata": "m"} },
	},
	"ip_policy_rule": {
		create: func(k *kit) map[string]any {
			return map[string]any{"ip_policy_id": k.policy(), "cidr": "10.0.0.0/8", "action": "deny"}
		},
		update: func(*kit) map[string]any { return map[string]any{"description": "d"} },
	},
	"reserved_domain": {
		create: func(*kit) map[string]any {
			return map[string]any{"domain": fmt.Sprintf("rd%d.example.com", next())}
		},
		update:   func(*kit) map[string]any { return map[string]any{"description": "d"} },
		volatile: []string{"domain", "cname_target"},
	},
	"reserved_addr": {
		create:   func(*kit) map[string]any { return map[string]any{} },
		update:   func(*kit) map[string]any { return map[string]any{"description": "d"} },
		volatile: []string{"addr"},
	},
	"tls_certificate": {
		create: func(k *kit) map[string]any {
			return map[string]any{"certificate_pem": k.keys["certificate_pem"], "private_key_pem": k.keys["private_key_pem"]}
		},
		update: func(*kit) map[string]any { return map[string]any{"description": "d"} },
	},
	"certificate_authority": {
		create: func(k *kit) map[string]any { return map[string]any{"ca_pem": k.keys["ca_pem"]} },
		update: func(*kit) map[string]any { return map[string]any{"metadata": "m"} },
	},
	"ssh_certificate_authority": {
		create:   func(*kit) map[string]any { return map[string]any{} },
		update:   func(*kit) map[string]any { return map[string]any{"description": "d"} },
		volatile: []string{"public_key"},
	},
	"ssh_user_certificate": {
		create: func(k *kit) map[string]any {
			return map[string]any{"ssh_certificate_authority_id": k.sshCA(), "public_key": k.keys["ssh_public_key"]}
		},
		update:   func(*kit) map[string]any { return map[string]any{"description": "d"} },
		volatile: []string{"certificate", "valid_after", "valid_until"},
	},
	"ssh_host_certificate": {
		create: func(k *kit) map[string]any {
			return map[string]any{"ssh_certificate_authority_id": k.sshCA(), "public_key": k.keys["ssh_public_key"]}
		},
		update:   func(*kit) map[string]any { return map[string]any{"description": "d"} },
		volatile: []string{"certificate", "valid_after", "valid_until"},
	},
	"tunnel_group_backend": {
		create: func(*kit) map[string]any { return map[string]any{"labels": map[string]any{"edge": "web"}} },
		update: func(*kit) map[string]any { return map[string]any{"description": "d"} },
	},
	"static_backend": {
		create: func(*kit) map[string]any { return map[string]any{"address": "10.0.0.2:80"} },
		update: func(*kit) map[string]any { return map[string]any{"description": "d"} },
	},
	"http_response_backend": {
		create: func(*kit) map[string]any { return map[string]any{"status_code": 200} },
		update: func(*kit) map[string]any { return map[string]any{"body": "b"} },
	},
	"failover_backend": {
		create: func(k *kit) map[string]any { return map[string]any{"backends": []any{k.backend()}} },
		update: func(*kit) map[string]any { return map[string]any{"description": "d"} },
	},
	"weighted_backend": {
		create: func(k *kit) map[string]any { return map[string]any{"backends": map[string]any{k.backend(): 1}} },
		update: func(*kit) map[string]any { return map[string]any{"description": "d"} },
	},
	"tls_edge": {
		create: func(k *kit) map[string]any {
			return map[string]any{"hostports": []any{k.domain() + ":443"},
				"backend":         enabledNull(map[string]any{"backend_id": k.backend()}),
				"tls_termination": enabledNull(map[string]any{"terminate_at": "edge"})}
		},
		update: func(k *kit) map[string]any {
			return map[string]any{"description": "d", "ip_restriction": enabledNull(map[string]any{"ip_policy_ids": []any{k.policy()}})}
		},
		volatile: []string{"hostports"},
	},
	"https_edge": {
		create: func(k *kit) map[string]any {
			return map[string]any{"hostports": []any{k.domain() + ":443"}, "tls_termination": enabledNull(map[string]any{})}
		},
		update: func(k *kit) map[string]any {
			return map[string]any{"mutual_tls": enabledNull(map[string]any{"certificate_authority_ids": []any{k.ca()}})}
		},
		volatile: []string{"hostports"},
	},
	"tcp_edge": {
		create: func(k *kit) map[string]any {
			return map[string]any{"hostports": []any{k.addr()}, "ip_restriction": enabledNull(map[string]any{"ip_policy_ids": []any{k.policy()}})}
		},
		update: func(k *kit) map[string]any {
			return map[string]any{"backend": enabledNull(map[string]any{"backend_id": k.backend()})}
		},
		volatile: []string{"hostports"},
	},
	"https_edge_route": {
		create: func(*kit) map[string]any {
			return map[string]any{"match_type": "path_prefix", "match": fmt.Sprintf("/m%d", next()),
				"circuit_breaker":      enabledNull(map[string]any{}),
				"compression":          enabledNull(map[string]any{}),
				"request_headers":      enabledNull(map[string]any{"add": map[string]any{"x-a": "1"}}),
				"webhook_verification": enabledNull(map[string]any{"provider": "sns"})}
		},
		update: func(k *kit) map[string]any {
			return map[string]any{"backend": enabledNull(map[string]any{"backend_id": k.backend()}),
				"websocket_tcp_converter": enabledNull(map[string]any{})}
		},
		volatile: []string{"match"},
	},
}

// collectionPath is the path of res's collection, under the kit's HTTPS edge when nested.
func collectionPath(k *kit, res *ep.Resource) string {
	if res.Parent == nil {
		return res.Path
	}
	if res.Parent != ep.HTTPSEdges {
		k.t.Fatalf("no parent fixture for %s", res.Kind)
	}
	return strings.Replace(res.Path, "{edge_id}", k.httpsEdge(), 1)
}

// TestExplicitNullsEverywhere sends, for every collection, a create body and a PATCH body in
// which every field of the request type that the fixture does not set is an explicit null, and
// modules carry "enabled": null. Null must mean what absence means: the object equals one created
// from the bare fixture, modules are enabled, and PATCH changes only what it names.
func TestExplicitNullsEverywhere(t *testing.T) {
	s := startServer(t)
	k := newKit(t, s)
	for _, res := range ep.Resources {
		fx, ok := bodyFixtures[res.Kind]
		if !ok {
			t.Errorf("%s: no fixture in bodyFixtures; add one so the explicit-null habit is tested for it", res.Kind)
			continue
		}
		t.Run(res.Kind, func(t *testing.T) {
			k.t = t
			path := collectionPath(k, res)
			createType := reflect.TypeOf(res.NewCreate())
			plain := k.post(path, annotated(fx.create(k), createType))
			// The annotations are set, so that a PATCH null that cleared them would show.
			body := annotated(fx.create(k), createType)
			nulls := k.post(path, withNulls(t, body, createType))

			skip := append(slices.Clone(alwaysVolatile), fx.volatile...)
			sameExcept(t, "create with explicit nulls vs create without them", plain.body, nulls.body, skip)
			modulesEnabled(t, "create", body, nulls.body)

			upd := fx.update(k)
			patch := withNulls(t, upd, reflect.TypeOf(res.NewUpdate()))
			objPath := path + "/" + nulls.str("id")
			after := s.do(t, "PATCH", objPath, patch).must(t, 200)
			changed := []string{}
			for key, v := range upd {
				changed = append(changed, key)
				if _, isMap := v.(map[string]any); !isMap && !reflect.DeepEqual(normalize(t, v), after.body[key]) {
					t.Errorf("PATCH %s: %s = %v, want %v", res.Kind, key, after.body[key], v)
				}
			}
			sameExcept(t, "PATCH with explicit nulls changed a field it did not name", nulls.body, after.body, append(changed, "token"))
			modulesEnabled(t, "PATCH", upd, after.body)
			sameExcept(t, "GET after PATCH", after.body, s.do(t, "GET", objPath, nil).must(t, 200).body, nil)
		})
	}
}

// annotated sets description and metadata in body when the request type has them and body does
// not.
func annotated(body map[string]any, typ reflect.Type) map[string]any {
	for _, f := range jsonFields(typ) {
		if _, set := body[f.name]; !set && (f.name == "description" || f.name == "metadata") {
			body[f.name] = "kept " + f.name
		}
	}
	return body
}

// normalize round-trips v through JSON, so Go values compare with decoded ones.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameExcept requires a and b to have the same keys and equal values outside skip.
func sameExcept(t *testing.T, what string, a, b map[string]any, skip []string) {
	t.Helper()
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		if slices.Contains(skip, k) {
			continue
		}
		av, aok := a[k]
		bv, bok := b[k]
		if aok != bok || !reflect.DeepEqual(av, bv) {
			t.Errorf("%s: %q differs:\n  %s\n  %s", what, k, jsonString(av, aok), jsonString(bv, bok))
		}
	}
}

func jsonString(v any, present bool) string {
	if !present {
		return "(absent)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// modulesEnabled requires every module that the request body set with "enabled": null to be
// enabled in the response.
func modulesEnabled(t *testing.T, what string, body, got map[string]any) {
	t.Helper()
	for key, v := range body {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if e, has := m["enabled"]; !has || e != nil {
			continue
		}
		mod, _ := got[key].(map[string]any)
		if mod == nil || mod["enabled"] != true {
			t.Errorf(`%s: module %s sent with "enabled": null is %s, want enabled true`, what, key, jsonString(got[key], true))
		}
	}
}

// --- module PUT bodies --------------------------------------------------------------------------

// moduleBodies are PUT bodies of every module that can be PUT, keyed "<parent kind>/<name>".
// Placeholders: "$backend", "$ip_policy", "$ca" become ids of objects of the kit.
var moduleBodies = map[string]map[string]any{
	"tls_edge/backend":         {"backend_id": "$backend"},
	"tls_edge/ip_restriction":  {"ip_policy_ids": []any{"$ip_policy"}},
	"tls_edge/mutual_tls":      {"certificate_authority_ids": []any{"$ca"}},
	"tls_edge/tls_termination": {"terminate_at": "edge"},
	"tls_edge/traffic_policy":  {"value": `{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}`},

	"https_edge/mutual_tls":      {"certificate_authority_ids": []any{"$ca"}},
	"https_edge/tls_termination": {},

	"tcp_edge/backend":        {"backend_id": "$backend"},
	"tcp_edge/ip_restriction": {"ip_policy_ids": []any{"$ip_policy"}},
	"tcp_edge/traffic_policy": {"value": "on_tcp_connect:\n  - actions:\n      - type: deny\n"},

	"https_edge_route/backend":                 {"backend_id": "$backend"},
	"https_edge_route/ip_restriction":          {"ip_policy_ids": []any{"$ip_policy"}},
	"https_edge_route/circuit_breaker":         {},
	"https_edge_route/compression":             {},
	"https_edge_route/request_headers":         {"add": map[string]any{"X-A": "1"}},
	"https_edge_route/response_headers":        {"remove": []any{"Server"}},
	"https_edge_route/webhook_verification":    {"provider": "github", "secret": "s3cret"},
	"https_edge_route/websocket_tcp_converter": {},
	"https_edge_route/traffic_policy":          {"value": `{"on_http_request":[{"actions":[{"type":"deny"}]}]}`},
	"https_edge_route/oauth":                   {"provider": map[string]any{"google": map[string]any{"client_id": "c", "client_secret": "s"}}},
	"https_edge_route/saml":                    {"idp_metadata": samlMetadata},
	"https_edge_route/oidc":                    {"issuer": "https://accounts.example.com", "client_id": "c", "client_secret": "s"},
	"https_edge_route/user_agent_filter":       {"allow": []any{"curl/.*"}},
	"https_edge_route/jwt_validation":          {"issuer": map[string]any{"allow_list": []any{map[string]any{"value": "https://issuer.example.com"}}}},
}

func (k *kit) expand(v any) any {
	switch x := v.(type) {
	case string:
		switch x {
		case "$backend":
			return k.backend()
		case "$ip_policy":
			return k.policy()
		case "$ca":
			return k.ca()
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = k.expand(e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for key, e := range x {
			out[key] = k.expand(e)
		}
		return out
	}
	return v
}

// moduleParent is where a module lives: its parent's path, id and edge id (routes).
type moduleParent struct{ path, id, edgeID string }

func (k *kit) parentOf(res *ep.Resource) moduleParent {
	k.t.Helper()
	switch res {
	case ep.TLSEdges:
		id := k.once("/edges/tls", map[string]any{"hostports": []any{k.domain() + ":443"}})
		return moduleParent{path: "/edges/tls/" + id, id: id}
	case ep.HTTPSEdges:
		id := k.httpsEdge()
		return moduleParent{path: "/edges/https/" + id, id: id}
	case ep.TCPEdges:
		id := k.once("/edges/tcp", map[string]any{"hostports": []any{k.addr()}})
		return moduleParent{path: "/edges/tcp/" + id, id: id}
	case ep.HTTPSEdgeRoutes:
		edge := k.httpsEdge()
		id := k.once("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/"})
		return moduleParent{path: "/edges/https/" + edge + "/routes/" + id, id: id, edgeID: edge}
	}
	k.t.Fatalf("no parent for modules of %s", res.Kind)
	return moduleParent{}
}

// TestModulePutShapes PUTs every module in the body shapes the official clients send: the bare
// module, {"module": …}, {"id": …, "module": …} and, on routes, {"id": …, "edge_id": …,
// "module": …}; each body has an explicit null for every unset field and "enabled": null. All
// shapes must configure the same, enabled module.
func TestModulePutShapes(t *testing.T) {
	s := startServer(t)
	k := newKit(t, s)
	for _, m := range ep.Modules {
		if !m.Ops.Has(ep.OpUpdate) {
			continue
		}
		key := m.Parent.Kind + "/" + m.Name
		fixture, ok := moduleBodies[key]
		if !ok {
			t.Errorf("%s: no PUT body in moduleBodies; add one so the client body shapes are tested for it", key)
			continue
		}
		t.Run(key, func(t *testing.T) {
			k.t = t
			p := k.parentOf(m.Parent)
			mod := enabledNull(withNulls(t, k.expand(fixture).(map[string]any), reflect.TypeOf(m.NewRequest())))
			shapes := map[string]any{
				"bare":            mod,
				"module":          map[string]any{"module": mod},
				"id and module":   map[string]any{"id": p.id, "module": mod},
				"null id, module": map[string]any{"id": nil, "module": mod},
			}
			if p.edgeID != "" {
				shapes["id, edge_id and module"] = map[string]any{"id": p.id, "edge_id": p.edgeID, "module": mod}
			}
			names := make([]string, 0, len(shapes))
			for n := range shapes {
				names = append(names, n)
			}
			sort.Strings(names)
			var first map[string]any
			for _, n := range names {
				got := s.do(t, "PUT", p.path+"/"+m.Name, shapes[n])
				if got.status != 200 {
					t.Errorf("PUT %s as %s: status %d: %s", m.Name, n, got.status, got.raw)
					continue
				}
				if got.body["enabled"] != true {
					t.Errorf(`PUT %s as %s with "enabled": null: enabled = %v, want true`, m.Name, n, got.body["enabled"])
				}
				if first == nil {
					first = got.body
				} else {
					sameExcept(t, "PUT "+m.Name+" as "+n+" vs "+names[0], first, got.body, nil)
				}
				sameExcept(t, "GET after PUT "+n, got.body, s.do(t, "GET", p.path+"/"+m.Name, nil).must(t, 200).body, nil)
			}
			// An echoed id must be the path's.
			other := map[string]any{"id": p.id + "x", "module": mod}
			if r := s.do(t, "PUT", p.path+"/"+m.Name, other); r.status != 400 {
				t.Errorf("PUT %s with another id: status %d, want 400: %s", m.Name, r.status, r.raw)
			}
			// Leave the parent without it (oauth, saml and oidc exclude each other).
			s.do(t, "DELETE", p.path+"/"+m.Name, nil).must(t, 204)
		})
	}
}

// --- paging like a client that stops only on an empty page ------------------------------------

// pageThrough pages listPath like the clients that send before_id= empty on the first request and
// stop only when a page is empty, whatever next_page_uri says. It returns the ids in order and
// checks the rules on the way: next_page_uri is null on the last non-empty page and on the
// empty page, and starts with the base URL otherwise.
func pageThrough(t *testing.T, s *server, listPath, key string, limit int, beforeParam string) []string {
	t.Helper()
	var ids []string
	before := ""
	var lastNext any = "unset"
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatalf("paging %s did not end", listPath)
		}
		q := url.Values{beforeParam: {before}, "limit": {fmt.Sprint(limit)}}
		r := s.do(t, "GET", listPath+"?"+q.Encode(), nil).must(t, 200)
		items, ok := r.body[key].([]any)
		if !ok {
			t.Fatalf("no list %q in %s", key, r.raw)
		}
		if len(items) == 0 {
			if r.body["next_page_uri"] != nil {
				t.Errorf("empty page has next_page_uri %v, want null", r.body["next_page_uri"])
			}
			if lastNext != nil {
				t.Errorf("the last non-empty page had next_page_uri %v, want null", lastNext)
			}
			return ids
		}
		for _, it := range items {
			ids = append(ids, it.(map[string]any)["id"].(string))
		}
		lastNext = r.body["next_page_uri"]
		if n, isStr := lastNext.(string); isStr {
			want := fmt.Sprintf("%s%s?before_id=%s&limit=%d", s.base, listPath, ids[len(ids)-1], limit)
			if n != want {
				t.Errorf("next_page_uri %q, want %q", n, want)
			}
		}
		before = ids[len(ids)-1]
	}
}

// TestPagingUntilEmptyPage pages collections with a first request of before_id= (empty) and stops
// only on an empty page, with limits that do and do not divide the count.
func TestPagingUntilEmptyPage(t *testing.T) {
	s := startServer(t)
	k := newKit(t, s)
	const n = 12
	var policies, backends []string
	for i := range n {
		policies = append(policies, k.post("/ip_policies", map[string]any{"description": fmt.Sprint(i)}).str("id"))
		backends = append(backends, k.post("/backends/static", map[string]any{"address": fmt.Sprintf("10.0.0.%d:80", i+1)}).str("id"))
	}
	slices.Reverse(policies) // newest first
	slices.Reverse(backends)
	for _, c := range []struct {
		path, key string
		want      []string
	}{{"/ip_policies", "ip_policies", policies}, {"/backends/static", "backends", backends}} {
		for _, limit := range []int{1, 4, 5, 12, 100} {
			for _, param := range []string{"before_id", "beforeId"} {
				got := pageThrough(t, s, c.path, c.key, limit, param)
				if !slices.Equal(got, c.want) {
					t.Errorf("%s limit %d (%s): got %v, want %v", c.path, limit, param, got, c.want)
				}
			}
		}
	}
	// The empty cursor is no cursor: the first page is the newest.
	r := s.do(t, "GET", "/ip_policies?before_id=", nil).must(t, 200)
	if items := r.body["ip_policies"].([]any); len(items) != n || items[0].(map[string]any)["id"] != policies[0] {
		t.Errorf("before_id= (empty) does not list from the newest: %s", r.raw)
	}
	if r.body["next_page_uri"] != nil {
		t.Errorf("one page of everything has next_page_uri %v", r.body["next_page_uri"])
	}
	// Asking for the page after the oldest object: empty, next_page_uri null.
	r = s.do(t, "GET", "/ip_policies?before_id="+policies[n-1], nil).must(t, 200)
	if len(r.body["ip_policies"].([]any)) != 0 || r.body["next_page_uri"] != nil {
		t.Errorf("the page after the oldest object is not empty with next_page_uri null: %s", r.raw)
	}
}

// --- next_page_uri under a base URL with a path prefix ---------------------------------------

// TestNextPageURIUnderBaseURL runs the server as if behind a reverse proxy at https://host/api
// (with and without a trailing slash in the flag): every uri and next_page_uri starts with the
// base URL exactly, and following next_page_uri (the proxy strips /api) pages to the end.
func TestNextPageURIUnderBaseURL(t *testing.T) {
	for _, flag := range []string{"https://edge.example.net/api", "https://edge.example.net/api/"} {
		t.Run(flag, func(t *testing.T) {
			const base = "https://edge.example.net/api"
			s := startServer(t, "--base-url", flag)
			k := newKit(t, s)
			var ids []string
			for range 5 {
				ids = append(ids, k.post("/ip_policies", map[string]any{}).str("id"))
			}
			slices.Reverse(ids)
			edge := k.httpsEdge()
			for i := range 3 {
				k.post("/edges/https/"+edge+"/routes", map[string]any{"match_type": "exact_path", "match": fmt.Sprintf("/r%d", i)})
			}
			cases := []struct{ path, key string }{{"/ip_policies", "ip_policies"}, {"/edges/https/" + edge + "/routes", "routes"}}
			for _, c := range cases {
				r := s.do(t, "GET", c.path+"?limit=2", nil).must(t, 200)
				if r.str("uri") != base+c.path {
					t.Errorf("%s: list uri %q, want %q", c.path, r.str("uri"), base+c.path)
				}
				seen := 0
				for {
					for _, it := range r.body[c.key].([]any) {
						obj := it.(map[string]any)
						if !strings.HasPrefix(obj["uri"].(string), base+c.path+"/") {
							t.Errorf("object uri %q is not under %s", obj["uri"], base+c.path)
						}
						seen++
					}
					next, _ := r.body["next_page_uri"].(string)
					if next == "" {
						break
					}
					if !strings.HasPrefix(next, base+c.path+"?before_id=") || !strings.HasSuffix(next, "&limit=2") {
						t.Fatalf("next_page_uri %q is not %s?before_id=…&limit=2", next, base+c.path)
					}
					// The proxy forwards https://edge.example.net/api/X as /X.
					r = s.do(t, "GET", strings.TrimPrefix(next, base), nil).must(t, 200)
				}
				if want := map[string]int{"ip_policies": 5, "routes": 3}[c.key]; seen != want {
					t.Errorf("%s: paged %d objects, want %d", c.path, seen, want)
				}
				// One default page holds everything: no next page.
				if r := s.do(t, "GET", c.path, nil).must(t, 200); r.body["next_page_uri"] != nil {
					t.Errorf("%s: one default page has next_page_uri %v", c.path, r.body["next_page_uri"])
				}
			}
			got := s.do(t, "GET", "/ip_policies/"+ids[0], nil).must(t, 200)
			if got.str("uri") != base+"/ip_policies/"+ids[0] {
				t.Errorf("object uri %q", got.str("uri"))
			}
		})
	}
}
