package server_test

import (
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/segmentio/ksuid"
)

// fixture is what the generic lifecycle tests need to know about one collection: a valid create
// body (creating whatever it depends on first) and a valid update body. Every entry of the
// resource table must have one: a new entry without a fixture fails TestEveryResourceHasFixture.
type fixture struct {
	create func(e *env, a account) map[string]any
	update map[string]any
	// text is a string field of both bodies, for the type and length checks.
	text string
	// writeOnly are create-body fields that no response may show (a private key, the parameters
	// of a generated key): instead of the round trip, the test asserts they are absent.
	writeOnly []string
	// parent creates the parent object of a nested collection and returns its id.
	parent func(e *env, a account) string
}

// collectionPath is the collection's path in the account: for a nested collection, under a new
// parent made by the fixture.
func collectionPath(e *env, a account, res *ep.Resource, fx fixture) string {
	if res.Parent == nil {
		return res.Path
	}
	parentID := fx.parent(e, a)
	i, j := strings.Index(res.Path, "{"), strings.Index(res.Path, "}")
	return res.Path[:i] + parentID + res.Path[j+1:]
}

// reserve creates a reserved domain in the account and returns the name.
func reserve(e *env, a account) string {
	name := freshDomain("edge")
	e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": name}).must(e.t, 201)
	return name
}

// reserveAddr creates a reserved TCP address in the account and returns it.
func reserveAddr(e *env, a account) string {
	return e.do(a.token, "POST", "/reserved_addrs", map[string]any{}).must(e.t, 201).str("addr")
}

func staticBackend(e *env, a account) string {
	return e.do(a.token, "POST", "/backends/static", map[string]any{"address": "10.0.0.1:80"}).must(e.t, 201).str("id")
}

var routeCounter atomic.Int64

func routeMatch() string { return "/r" + strconv.FormatInt(routeCounter.Add(1), 10) }

var fixtures = map[string]fixture{
	"reserved_addr": {
		create: func(*env, account) map[string]any { return map[string]any{"description": "db", "region": "us"} },
		update: map[string]any{"description": "db 2", "metadata": "m"},
		text:   "description",
	},
	"tunnel_group_backend": {
		create: func(*env, account) map[string]any {
			return map[string]any{"description": "tg", "labels": map[string]any{"edge": "web"}}
		},
		update: map[string]any{"labels": map[string]any{"dc": "eu-1"}, "metadata": "m"},
		text:   "description",
	},
	"static_backend": {
		create: func(*env, account) map[string]any {
			return map[string]any{"address": "10.0.0.1:8080", "tls": map[string]any{"enabled": true}, "description": "s"}
		},
		update: map[string]any{"address": "app.internal.example.com:443", "description": "s2"},
		text:   "description",
	},
	"http_response_backend": {
		create: func(*env, account) map[string]any {
			return map[string]any{"status_code": float64(503), "body": "down", "headers": map[string]any{"content-type": "text/plain"}}
		},
		update: map[string]any{"status_code": float64(200), "body": "up"},
		text:   "description",
	},
	"failover_backend": {
		create: func(e *env, a account) map[string]any {
			return map[string]any{"backends": []any{staticBackend(e, a), staticBackend(e, a)}, "description": "f"}
		},
		update: map[string]any{"description": "f2"},
		text:   "description",
	},
	"weighted_backend": {
		create: func(e *env, a account) map[string]any {
			return map[string]any{"backends": map[string]any{staticBackend(e, a): float64(3)}, "description": "w"}
		},
		update: map[string]any{"description": "w2"},
		text:   "description",
	},
	"tls_edge": {
		create: func(e *env, a account) map[string]any {
			return map[string]any{"hostports": []any{reserve(e, a) + ":443"}, "description": "tls"}
		},
		update: map[string]any{"description": "tls 2", "metadata": "m"},
		text:   "description",
	},
	"https_edge": {
		create: func(e *env, a account) map[string]any {
			return map[string]any{"hostports": []any{reserve(e, a) + ":443"}, "description": "https"}
		},
		update: map[string]any{"description": "https 2", "metadata": "m"},
		text:   "description",
	},
	"https_edge_route": {
		parent: func(e *env, a account) string {
			return e.do(a.token, "POST", "/edges/https", map[string]any{}).must(e.t, 201).str("id")
		},
		create: func(*env, account) map[string]any {
			return map[string]any{"match_type": "path_prefix", "match": routeMatch(), "description": "r"}
		},
		update: map[string]any{"match_type": "exact_path", "description": "r2"},
		text:   "description",
	},
	"tcp_edge": {
		create: func(e *env, a account) map[string]any {
			return map[string]any{"hostports": []any{reserveAddr(e, a)}, "description": "tcp"}
		},
		update: map[string]any{"description": "tcp 2"},
		text:   "description",
	},
	"api_key": {
		create: func(*env, account) map[string]any {
			return map[string]any{"description": "ci", "metadata": `{"team":"a"}`}
		},
		update: map[string]any{"description": "ci runner", "metadata": "m2"},
		text:   "description",
	},
	"credential": {
		create: func(*env, account) map[string]any {
			return map[string]any{"description": "agent", "metadata": "m", "acl": []any{"bind:*.example.com", "bind:edge=web"}}
		},
		update: map[string]any{"description": "agent 2", "acl": []any{"bind:app.example.com"}},
		text:   "description",
	},
	"bot_user": {
		create: func(*env, account) map[string]any { return map[string]any{"name": "deployer", "active": true} },
		update: map[string]any{"name": "deployer-2", "active": false},
		text:   "name",
	},
	"ip_policy": {
		create: func(*env, account) map[string]any { return map[string]any{"description": "office", "metadata": "m"} },
		update: map[string]any{"description": "office 2", "metadata": ""},
		text:   "description",
	},
	"ip_policy_rule": {
		create: func(e *env, a account) map[string]any {
			p := e.do(a.token, "POST", "/ip_policies", map[string]any{}).must(e.t, 201)
			return map[string]any{"ip_policy_id": p.str("id"), "cidr": "10.0.0.0/8", "action": "allow", "description": "lan"}
		},
		update: map[string]any{"cidr": "2001:db8::/32", "description": "v6"},
		text:   "description",
	},
	"reserved_domain": {
		create: func(*env, account) map[string]any {
			return map[string]any{"domain": freshDomain("lc"), "region": "eu", "description": "web", "metadata": "m"}
		},
		update: map[string]any{"description": "web 2", "metadata": "m2",
			"certificate_management_policy": map[string]any{"authority": "letsencrypt", "private_key_type": "ecdsa"}},
		text: "description",
	},
	"tls_certificate": {
		create: func(e *env, _ account) map[string]any {
			p := testPKI(e.t)
			return map[string]any{"certificate_pem": chainPEM(p.leafECDSA, p.inter), "private_key_pem": p.leafECDSA.keyPEM, "description": "web"}
		},
		update:    map[string]any{"description": "web 2", "metadata": "m2"},
		text:      "description",
		writeOnly: []string{"private_key_pem"},
	},
	"certificate_authority": {
		create: func(e *env, _ account) map[string]any {
			return map[string]any{"ca_pem": testPKI(e.t).root.pem, "description": "clients", "metadata": "m"}
		},
		update: map[string]any{"description": "clients 2", "metadata": "m2"},
		text:   "description",
	},
	"ssh_certificate_authority": {
		create: func(*env, account) map[string]any {
			return map[string]any{"private_key_type": "ecdsa", "elliptic_curve": "p256", "description": "ops", "metadata": "m"}
		},
		update:    map[string]any{"description": "ops 2", "metadata": "m2"},
		text:      "description",
		writeOnly: []string{"private_key_type", "elliptic_curve"},
	},
	"ssh_user_certificate": {
		create: func(e *env, a account) map[string]any {
			ca := e.do(a.token, "POST", "/ssh_certificate_authorities", map[string]any{"private_key_type": "ed25519"}).must(e.t, 201)
			return map[string]any{
				"ssh_certificate_authority_id": ca.str("id"), "public_key": testPKI(e.t).sshEd25519,
				"principals": []any{"deploy", "root"}, "critical_options": map[string]any{"source-address": "10.0.0.0/8,192.0.2.1"},
				"extensions":  map[string]any{"permit-pty": "", "permit-port-forwarding": ""},
				"valid_after": "2030-01-01T00:00:00Z", "valid_until": "2030-01-02T00:00:00Z", "description": "deploy",
			}
		},
		update: map[string]any{"description": "deploy 2", "metadata": "m2"},
		text:   "description",
	},
	"ssh_host_certificate": {
		create: func(e *env, a account) map[string]any {
			ca := e.do(a.token, "POST", "/ssh_certificate_authorities", map[string]any{"private_key_type": "ed25519"}).must(e.t, 201)
			return map[string]any{
				"ssh_certificate_authority_id": ca.str("id"), "public_key": testPKI(e.t).sshECDSA,
				"principals": []any{"host.example.com"}, "valid_after": "2030-01-01T00:00:00Z", "valid_until": "2031-01-01T00:00:00Z",
				"description": "bastion",
			}
		},
		update: map[string]any{"description": "bastion 2", "metadata": "m2"},
		text:   "description",
	},
}

// forEachFixture runs fn as a subtest, on the one env e, for every entry of the resource table
// that has a fixture (TestEveryResourceHasFixture fails for those that have none).
func forEachFixture(t *testing.T, e *env, fn func(t *testing.T, e *env, res *ep.Resource, fx fixture)) {
	for _, res := range ep.Resources {
		fx, ok := fixtures[res.Kind]
		if !ok {
			continue
		}
		t.Run(res.Kind, func(t *testing.T) {
			e.t = t
			fn(t, e, res, fx)
		})
	}
}

func TestEveryResourceHasFixture(t *testing.T) {
	for _, res := range ep.Resources {
		if _, ok := fixtures[res.Kind]; !ok {
			t.Errorf("resource %q has no fixture in lifecycle_test.go: add one so it gets lifecycle tests", res.Kind)
		}
	}
}

// TestLifecycle runs create, get, list, update and delete, and every generic error path, for every
// entry of the resource table.
func TestLifecycle(t *testing.T) {
	forEachFixture(t, newEnv(t), func(t *testing.T, e *env, res *ep.Resource, fx fixture) {
		a := e.newAccount("lc-" + res.Kind)
		other := e.newAccount("other-" + res.Kind)
		path := collectionPath(e, a, res, fx)
		body := fx.create(e, a)

		created := e.do(a.token, "POST", path, body).must(t, 201)
		id := created.str("id")
		if !ep.ValidID(res.Prefix, id) {
			t.Fatalf("id %q does not have prefix %s_ and a KSUID", id, res.Prefix)
		}
		k, _ := ksuid.Parse(strings.TrimPrefix(id, res.Prefix+"_"))
		if got, want := created.str("created_at"), k.Time().UTC().Format(time.RFC3339); got != want {
			t.Fatalf("created_at %s, want the id's time %s", got, want)
		}
		if got, want := created.str("uri"), e.base+path+"/"+id; got != want {
			t.Fatalf("uri %s, want %s", got, want)
		}
		for field, v := range body {
			if slices.Contains(fx.writeOnly, field) {
				if _, shown := created.body[field]; shown {
					t.Fatalf("create response shows the write-only field %s: %s", field, created.raw)
				}
				continue
			}
			if strings.HasSuffix(field, "_id") {
				continue
			}
			if !equalJSON(created.body[field], v) {
				t.Fatalf("created %s = %v, want %v", field, created.body[field], v)
			}
		}
		_, hasToken := created.body["token"]
		if hasToken {
			if tok, _ := created.body["token"].(string); tok == "" {
				t.Fatalf("create response has no token: %s", created.raw)
			}
		}

		got := e.do(a.token, "GET", path+"/"+id, nil).must(t, 200)
		for _, field := range fx.writeOnly {
			if _, shown := got.body[field]; shown {
				t.Fatalf("GET shows the write-only field %s: %s", field, got.raw)
			}
		}
		for field, v := range created.body {
			if field == "token" {
				if got.body["token"] != nil {
					t.Fatalf("token shown again on GET: %s", got.raw)
				}
				continue
			}
			if !equalJSON(got.body[field], v) {
				t.Fatalf("GET %s = %v, created %v", field, got.body[field], v)
			}
		}

		list := e.do(a.token, "GET", path, nil).must(t, 200)
		if list.str("uri") != e.base+path || list.body["next_page_uri"] != nil {
			t.Fatalf("list envelope: %s", list.raw)
		}
		found := false
		for _, item := range list.items(t, res.ListKey) {
			if item["id"] == id {
				found = true
			}
			if hasToken && item["token"] != nil {
				t.Fatalf("token shown in list: %v", item)
			}
		}
		if !found {
			t.Fatalf("created object missing from list: %s", list.raw)
		}

		// Update: the named fields change, null and absent fields do not, "" clears.
		updated := e.do(a.token, "PATCH", path+"/"+id, fx.update).must(t, 200)
		for field, v := range fx.update {
			if !equalJSON(updated.body[field], v) {
				t.Fatalf("updated %s = %v, want %v", field, updated.body[field], v)
			}
		}
		if hasToken && updated.body["token"] != nil {
			t.Fatalf("token shown on update: %s", updated.raw)
		}
		nulls := map[string]any{}
		for field := range fx.update {
			nulls[field] = nil
		}
		for _, b := range []any{nulls, map[string]any{}, ""} {
			same := e.do(a.token, "PATCH", path+"/"+id, b).must(t, 200)
			for field, v := range fx.update {
				if !equalJSON(same.body[field], v) {
					t.Fatalf("PATCH %v changed %s to %v", b, field, same.body[field])
				}
			}
		}
		if _, ok := created.body["description"]; ok {
			cleared := e.do(a.token, "PATCH", path+"/"+id, map[string]any{"description": ""}).must(t, 200)
			if cleared.body["description"] != "" {
				t.Fatalf(`PATCH description "" did not clear it: %s`, cleared.raw)
			}
		}

		// Echoed ids: equal to the path is fine, anything else is refused.
		e.do(a.token, "PATCH", path+"/"+id, map[string]any{"id": id}).must(t, 200)
		e.do(a.token, "PATCH", path+"/"+id, map[string]any{"id": res.Prefix + "_x"}).wantError(t, 400, ep.CodeInvalid)
		e.do(a.token, "POST", path, merge(fx.create(e, a), map[string]any{"id": id})).wantError(t, 400, ep.CodeInvalid)

		// Generic body errors on create and update, none of which changes anything.
		before := e.do(a.token, "GET", path+"/"+id, nil).must(t, 200)
		countBefore := len(e.do(a.token, "GET", path, nil).must(t, 200).items(t, res.ListKey))
		for _, c := range []struct {
			method, path string
		}{{"POST", path}, {"PATCH", path + "/" + id}} {
			r := e.do(a.token, c.method, c.path, map[string]any{"no_such_field": 1}).wantError(t, 400, ep.CodeUnknownField)
			if !strings.Contains(r.msg(), `"no_such_field"`) || !strings.Contains(r.msg(), fx.text) {
				t.Fatalf("unknown-field message should name the field and the supported ones: %s", r.msg())
			}
			r = e.do(a.token, c.method, c.path, map[string]any{fx.text: 42}).wantError(t, 400, ep.CodeInvalid)
			if !strings.HasPrefix(r.msg(), fx.text) {
				t.Fatalf("wrong-type message should start with the field: %s", r.msg())
			}
			e.do(a.token, c.method, c.path, map[string]any{fx.text: strings.Repeat("x", 256)}).wantError(t, 400, ep.CodeInvalid)
			if _, ok := created.body["metadata"]; ok {
				e.do(a.token, c.method, c.path, map[string]any{"metadata": strings.Repeat("x", 4097)}).wantError(t, 400, ep.CodeInvalid)
			}
			e.do(a.token, c.method, c.path, `{"description": "x"`).wantError(t, 400, ep.CodeBadJSON)
			e.do(a.token, c.method, c.path, `[]`).wantError(t, 400, ep.CodeBadJSON)
			e.do(a.token, c.method, c.path, `{} {}`).wantError(t, 400, ep.CodeBadJSON)
		}
		if after := e.do(a.token, "GET", path+"/"+id, nil).must(t, 200); string(after.raw) != string(before.raw) {
			t.Fatalf("a rejected request changed the object:\n%s\n%s", before.raw, after.raw)
		}
		if n := len(e.do(a.token, "GET", path, nil).must(t, 200).items(t, res.ListKey)); n != countBefore {
			t.Fatalf("a rejected create created an object: %d objects, had %d", n, countBefore)
		}

		// Another account's object does not exist for the caller.
		e.do(other.token, "GET", path+"/"+id, nil).wantError(t, 404, ep.CodeNotFound)
		e.do(other.token, "PATCH", path+"/"+id, fx.update).wantError(t, 404, ep.CodeNotFound)
		e.do(other.token, "DELETE", path+"/"+id, nil).wantError(t, 404, ep.CodeNotFound)
		if res.Parent != nil {
			// The parent does not exist for the other account either.
			e.do(other.token, "GET", path, nil).wantError(t, 404, ep.CodeNotFound)
		} else {
			for _, item := range e.do(other.token, "GET", path, nil).must(t, 200).items(t, res.ListKey) {
				if item["id"] == id {
					t.Fatalf("another account's list shows %s", id)
				}
			}
		}

		// Delete: 204 with no body, then the object is gone.
		del := e.do(a.token, "DELETE", path+"/"+id, nil).must(t, 204)
		if len(del.raw) != 0 {
			t.Fatalf("204 with a body: %q", del.raw)
		}
		e.do(a.token, "GET", path+"/"+id, nil).wantError(t, 404, ep.CodeNotFound)
		e.do(a.token, "PATCH", path+"/"+id, fx.update).wantError(t, 404, ep.CodeNotFound)
		e.do(a.token, "DELETE", path+"/"+id, nil).wantError(t, 404, ep.CodeNotFound)
		missing, _ := ep.NewID(res.Prefix)
		e.do(a.token, "GET", path+"/"+missing, nil).wantError(t, 404, ep.CodeNotFound)
	})
}

// TestPaging pages through more than two pages of every collection.
func TestPaging(t *testing.T) {
	forEachFixture(t, newEnv(t), func(t *testing.T, e *env, res *ep.Resource, fx fixture) {
		a := e.newAccount("paging-" + res.Kind)
		path := collectionPath(e, a, res, fx)
		for range 5 {
			e.do(a.token, "POST", path, fx.create(e, a)).must(t, 201)
		}
		all := e.do(a.token, "GET", path+"?limit=100", nil).must(t, 200).items(t, res.ListKey)
		if len(all) < 5 {
			t.Fatalf("list has %d objects, want at least 5", len(all))
		}
		var ids []string
		cursor, pages := path+"?limit=2&before_id=", 0
		for {
			page := e.do(a.token, "GET", cursor, nil).must(t, 200)
			pages++
			items := page.items(t, res.ListKey)
			if len(items) > 2 {
				t.Fatalf("page of %d with limit 2", len(items))
			}
			for _, it := range items {
				ids = append(ids, it["id"].(string))
			}
			next, _ := page.body["next_page_uri"].(string)
			if next == "" {
				if page.body["next_page_uri"] != nil {
					t.Fatalf("next_page_uri on the last page: %s", page.raw)
				}
				break
			}
			if !strings.HasPrefix(next, e.base+path+"?") {
				t.Fatalf("next_page_uri %q does not start with %q", next, e.base+path+"?")
			}
			cursor = strings.TrimPrefix(next, e.base)
		}
		if want := (len(all) + 1) / 2; pages != want {
			t.Fatalf("%d pages, want %d", pages, want)
		}
		if len(ids) != len(all) {
			t.Fatalf("paging returned %d objects, the full list %d", len(ids), len(all))
		}
		for i := range ids {
			if ids[i] != all[i]["id"] {
				t.Fatalf("page order differs from list order at %d", i)
			}
			if i > 0 && ids[i] >= ids[i-1] {
				t.Fatalf("not newest first: %s after %s", ids[i], ids[i-1])
			}
		}
		// The other client's spelling of the cursor.
		second := e.do(a.token, "GET", path+"?limit=2&beforeId="+ids[1], nil).must(t, 200).items(t, res.ListKey)
		if len(second) == 0 || second[0]["id"] != ids[2] {
			t.Fatalf("beforeId did not page: %v", second)
		}
	})
}

func TestPagingLimits(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"limit=0", "limit=101", "limit=abc", "limit=-1", "limit=1.5", "limit=99999999999999999999"} {
		r := e.do(e.admin.token, "GET", "/ip_policies?"+q, nil).wantError(t, 400, ep.CodeBadLimit)
		if !strings.HasPrefix(r.msg(), "limit") {
			t.Fatalf("%s: message should name limit: %s", q, r.msg())
		}
	}
	for range 3 {
		e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201)
	}
	r := e.do(e.admin.token, "GET", "/ip_policies?limit=1", nil).must(t, 200)
	if n := len(r.items(t, "ip_policies")); n != 1 {
		t.Fatalf("limit=1 gave %d", n)
	}
	if next, _ := r.body["next_page_uri"].(string); !strings.Contains(next, "limit=1") {
		t.Fatalf("next_page_uri should keep the limit: %q", next)
	}
	// A cursor below every id: an empty page, whose next_page_uri is null.
	empty := e.do(e.admin.token, "GET", "/ip_policies?before_id=ipp_"+strings.Repeat("0", 27), nil).must(t, 200)
	if len(empty.items(t, "ip_policies")) != 0 || empty.body["next_page_uri"] != nil {
		t.Fatalf("empty page: %s", empty.raw)
	}
	// Default limit 100 with more than 100 objects.
	for range 99 {
		e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201)
	}
	full := e.do(e.admin.token, "GET", "/ip_policies", nil).must(t, 200)
	if n := len(full.items(t, "ip_policies")); n != 100 || full.body["next_page_uri"] == nil {
		t.Fatalf("default page: %d items, next %v", n, full.body["next_page_uri"])
	}
	if next := full.body["next_page_uri"].(string); strings.Contains(next, "limit=") {
		t.Fatalf("next_page_uri invents a limit the client did not send: %s", next)
	}
}

// TestBaseURLWithPath: behind a reverse proxy at https://host/api, every uri starts with it.
func TestBaseURLWithPath(t *testing.T) {
	e := newEnvBase(t, "https://proxy.example.test/api")
	for range 3 {
		e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201)
	}
	r := e.do(e.admin.token, "GET", "/ip_policies?limit=2", nil).must(t, 200)
	if r.str("uri") != "https://proxy.example.test/api/ip_policies" {
		t.Fatalf("uri %s", r.str("uri"))
	}
	if next, _ := r.body["next_page_uri"].(string); !strings.HasPrefix(next, "https://proxy.example.test/api/ip_policies?before_id=") {
		t.Fatalf("next_page_uri %s", next)
	}
	if uri := r.items(t, "ip_policies")[0]["uri"].(string); !strings.HasPrefix(uri, "https://proxy.example.test/api/ip_policies/ipp_") {
		t.Fatalf("object uri %s", uri)
	}
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// equalJSON compares decoded JSON values, treating a []any and a []string alike.
func equalJSON(got, want any) bool {
	switch w := want.(type) {
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !equalJSON(g[i], w[i]) {
				return false
			}
		}
		return true
	case []string:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if g[i] != w[i] {
				return false
			}
		}
		return true
	case int:
		return got == float64(w)
	}
	return reflect.DeepEqual(got, want)
}

var _ = http.StatusOK
