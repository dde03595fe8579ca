package server_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// Helpers shared by the isolation and hostile-input tests: an account holding one object of every
// collection with every module configured, a snapshot of everything an account holds, and the
// operations of the generated OpenAPI document.

// populate gives the account one object of every collection of the resource table (from the
// lifecycle fixtures, which create what each depends on), configures every module of the module
// table on objects of it (from moduleFixtures), and attaches a certificate and a certificate
// policy to reserved domains, so that every GET, PUT and DELETE path of the API has something
// to find in the account.
func populate(t *testing.T, e *env, a account) {
	t.Helper()
	e.t = t
	for _, res := range ep.Resources {
		fx, ok := fixtures[res.Kind]
		if !ok {
			t.Fatalf("no lifecycle fixture for %s", res.Kind)
		}
		path := collectionPath(e, a, res, fx)
		e.do(a.token, "POST", path, fx.create(e, a)).must(t, 201)
	}
	k := edgeKit{e, a}
	shared := map[*ep.Resource]moduleParent{}
	for _, m := range ep.Modules {
		if !m.Ops.Has(ep.OpUpdate) {
			continue
		}
		fx, ok := moduleFixtures[moduleKey(m)]
		if !ok {
			t.Fatalf("no module fixture for %s", moduleKey(m))
		}
		body := k.expand(fx)
		p, ok := shared[m.Parent]
		if !ok {
			p = k.parent(m.Parent)
			shared[m.Parent] = p
		}
		if r := e.do(a.token, "PUT", p.path+"/"+m.Name, body); r.status != 200 {
			// A module that cannot share its parent with the others (only one of oauth, saml
			// and oidc per route) gets a parent of its own.
			p = k.parent(m.Parent)
			e.do(a.token, "PUT", p.path+"/"+m.Name, body).must(t, 200)
		}
	}
	// The delete-only parts of reserved domains: one domain with a certificate, one with a policy.
	cert := e.do(a.token, "POST", "/tls_certificates", fixtures["tls_certificate"].create(e, a)).must(t, 201).str("id")
	e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": freshDomain("cert"), "certificate_id": cert}).must(t, 201)
	e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": freshDomain("policy"),
		"certificate_management_policy": map[string]any{"authority": "letsencrypt"}}).must(t, 201)
}

// object is one object of an account as its list shows it.
type object struct {
	res    *ep.Resource
	id     string
	parent string // the parent id of a nested object
	path   string // its path: /ip_policies/ipp_…, /edges/https/edghts_…/routes/edghtsrt_…
	raw    string // canonical JSON (keys sorted) of the list item
	doc    map[string]any
}

// snapshot lists every object the account holds, by path, following every next_page_uri; nested
// collections are listed under each of their parents.
func snapshot(t *testing.T, e *env, a account) map[string]object {
	t.Helper()
	out := map[string]object{}
	var list func(res *ep.Resource, parent string)
	list = func(res *ep.Resource, parent string) {
		path := res.Path
		if res.Parent != nil {
			i, j := strings.Index(path, "{"), strings.Index(path, "}")
			path = path[:i] + parent + path[j+1:]
		}
		next := path + "?limit=100"
		for next != "" {
			r := e.do(a.token, "GET", next, nil).must(t, 200)
			for _, item := range r.items(t, res.ListKey) {
				id, _ := item["id"].(string)
				if !ep.ValidID(res.Prefix, id) {
					t.Fatalf("list %s holds an item without a valid %s id: %v", path, res.Prefix, item)
				}
				canon, err := json.Marshal(item)
				if err != nil {
					t.Fatal(err)
				}
				o := object{res: res, id: id, parent: parent, path: path + "/" + id, raw: string(canon), doc: item}
				if _, dup := out[o.path]; dup {
					t.Fatalf("%s listed twice", o.path)
				}
				out[o.path] = o
			}
			n, _ := r.body["next_page_uri"].(string)
			next = ""
			if n != "" {
				u, err := url.Parse(n)
				if err != nil {
					t.Fatalf("next_page_uri %q: %v", n, err)
				}
				next = u.RequestURI()
			}
		}
	}
	for _, res := range ep.Resources {
		if res.Parent == nil {
			list(res, "")
		}
	}
	for _, res := range ep.Resources {
		if res.Parent == nil {
			continue
		}
		for _, o := range sortedObjects(out) {
			if o.res == res.Parent {
				list(res, o.id)
			}
		}
	}
	return out
}

// sortedObjects returns the objects of a snapshot in path order.
func sortedObjects(m map[string]object) []object {
	out := make([]object, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// objectsOf returns the objects of one collection in a snapshot, in path order.
func objectsOf(m map[string]object, res *ep.Resource) []object {
	var out []object
	for _, o := range sortedObjects(m) {
		if o.res == res {
			out = append(out, o)
		}
	}
	return out
}

// apiOp is one authenticated operation of the generated OpenAPI document.
type apiOp struct {
	method  string // upper case
	pattern string // "/edges/https/{edge_id}/routes/{id}/oauth"
	res     *ep.Resource
	module  string // the module's name for module paths, "" otherwise
	body    bool   // it takes a request body
}

// apiOps reads GET /openapi.json and returns every authenticated operation in it, with the
// collection each belongs to.
func apiOps(t *testing.T, e *env) []apiOp {
	t.Helper()
	r := e.doHeaders(nil, "GET", "/openapi.json", nil).must(t, 200)
	paths, _ := r.body["paths"].(map[string]any)
	if len(paths) == 0 {
		t.Fatalf("the OpenAPI document has no paths")
	}
	var out []apiOp
	for pattern, v := range paths {
		for method, opv := range v.(map[string]any) {
			op := opv.(map[string]any)
			if sec, ok := op["security"].([]any); ok && len(sec) == 0 {
				continue // /healthz, /readyz, /openapi.json, /metrics
			}
			res, module := resourceOfPattern(pattern)
			if res == nil {
				t.Fatalf("OpenAPI path %s belongs to no collection of the resource table", pattern)
			}
			_, hasBody := op["requestBody"]
			out = append(out, apiOp{method: strings.ToUpper(method), pattern: pattern, res: res, module: module, body: hasBody})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].pattern != out[j].pattern {
			return out[i].pattern < out[j].pattern
		}
		return out[i].method < out[j].method
	})
	return out
}

// storedOps is apiOps without the live collections' operations (agent sessions and tunnels):
// their objects exist only while agents are online, which e2e/agents tests.
func storedOps(t *testing.T, e *env) []apiOp {
	var out []apiOp
	for _, op := range apiOps(t, e) {
		if !slices.Contains(ep.LiveResources, op.res) {
			out = append(out, op)
		}
	}
	return out
}

// resourceOfPattern finds the collection of a route pattern (the longest collection path it
// starts with) and, for a module path, the module's name.
func resourceOfPattern(pattern string) (*ep.Resource, string) {
	var best *ep.Resource
	for _, res := range append(ep.Resources[:len(ep.Resources):len(ep.Resources)], ep.LiveResources...) {
		if (pattern == res.Path || strings.HasPrefix(pattern, res.Path+"/{id}")) && (best == nil || len(res.Path) > len(best.Path)) {
			best = res
		}
	}
	if best == nil {
		return nil, ""
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(pattern, best.Path), "/{id}")
	return best, strings.TrimPrefix(rest, "/")
}

// fill replaces the {edge_id} and {id} of a pattern.
func fill(pattern, edgeID, id string) string {
	return strings.NewReplacer("{edge_id}", edgeID, "{id}", id).Replace(pattern)
}
