package server_test

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
)

// TestStaticBackendRules: address is host:port (215), tls.enabled defaults to false.
func TestStaticBackendRules(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	for _, addr := range []string{"10.0.0.1:80", "app.internal.example.com:8443", "localhost:3000", "[::1]:443", "[2001:db8::1]:65535"} {
		r := e.do(tok, "POST", "/backends/static", map[string]any{"address": addr}).must(t, 201)
		if r.str("address") != addr {
			t.Fatalf("address %s stored as %s", addr, r.str("address"))
		}
		sameJSON(t, "default tls", r.body["tls"], map[string]any{"enabled": false})
	}
	for _, addr := range []any{"10.0.0.1", "example.com", "example.com:", ":80", "example.com:0", "example.com:65536", "example.com:-1",
		"example.com:http", "example.com:080", "::1:80", "[::1]", "[10.0.0.1]:80", "http://example.com:80", "exa mple.com:80", "", "ex_ample.com:80"} {
		r := e.do(tok, "POST", "/backends/static", map[string]any{"address": addr}).wantError(t, 400, ep.CodeInvalid)
		wantErrField(t, r, "address")
	}
	r := e.do(tok, "POST", "/backends/static", map[string]any{}).wantError(t, 400, ep.CodeInvalid)
	wantErrField(t, r, "address")
	e.do(tok, "POST", "/backends/static", map[string]any{"address": 80}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "POST", "/backends/static", map[string]any{"address": "a.example.com:1", "tls": map[string]any{"enabled": "yes"}}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "POST", "/backends/static", map[string]any{"address": "a.example.com:1", "tls": map[string]any{"verify": true}}).wantError(t, 400, ep.CodeUnknownField)

	c := e.do(tok, "POST", "/backends/static", map[string]any{"address": "a.example.com:1", "tls": map[string]any{"enabled": true}}).must(t, 201)
	path := "/backends/static/" + c.str("id")
	sameJSON(t, "tls on", c.body["tls"], map[string]any{"enabled": true})
	for _, b := range []map[string]any{{"tls": map[string]any{}}, {"tls": nil}, {"tls": map[string]any{"enabled": nil}}, {"address": nil}} {
		got := e.do(tok, "PATCH", path, b).must(t, 200)
		if got.str("address") != "a.example.com:1" || !equalJSON(got.body["tls"], map[string]any{"enabled": true}) {
			t.Fatalf("PATCH %v changed the backend: %s", b, got.raw)
		}
	}
	got := e.do(tok, "PATCH", path, map[string]any{"tls": map[string]any{"enabled": false}, "address": "b.example.com:2"}).must(t, 200)
	if got.str("address") != "b.example.com:2" || !equalJSON(got.body["tls"], map[string]any{"enabled": false}) {
		t.Fatalf("PATCH: %s", got.raw)
	}
	wantErrField(t, e.do(tok, "PATCH", path, map[string]any{"address": "nope"}).wantError(t, 400, ep.CodeInvalid), "address")
	wantErrField(t, e.do(tok, "PATCH", path, map[string]any{"address": ""}).wantError(t, 400, ep.CodeInvalid), "address")
}

// TestHTTPResponseBackendRules: status_code 100..599 and required, body at most 64 KiB, headers
// valid and returned with lowercased names.
func TestHTTPResponseBackendRules(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	for _, code := range []int{100, 200, 418, 599} {
		r := e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": code}).must(t, 201)
		if r.body["status_code"] != float64(code) || r.body["body"] != "" {
			t.Fatalf("status %d: %s", code, r.raw)
		}
		sameJSON(t, "default headers", r.body["headers"], map[string]any{})
	}
	for _, code := range []any{99, 600, 0, -200, 1000, 200.5, "200"} {
		r := e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": code}).wantError(t, 400, ep.CodeInvalid)
		wantErrField(t, r, "status_code")
	}
	wantErrField(t, e.do(tok, "POST", "/backends/http_response", map[string]any{"body": "x"}).wantError(t, 400, ep.CodeInvalid), "status_code")

	full := strings.Repeat("x", ep.MaxHTTPResponseBody)
	r := e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": 200, "body": full}).must(t, 201)
	if r.str("body") != full {
		t.Fatalf("a body of exactly 64 KiB was not kept (%d bytes)", len(r.str("body")))
	}
	path := "/backends/http_response/" + r.str("id")
	wantErrField(t, e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": 200, "body": full + "x"}).
		wantError(t, 400, ep.CodeInvalid), "body")
	wantErrField(t, e.do(tok, "PATCH", path, map[string]any{"body": full + "y"}).wantError(t, 400, ep.CodeInvalid), "body")
	wantErrField(t, e.do(tok, "PATCH", path, map[string]any{"status_code": 600}).wantError(t, 400, ep.CodeInvalid), "status_code")

	h := e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": 302,
		"headers": map[string]any{"Location": "https://example.com/", "X-Custom-Header": "A", "content-type": "text/plain"}}).must(t, 201)
	want := map[string]any{"location": "https://example.com/", "x-custom-header": "A", "content-type": "text/plain"}
	sameJSON(t, "lowercased headers", h.body["headers"], want)
	hpath := "/backends/http_response/" + h.str("id")
	sameJSON(t, "GET headers", e.do(tok, "GET", hpath, nil).must(t, 200).body["headers"], want)
	sameJSON(t, "PATCH headers", e.do(tok, "PATCH", hpath, map[string]any{"headers": map[string]any{"Retry-After": "5"}}).must(t, 200).body["headers"],
		map[string]any{"retry-after": "5"})
	sameJSON(t, "PATCH without headers", e.do(tok, "PATCH", hpath, map[string]any{"body": "b"}).must(t, 200).body["headers"],
		map[string]any{"retry-after": "5"})
	for _, hdr := range []map[string]any{{"Bad Name": "x"}, {"": "x"}, {"X-A": "a\r\nb"}, {"X-A": "a\nb"}, {"X(A)": "x"}} {
		wantErrField(t, e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": 200, "headers": hdr}).
			wantError(t, 400, ep.CodeInvalid), "headers")
	}
	// Two names that differ only in case are one header once lowercased: refused rather than
	// keeping one of the two values at random.
	for range 5 {
		wantErrField(t, e.do(tok, "POST", "/backends/http_response", map[string]any{"status_code": 200,
			"headers": map[string]any{"X-Dup": "1", "x-dup": "2"}}).wantError(t, 400, ep.CodeInvalid), "headers")
	}
}

// TestTunnelGroupBackend: labels map (default {}), tunnels [] until agents exist.
func TestTunnelGroupBackend(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	r := e.do(tok, "POST", "/backends/tunnel_group", map[string]any{}).must(t, 201)
	sameJSON(t, "default labels", r.body["labels"], map[string]any{})
	sameJSON(t, "tunnels", r.body["tunnels"], []any{})
	labels := map[string]any{"edge": "edghts_2abc", "dc": "eu-west.1", "team_x": "A-1"}
	r = e.do(tok, "POST", "/backends/tunnel_group", map[string]any{"labels": labels}).must(t, 201)
	sameJSON(t, "labels", r.body["labels"], labels)
	sameJSON(t, "tunnels", r.body["tunnels"], []any{})
	path := "/backends/tunnel_group/" + r.str("id")
	got := e.do(tok, "GET", path, nil).must(t, 200)
	sameJSON(t, "GET labels", got.body["labels"], labels)
	sameJSON(t, "GET tunnels", got.body["tunnels"], []any{})
	sameJSON(t, "PATCH labels", e.do(tok, "PATCH", path, map[string]any{"labels": map[string]any{"a": "b"}}).must(t, 200).body["labels"], map[string]any{"a": "b"})
	sameJSON(t, "PATCH without labels", e.do(tok, "PATCH", path, map[string]any{"labels": nil}).must(t, 200).body["labels"], map[string]any{"a": "b"})
	for _, l := range []map[string]any{{"a b": "c"}, {"a": "b c"}, {"": "x"}, {"x": ""}, {"*": "x"}, {"x": "*"}, {"k": "v=w"}} {
		wantErrField(t, e.do(tok, "POST", "/backends/tunnel_group", map[string]any{"labels": l}).wantError(t, 400, ep.CodeInvalid), "labels")
	}
	e.do(tok, "POST", "/backends/tunnel_group", map[string]any{"labels": map[string]any{"a": 1}}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "POST", "/backends/tunnel_group", map[string]any{"tunnels": []any{}}).wantError(t, 400, ep.CodeUnknownField)
}

// TestCompositeBackendRules: failover and weighted backends reference existing backends of the
// account (6501), weights are 0..10000, a child is listed once.
func TestCompositeBackendRules(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k, ko := edgeKit{e, e.admin}, edgeKit{e, e.newAccount("composite-other")}
	s1, s2 := k.backend(), k.backend()
	tg := k.post("/backends/tunnel_group", map[string]any{}).str("id")
	hr := k.post("/backends/http_response", map[string]any{"status_code": 503}).str("id")
	missing, _ := ep.NewID(ep.StaticBackends.Prefix)
	notBackend := k.ipPolicy()

	t.Run("failover", func(t *testing.T) {
		e.t = t
		r := k.post("/backends/failover", map[string]any{"backends": []any{s2, tg, hr, s1}})
		sameJSON(t, "order kept", r.body["backends"], []any{s2, tg, hr, s1})
		sameJSON(t, "empty default", k.post("/backends/failover", map[string]any{}).body["backends"], []any{})
		inner := k.post("/backends/failover", map[string]any{"backends": []any{s1}}).str("id")
		w := k.post("/backends/weighted", map[string]any{"backends": map[string]any{s1: 1}}).str("id")
		k.post("/backends/failover", map[string]any{"backends": []any{inner, w}})
		for _, child := range []string{missing, ko.backend(), notBackend, "bkdsa_x", ""} {
			r := e.do(tok, "POST", "/backends/failover", map[string]any{"backends": []any{s1, child}}).wantError(t, 400, ep.CodeBackendMissing)
			wantErrField(t, r, "backends")
			e.do(tok, "PATCH", "/backends/failover/"+inner, map[string]any{"backends": []any{child}}).wantError(t, 400, ep.CodeBackendMissing)
		}
		wantErrField(t, e.do(tok, "POST", "/backends/failover", map[string]any{"backends": []any{s1, s1}}).wantError(t, 400, ep.CodeInvalid), "backends")
		e.do(tok, "POST", "/backends/failover", map[string]any{"backends": map[string]any{s1: 1}}).wantError(t, 400, ep.CodeInvalid)
		// PATCH without backends keeps them; [] empties.
		sameJSON(t, "PATCH without backends", e.do(tok, "PATCH", "/backends/failover/"+inner, map[string]any{"description": "x"}).must(t, 200).body["backends"], []any{s1})
		sameJSON(t, "PATCH []", e.do(tok, "PATCH", "/backends/failover/"+inner, map[string]any{"backends": []any{}}).must(t, 200).body["backends"], []any{})
	})

	t.Run("weighted", func(t *testing.T) {
		e.t = t
		r := k.post("/backends/weighted", map[string]any{"backends": map[string]any{s1: 0, s2: 10000, tg: 1, hr: 5000}})
		sameJSON(t, "weights", r.body["backends"], map[string]any{s1: 0.0, s2: 10000.0, tg: 1.0, hr: 5000.0})
		sameJSON(t, "empty default", k.post("/backends/weighted", map[string]any{}).body["backends"], map[string]any{})
		id := r.str("id")
		for _, wgt := range []any{-1, 10001, 1 << 40} {
			wantErrField(t, e.do(tok, "POST", "/backends/weighted", map[string]any{"backends": map[string]any{s1: wgt}}).wantError(t, 400, ep.CodeInvalid), "backends")
			e.do(tok, "PATCH", "/backends/weighted/"+id, map[string]any{"backends": map[string]any{s1: wgt}}).wantError(t, 400, ep.CodeInvalid)
		}
		e.do(tok, "POST", "/backends/weighted", map[string]any{"backends": map[string]any{s1: 1.5}}).wantError(t, 400, ep.CodeInvalid)
		e.do(tok, "POST", "/backends/weighted", map[string]any{"backends": map[string]any{s1: "1"}}).wantError(t, 400, ep.CodeInvalid)
		e.do(tok, "POST", "/backends/weighted", map[string]any{"backends": []any{s1}}).wantError(t, 400, ep.CodeInvalid)
		for _, child := range []string{missing, ko.backend(), notBackend} {
			r := e.do(tok, "POST", "/backends/weighted", map[string]any{"backends": map[string]any{s1: 1, child: 1}}).wantError(t, 400, ep.CodeBackendMissing)
			wantErrField(t, r, "backends")
		}
		sameJSON(t, "after refusals", e.do(tok, "GET", "/backends/weighted/"+id, nil).must(t, 200).body["backends"],
			map[string]any{s1: 0.0, s2: 10000.0, tg: 1.0, hr: 5000.0})
	})

	// Each kind lists only its own backends under the "backends" key.
	t.Run("lists", func(t *testing.T) {
		e.t = t
		for _, c := range []struct {
			path, prefix string
		}{{"/backends/static", "bkdsa_"}, {"/backends/tunnel_group", "bkdtg_"}, {"/backends/http_response", "bkdhr_"},
			{"/backends/failover", "bkdfo_"}, {"/backends/weighted", "bkdwd_"}} {
			items := e.do(tok, "GET", c.path, nil).must(t, 200).items(t, "backends")
			if len(items) == 0 {
				t.Fatalf("%s lists nothing", c.path)
			}
			for _, it := range items {
				if !strings.HasPrefix(it["id"].(string), c.prefix) {
					t.Fatalf("%s lists %s", c.path, it["id"])
				}
			}
		}
	})
}

// TestBackendCycles: no backend may contain itself, directly or through failover and weighted
// backends (215).
func TestBackendCycles(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	s := k.backend()

	b := k.post("/backends/failover", map[string]any{"backends": []any{s}}).str("id")
	a := k.post("/backends/failover", map[string]any{"backends": []any{b}}).str("id")
	r := e.do(tok, "PATCH", "/backends/failover/"+b, map[string]any{"backends": []any{s, a}}).wantError(t, 400, ep.CodeInvalid)
	wantErrField(t, r, "backends")
	wantErrField(t, e.do(tok, "PATCH", "/backends/failover/"+a, map[string]any{"backends": []any{a}}).wantError(t, 400, ep.CodeInvalid), "backends")
	wantErrField(t, e.do(tok, "PATCH", "/backends/failover/"+a, map[string]any{"backends": []any{b, a}}).wantError(t, 400, ep.CodeInvalid), "backends")

	// Through weighted backends, three deep.
	w := k.post("/backends/weighted", map[string]any{"backends": map[string]any{a: 1, s: 1}}).str("id")
	c := k.post("/backends/failover", map[string]any{"backends": []any{w}}).str("id")
	e.do(tok, "PATCH", "/backends/failover/"+b, map[string]any{"backends": []any{c}}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "PATCH", "/backends/weighted/"+w, map[string]any{"backends": map[string]any{c: 1}}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "PATCH", "/backends/weighted/"+w, map[string]any{"backends": map[string]any{w: 1}}).wantError(t, 400, ep.CodeInvalid)
	// Nothing changed.
	sameJSON(t, "b", e.do(tok, "GET", "/backends/failover/"+b, nil).must(t, 200).body["backends"], []any{s})
	sameJSON(t, "w", e.do(tok, "GET", "/backends/weighted/"+w, nil).must(t, 200).body["backends"], map[string]any{a: 1.0, s: 1.0})
	// A diamond is not a cycle.
	k.post("/backends/failover", map[string]any{"backends": []any{a, b, c, w}})
	e.do(tok, "PATCH", "/backends/failover/"+b, map[string]any{"backends": []any{s}}).must(t, 200)
}

// TestBackendInUse: a backend used by a module or by a failover or weighted backend cannot be
// deleted (409 6502) until the use is gone.
func TestBackendInUse(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	del := func(id string) resp {
		t.Helper()
		return e.do(tok, "DELETE", "/backends/"+backendKind(id)+"/"+id, nil)
	}

	for _, m := range modulesNamed("backend") {
		t.Run(moduleKey(m), func(t *testing.T) {
			e.t = t
			p := k.parent(m.Parent)
			b := k.post("/backends/http_response", map[string]any{"status_code": 200}).str("id")
			e.do(tok, "PUT", p.path+"/backend", map[string]any{"backend_id": b, "enabled": false}).must(t, 200)
			msg := del(b).wantError(t, 409, ep.CodeBackendInUse).msg()
			if !strings.Contains(msg, b) {
				t.Fatalf("message should name the backend: %s", msg)
			}
			e.do(tok, "GET", "/backends/http_response/"+b, nil).must(t, 200)
			e.do(tok, "DELETE", p.path+"/backend", nil).must(t, 204)
			del(b).must(t, 204)
		})
	}

	t.Run("composite", func(t *testing.T) {
		e.t = t
		s1, s2 := k.backend(), k.backend()
		f := k.post("/backends/failover", map[string]any{"backends": []any{s1}}).str("id")
		w := k.post("/backends/weighted", map[string]any{"backends": map[string]any{s2: 3, f: 1}}).str("id")
		del(s1).wantError(t, 409, ep.CodeBackendInUse)
		del(s2).wantError(t, 409, ep.CodeBackendInUse)
		del(f).wantError(t, 409, ep.CodeBackendInUse)
		// A composite used by a route is in use too.
		edge := k.httpsEdge()
		route := k.route(edge)
		e.do(tok, "PUT", "/edges/https/"+edge+"/routes/"+route+"/backend", map[string]any{"backend_id": w}).must(t, 200)
		del(w).wantError(t, 409, ep.CodeBackendInUse)
		// Replacing the children releases the old ones.
		e.do(tok, "PATCH", "/backends/weighted/"+w, map[string]any{"backends": map[string]any{s1: 1}}).must(t, 200)
		del(s2).must(t, 204)
		del(f).must(t, 204)
		del(s1).wantError(t, 409, ep.CodeBackendInUse)
		// Deleting the route releases w; deleting w releases s1.
		e.do(tok, "DELETE", "/edges/https/"+edge+"/routes/"+route, nil).must(t, 204)
		del(w).must(t, 204)
		del(s1).must(t, 204)
	})
}

func backendKind(id string) string {
	for _, res := range []*ep.Resource{ep.StaticBackends, ep.TunnelGroupBackends, ep.HTTPResponseBackends, ep.FailoverBackends, ep.WeightedBackends} {
		if strings.HasPrefix(id, res.Prefix+"_") {
			return strings.TrimPrefix(res.Path, "/backends/")
		}
	}
	return "unknown"
}

// TestBackendCycleRace: two concurrent PATCHes that would each close a cycle (A -> B and
// B -> A) cannot both succeed, on every engine. (Updates of composite backends of one account
// take turns: on PostgreSQL they no longer deadlock on each other's row locks, which cost
// deadlock_timeout, 1 s, per overlapping round.)
func TestBackendCycleRace(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) { backendCycleRace(t, newEnvOn(t, engine, server.Config{})) })
	}
}

func backendCycleRace(t *testing.T, e *env) {
	k := edgeKit{e, e.admin}
	s := k.backend()
	for round := range 20 {
		a := k.post("/backends/failover", map[string]any{"backends": []any{s}}).str("id")
		b := k.post("/backends/failover", map[string]any{"backends": []any{s}}).str("id")
		var (
			statuses [2]int
			errs     [2]error
		)
		pairs := [][2]string{{a, b}, {b, a}}
		concurrently(len(pairs), func(i int) {
			c := pairs[i]
			statuses[i], _, errs[i] = k.try("PATCH", "/backends/failover/"+c[0], map[string]any{"backends": []any{c[1]}})
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if statuses[0] == 200 && statuses[1] == 200 {
			t.Fatalf("round %d: both PATCHes succeeded: %s and %s now contain each other", round, a, b)
		}
		for _, st := range statuses {
			if st != 200 && st != 400 {
				t.Fatalf("round %d: statuses %v", round, statuses)
			}
		}
	}
}
