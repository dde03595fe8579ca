package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// try sends a request without touching testing.T, for use from goroutines.
func (k edgeKit) try(method, path string, body any) (int, map[string]any, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(method, k.e.srv.URL+path, bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+k.a.token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return res.StatusCode, nil, err
	}
	return res.StatusCode, out, nil
}

// hostports is a hostports list for a request body.
func hostports(hp ...string) map[string]any {
	l := make([]any, len(hp))
	for i, h := range hp {
		l[i] = h
	}
	return map[string]any{"hostports": l}
}

// TestEdgeHostportRules: hostports are host:port (7104), TLS and HTTPS edges take reserved
// domains of the account on port 443 (7116, 7117; a wildcard covers its subdomains), TCP edges
// reserved addresses of the account (7118), and a list names a hostport once (7133).
func TestEdgeHostportRules(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k, ko := edgeKit{e, e.admin}, edgeKit{e, e.newAccount("hostports-other")}
	malformed := []string{"example.com", "example.com:", ":443", "example.com:0", "example.com:65536", "example.com:-1",
		"example.com:abc", "example.com:0443", "exa mple.com:443", "https://example.com:443", "[::1]:443",
		"example.com:443:1", "", "-bad.example.com:443", "ex_ample.com:443"}

	for _, kind := range []string{"tls", "https"} {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			path := "/edges/" + kind
			d := k.domain()
			existing := k.post(path, map[string]any{}).str("id")
			for _, hp := range malformed {
				r := e.do(tok, "POST", path, hostports(hp)).wantError(t, 400, ep.CodeBadHostport)
				wantErrField(t, r, "hostports[0]")
				r = e.do(tok, "PATCH", path+"/"+existing, hostports(d+":443", hp)).wantError(t, 400, ep.CodeBadHostport)
				wantErrField(t, r, "hostports[1]")
			}
			for _, c := range []struct {
				hp   string
				code int
			}{
				{fmt.Sprintf("never-reserved-%d.example.com:443", domainCounter.Add(1)), ep.CodeHostNotReserved},
				{ko.domain() + ":443", ep.CodeHostNotReserved},
				{"sub." + d + ":443", ep.CodeHostNotReserved}, // a plain reservation covers only itself
				{d + ":80", ep.CodeHostportPort},
				{d + ":8443", ep.CodeHostportPort},
				{reserveAddr(e, e.admin), ep.CodeHostportPort},
			} {
				r := e.do(tok, "POST", path, hostports(c.hp)).wantError(t, 400, c.code)
				wantErrField(t, r, "hostports[0]")
				e.do(tok, "PATCH", path+"/"+existing, hostports(c.hp)).wantError(t, 400, c.code)
			}
			e.do(tok, "POST", path, map[string]any{"hostports": d + ":443"}).wantError(t, 400, ep.CodeInvalid)
			e.do(tok, "POST", path, map[string]any{"hostports": []any{443}}).wantError(t, 400, ep.CodeInvalid)

			// A list names each hostport once, whatever the case.
			r := e.do(tok, "POST", path, hostports(d+":443", d+":443")).wantError(t, 400, ep.CodeHostportDuplicated)
			wantErrField(t, r, "hostports[1]")
			e.do(tok, "POST", path, hostports(strings.ToUpper(d)+":443", d+":443")).wantError(t, 400, ep.CodeHostportDuplicated)

			// Valid: lowercased; a wildcard reservation covers its subdomains but not its apex.
			base := fmt.Sprintf("wild-%d.example.com", domainCounter.Add(1))
			e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "*." + base}).must(t, 201)
			created := k.post(path, hostports(strings.ToUpper(d)+":443", "API."+base+":443", "www."+base+":443"))
			want := []any{d + ":443", "api." + base + ":443", "www." + base + ":443"}
			sameJSON(t, "hostports", created.body["hostports"], want)
			sameJSON(t, "GET hostports", e.do(tok, "GET", path+"/"+created.str("id"), nil).must(t, 200).body["hostports"], want)
			e.do(tok, "POST", path, hostports(base+":443")).wantError(t, 400, ep.CodeHostNotReserved)
			e.do(tok, "POST", path, hostports("*."+base+":443")).wantError(t, 400, ep.CodeBadHostport)
			// Without hostports an edge has [] (never null).
			sameJSON(t, "no hostports", e.do(tok, "GET", path+"/"+existing, nil).must(t, 200).body["hostports"], []any{})
		})
	}

	t.Run("tcp", func(t *testing.T) {
		e.t = t
		addr := reserveAddr(e, e.admin)
		existing := k.post("/edges/tcp", map[string]any{}).str("id")
		for _, hp := range malformed {
			e.do(tok, "POST", "/edges/tcp", hostports(hp)).wantError(t, 400, ep.CodeBadHostport)
		}
		for _, hp := range []string{reserveAddr(e, ko.a), ep.DefaultTCPHost + ":1", "1.tcp.ngrok.io:12345", k.domain() + ":443"} {
			r := e.do(tok, "POST", "/edges/tcp", hostports(hp)).wantError(t, 400, ep.CodeAddrNotReserved)
			wantErrField(t, r, "hostports[0]")
			e.do(tok, "PATCH", "/edges/tcp/"+existing, hostports(addr, hp)).wantError(t, 400, ep.CodeAddrNotReserved)
		}
		e.do(tok, "POST", "/edges/tcp", hostports(addr, addr)).wantError(t, 400, ep.CodeHostportDuplicated)
		addr2 := reserveAddr(e, e.admin)
		created := k.post("/edges/tcp", hostports(strings.ToUpper(addr), addr2))
		sameJSON(t, "tcp hostports", created.body["hostports"], []any{addr, addr2})
	})
}

// TestEdgeHostportUniqueness: a hostport is on one edge at a time (409 7122), of whatever type;
// deleting an edge or PATCHing the hostport away frees it; a refused request claims nothing.
func TestEdgeHostportUniqueness(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	d1, d2, d3 := k.domain()+":443", k.domain()+":443", k.domain()+":443"
	a := k.post("/edges/tls", hostports(d1, d2)).str("id")
	for _, path := range []string{"/edges/tls", "/edges/https"} {
		r := e.do(tok, "POST", path, hostports(d3, d1)).wantError(t, 409, ep.CodeHostportTaken)
		if !strings.Contains(r.msg(), d1) {
			t.Fatalf("message should name the hostport: %s", r.msg())
		}
	}
	// The refused creates claimed nothing: d3 is free.
	b := k.post("/edges/https", hostports(d3)).str("id")
	e.do(tok, "PATCH", "/edges/https/"+b, hostports(d3, d2)).wantError(t, 409, ep.CodeHostportTaken)
	// The same edge may keep (or reorder) its own hostports.
	e.do(tok, "PATCH", "/edges/tls/"+a, hostports(d2, d1)).must(t, 200)
	// PATCHing d1 away frees it.
	e.do(tok, "PATCH", "/edges/tls/"+a, hostports(d2)).must(t, 200)
	e.do(tok, "PATCH", "/edges/https/"+b, hostports(d3, d1)).must(t, 200)
	e.do(tok, "PATCH", "/edges/tls/"+a, hostports(d1)).wantError(t, 409, ep.CodeHostportTaken)
	// An empty list frees everything.
	e.do(tok, "PATCH", "/edges/https/"+b, map[string]any{"hostports": []any{}}).must(t, 200)
	c := k.post("/edges/tls", hostports(d1, d3)).str("id")
	// PATCH without hostports leaves them.
	sameJSON(t, "hostports after PATCH without them", e.do(tok, "PATCH", "/edges/tls/"+c, map[string]any{"hostports": nil, "description": "x"}).
		must(t, 200).body["hostports"], []any{d1, d3})
	// Deleting an edge frees its hostports.
	e.do(tok, "DELETE", "/edges/tls/"+c, nil).must(t, 204)
	k.post("/edges/https", hostports(d1, d3))

	t.Run("tcp", func(t *testing.T) {
		e.t = t
		addr := reserveAddr(e, e.admin)
		x := k.post("/edges/tcp", hostports(addr)).str("id")
		e.do(tok, "POST", "/edges/tcp", hostports(addr)).wantError(t, 409, ep.CodeHostportTaken)
		y := k.post("/edges/tcp", map[string]any{}).str("id")
		e.do(tok, "PATCH", "/edges/tcp/"+y, hostports(addr)).wantError(t, 409, ep.CodeHostportTaken)
		e.do(tok, "DELETE", "/edges/tcp/"+x, nil).must(t, 204)
		e.do(tok, "PATCH", "/edges/tcp/"+y, hostports(addr)).must(t, 200)
	})
}

// TestReservationInUseByEdge: a reserved domain (446) or address (447) that an edge serves cannot
// be deleted until the edge lets go of it.
func TestReservationInUseByEdge(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	domainID := func(name string) string {
		for _, d := range e.do(tok, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains") {
			if d["domain"] == name {
				return d["id"].(string)
			}
		}
		t.Fatalf("no reserved domain %s", name)
		return ""
	}

	for _, kind := range []string{"tls", "https"} {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			name := k.domain()
			id := domainID(name)
			edge := k.post("/edges/"+kind, hostports(name+":443")).str("id")
			r := e.do(tok, "DELETE", "/reserved_domains/"+id, nil).wantError(t, 409, ep.CodeDomainInUse)
			if !strings.Contains(r.msg(), id) {
				t.Fatalf("message should name the domain: %s", r.msg())
			}
			e.do(tok, "GET", "/reserved_domains/"+id, nil).must(t, 200)
			// Other changes of the edge keep the reference.
			e.do(tok, "PATCH", "/edges/"+kind+"/"+edge, map[string]any{"description": "still serving"}).must(t, 200)
			e.do(tok, "DELETE", "/reserved_domains/"+id, nil).wantError(t, 409, ep.CodeDomainInUse)
			e.do(tok, "PATCH", "/edges/"+kind+"/"+edge, map[string]any{"hostports": []any{}}).must(t, 200)
			e.do(tok, "DELETE", "/reserved_domains/"+id, nil).must(t, 204)
			// Gone, the name no longer backs a hostport.
			e.do(tok, "PATCH", "/edges/"+kind+"/"+edge, hostports(name+":443")).wantError(t, 400, ep.CodeHostNotReserved)

			// A wildcard serving a subdomain is in use too, until the edge is deleted.
			base := fmt.Sprintf("wc-%s-%d.example.com", kind, domainCounter.Add(1))
			wid := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "*." + base}).must(t, 201).str("id")
			wedge := k.post("/edges/"+kind, hostports("api."+base+":443")).str("id")
			e.do(tok, "DELETE", "/reserved_domains/"+wid, nil).wantError(t, 409, ep.CodeDomainInUse)
			e.do(tok, "DELETE", "/edges/"+kind+"/"+wedge, nil).must(t, 204)
			e.do(tok, "DELETE", "/reserved_domains/"+wid, nil).must(t, 204)
		})
	}

	t.Run("tcp", func(t *testing.T) {
		e.t = t
		r := e.do(tok, "POST", "/reserved_addrs", map[string]any{}).must(t, 201)
		addr, id := r.str("addr"), r.str("id")
		edge := k.post("/edges/tcp", hostports(addr)).str("id")
		msg := e.do(tok, "DELETE", "/reserved_addrs/"+id, nil).wantError(t, 409, ep.CodeAddrInUse).msg()
		if !strings.Contains(msg, id) {
			t.Fatalf("message should name the address: %s", msg)
		}
		e.do(tok, "PATCH", "/edges/tcp/"+edge, map[string]any{"description": "x"}).must(t, 200)
		e.do(tok, "DELETE", "/reserved_addrs/"+id, nil).wantError(t, 409, ep.CodeAddrInUse)
		e.do(tok, "PATCH", "/edges/tcp/"+edge, map[string]any{"hostports": []any{}}).must(t, 200)
		e.do(tok, "DELETE", "/reserved_addrs/"+id, nil).must(t, 204)
		e.do(tok, "PATCH", "/edges/tcp/"+edge, hostports(addr)).wantError(t, 400, ep.CodeAddrNotReserved)
		// And when the edge is deleted.
		addr2 := reserveAddr(e, e.admin)
		id2 := ""
		for _, a := range e.do(tok, "GET", "/reserved_addrs", nil).must(t, 200).items(t, "reserved_addrs") {
			if a["addr"] == addr2 {
				id2 = a["id"].(string)
			}
		}
		edge2 := k.post("/edges/tcp", hostports(addr2)).str("id")
		e.do(tok, "DELETE", "/reserved_addrs/"+id2, nil).wantError(t, 409, ep.CodeAddrInUse)
		e.do(tok, "DELETE", "/edges/tcp/"+edge2, nil).must(t, 204)
		e.do(tok, "DELETE", "/reserved_addrs/"+id2, nil).must(t, 204)
	})
}

// routeModuleNames are the module fields every route shows, null when not configured.
func routeModuleNames() []string {
	var out []string
	for _, m := range ep.ModulesOf(ep.HTTPSEdgeRoutes) {
		out = append(out, m.Name)
	}
	return out
}

// TestHTTPSEdgeRoutes: routes are created under an edge with their uri under it, shown by the
// edge's GET and list ([] when none), and reached only through their own edge and account.
func TestHTTPSEdgeRoutes(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	other := e.newAccount("routes-other")
	edge := k.httpsEdge()
	edgePath := "/edges/https/" + edge

	edgeRoutes := func(r resp) []map[string]any {
		t.Helper()
		return r.items(t, "routes")
	}
	listed := func() map[string]any {
		t.Helper()
		for _, it := range e.do(tok, "GET", "/edges/https", nil).must(t, 200).items(t, "https_edges") {
			if it["id"] == edge {
				return it
			}
		}
		t.Fatalf("edge %s not in the list", edge)
		return nil
	}
	if n := len(edgeRoutes(e.do(tok, "GET", edgePath, nil).must(t, 200))); n != 0 {
		t.Fatalf("new edge shows %d routes", n)
	}
	sameJSON(t, "listed edge's routes", listed()["routes"], []any{})
	// An edge created with nothing at all shows [] too, and null modules.
	bare := k.post("/edges/https", nil)
	sameJSON(t, "bare edge routes", bare.body["routes"], []any{})
	for _, f := range []string{"mutual_tls", "tls_termination"} {
		if v, ok := bare.body[f]; !ok || v != nil {
			t.Fatalf("bare edge %s should be null: %s", f, bare.raw)
		}
	}

	r1 := k.post(edgePath+"/routes", map[string]any{"match_type": "exact_path", "match": "/a", "description": "one", "metadata": "m"})
	id1 := r1.str("id")
	if !ep.ValidID(ep.HTTPSEdgeRoutes.Prefix, id1) {
		t.Fatalf("route id %q", id1)
	}
	if r1.str("uri") != e.base+edgePath+"/routes/"+id1 || r1.str("edge_id") != edge || r1.str("created_at") == "" {
		t.Fatalf("route: %s", r1.raw)
	}
	if r1.str("match_type") != "exact_path" || r1.str("match") != "/a" || r1.str("description") != "one" || r1.str("metadata") != "m" {
		t.Fatalf("route fields: %s", r1.raw)
	}
	for _, name := range routeModuleNames() {
		if v, ok := r1.body[name]; !ok || v != nil {
			t.Fatalf("route module %s should be null: %s", name, r1.raw)
		}
	}
	r2 := k.post(edgePath+"/routes", map[string]any{"match_type": "path_prefix", "match": "app.example.com/api",
		"backend": map[string]any{"backend_id": k.backend()}})
	id2 := r2.str("id")
	sameJSON(t, "GET route", e.do(tok, "GET", edgePath+"/routes/"+id1, nil).must(t, 200).body, r1.body)

	// The edge shows both, oldest first, exactly as the routes' own GET.
	want := []any{r1.body, r2.body}
	sameJSON(t, "edge routes", e.do(tok, "GET", edgePath, nil).must(t, 200).body["routes"], normJSON(t, want))
	sameJSON(t, "listed edge routes", listed()["routes"], normJSON(t, want))
	ids := []string{}
	for _, it := range e.do(tok, "GET", edgePath+"/routes", nil).must(t, 200).items(t, "routes") {
		ids = append(ids, it["id"].(string))
	}
	sameJSON(t, "route list", ids, []string{id2, id1})
	// PATCH and module changes show in the edge.
	p := e.do(tok, "PATCH", edgePath+"/routes/"+id1, map[string]any{"match_type": "path_prefix", "description": "uno"}).must(t, 200)
	if p.str("match_type") != "path_prefix" || p.str("match") != "/a" || p.str("uri") != r1.str("uri") {
		t.Fatalf("PATCH route: %s", p.raw)
	}
	sameJSON(t, "edge shows the PATCHed route", edgeRoutes(e.do(tok, "GET", edgePath, nil).must(t, 200))[0], p.body)

	// A route is reached only through its own edge.
	edge2 := k.httpsEdge()
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		e.do(tok, m, "/edges/https/"+edge2+"/routes/"+id1, map[string]any{}).wantError(t, 404, ep.CodeNotFound)
	}
	e.do(tok, "PUT", "/edges/https/"+edge2+"/routes/"+id1+"/compression", map[string]any{}).wantError(t, 404, ep.CodeNotFound)
	if n := len(e.do(tok, "GET", "/edges/https/"+edge2+"/routes", nil).must(t, 200).items(t, "routes")); n != 0 {
		t.Fatalf("other edge lists %d routes", n)
	}
	// An echoed edge_id must be the path's.
	e.do(tok, "POST", edgePath+"/routes", map[string]any{"edge_id": edge2, "match_type": "exact_path", "match": "/echo"}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "POST", edgePath+"/routes", map[string]any{"edge_id": edge, "match_type": "exact_path", "match": "/echo"}).must(t, 201)
	e.do(tok, "PATCH", edgePath+"/routes/"+id1, map[string]any{"edge_id": edge2}).wantError(t, 400, ep.CodeInvalid)
	missingEdge, _ := ep.NewID(ep.HTTPSEdges.Prefix)
	e.do(tok, "POST", "/edges/https/"+missingEdge+"/routes", map[string]any{"match_type": "exact_path", "match": "/x"}).wantError(t, 404, ep.CodeNotFound)
	// A TLS edge has no routes.
	tls := k.tlsEdge()
	e.do(tok, "POST", "/edges/https/"+tls+"/routes", map[string]any{"match_type": "exact_path", "match": "/x"}).wantError(t, 404, ep.CodeNotFound)

	// Another account's edge does not exist for the caller, nor do its routes.
	e.do(other.token, "POST", edgePath+"/routes", map[string]any{"match_type": "exact_path", "match": "/mine"}).wantError(t, 404, ep.CodeNotFound)
	e.do(other.token, "GET", edgePath+"/routes", nil).wantError(t, 404, ep.CodeNotFound)
	e.do(other.token, "GET", edgePath+"/routes/"+id1, nil).wantError(t, 404, ep.CodeNotFound)
	e.do(other.token, "PATCH", edgePath+"/routes/"+id1, map[string]any{"description": "x"}).wantError(t, 404, ep.CodeNotFound)
	e.do(other.token, "DELETE", edgePath+"/routes/"+id1, nil).wantError(t, 404, ep.CodeNotFound)
	e.do(other.token, "PUT", edgePath+"/routes/"+id1+"/compression", map[string]any{}).wantError(t, 404, ep.CodeNotFound)
	otherEdge := edgeKit{e, other}.httpsEdge()
	e.do(tok, "POST", "/edges/https/"+otherEdge+"/routes", map[string]any{"match_type": "exact_path", "match": "/x"}).wantError(t, 404, ep.CodeNotFound)

	// Deleting a route removes it from the edge.
	e.do(tok, "DELETE", edgePath+"/routes/"+id1, nil).must(t, 204)
	e.do(tok, "GET", edgePath+"/routes/"+id1, nil).wantError(t, 404, ep.CodeNotFound)
	for _, r := range edgeRoutes(e.do(tok, "GET", edgePath, nil).must(t, 200)) {
		if r["id"] == id1 {
			t.Fatal("deleted route still shown by its edge")
		}
	}
}

// TestRouteMatchRules: match_type exact_path|path_prefix (7130), match required and valid (215)
// and unique within its edge (409 7126).
func TestRouteMatchRules(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	edge, edge2 := k.httpsEdge(), k.httpsEdge()
	routes := "/edges/https/" + edge + "/routes"
	for _, mt := range []any{"regex", "", "EXACT_PATH", "exact", nil} {
		body := map[string]any{"match_type": mt, "match": "/m"}
		r := e.do(tok, "POST", routes, body).wantError(t, 400, ep.CodeBadMatchType)
		wantErrField(t, r, "match_type")
	}
	e.do(tok, "POST", routes, map[string]any{"match": "/m"}).wantError(t, 400, ep.CodeBadMatchType)
	e.do(tok, "POST", routes, map[string]any{"match_type": 1, "match": "/m"}).wantError(t, 400, ep.CodeInvalid)
	for _, m := range []any{nil, "", "/has space", "/tab\there", "not a host", "bad_host.example.com/x", strings.Repeat("/a", 1025)} {
		body := map[string]any{"match_type": "path_prefix"}
		if m != nil {
			body["match"] = m
		}
		r := e.do(tok, "POST", routes, body).wantError(t, 400, ep.CodeInvalid)
		wantErrField(t, r, "match")
	}
	e.do(tok, "POST", routes, map[string]any{"match_type": "path_prefix", "match": 5}).wantError(t, 400, ep.CodeInvalid)
	for _, m := range []string{"/", "/a/b?c", "example.com", "*.example.com/x", "app.example.com/api/v1"} {
		k.post(routes, map[string]any{"match_type": "path_prefix", "match": m})
	}

	a := k.post(routes, map[string]any{"match_type": "exact_path", "match": "/dup"}).str("id")
	for _, mt := range []string{"exact_path", "path_prefix"} {
		r := e.do(tok, "POST", routes, map[string]any{"match_type": mt, "match": "/dup"}).wantError(t, 409, ep.CodeRouteMatchTaken)
		if !strings.Contains(r.msg(), "/dup") {
			t.Fatalf("message should name the match: %s", r.msg())
		}
	}
	// The same match on another edge is fine.
	k.post("/edges/https/"+edge2+"/routes", map[string]any{"match_type": "exact_path", "match": "/dup"})
	b := k.post(routes, map[string]any{"match_type": "exact_path", "match": "/other"}).str("id")
	e.do(tok, "PATCH", routes+"/"+b, map[string]any{"match": "/dup"}).wantError(t, 409, ep.CodeRouteMatchTaken)
	e.do(tok, "PATCH", routes+"/"+b, map[string]any{"match_type": "bogus"}).wantError(t, 400, ep.CodeBadMatchType)
	e.do(tok, "PATCH", routes+"/"+b, map[string]any{"match": ""}).wantError(t, 400, ep.CodeInvalid)
	// A route may keep its own match; PATCHing it away frees it; deleting frees it.
	e.do(tok, "PATCH", routes+"/"+a, map[string]any{"match": "/dup", "match_type": "path_prefix"}).must(t, 200)
	e.do(tok, "PATCH", routes+"/"+a, map[string]any{"match": "/moved"}).must(t, 200)
	e.do(tok, "PATCH", routes+"/"+b, map[string]any{"match": "/dup"}).must(t, 200)
	e.do(tok, "DELETE", routes+"/"+b, nil).must(t, 204)
	k.post(routes, map[string]any{"match_type": "exact_path", "match": "/dup"})
	e.do(tok, "POST", routes, map[string]any{"match_type": "exact_path", "match": "/moved"}).wantError(t, 409, ep.CodeRouteMatchTaken)
}

// TestEdgeDeleteCascades: deleting an edge deletes its routes and modules, and with them every
// reference they held: the backends they used can be deleted, the hostports reused.
func TestEdgeDeleteCascades(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}

	t.Run("https", func(t *testing.T) {
		e.t = t
		hp := k.domain() + ":443"
		b := k.backend()
		edge := k.post("/edges/https", merge(hostports(hp), map[string]any{
			"mutual_tls": map[string]any{"certificate_authority_ids": []any{k.ca()}}})).str("id")
		var routes []string
		for range 3 {
			routes = append(routes, k.post("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": routeMatch(),
				"backend": map[string]any{"backend_id": b}, "ip_restriction": map[string]any{"ip_policy_ids": []any{k.ipPolicy()}}}).str("id"))
		}
		e.do(tok, "DELETE", "/backends/static/"+b, nil).wantError(t, 409, ep.CodeBackendInUse)
		e.do(tok, "DELETE", "/edges/https/"+edge, nil).must(t, 204)
		e.do(tok, "GET", "/edges/https/"+edge, nil).wantError(t, 404, ep.CodeNotFound)
		e.do(tok, "GET", "/edges/https/"+edge+"/mutual_tls", nil).wantError(t, 404, ep.CodeNotFound)
		e.do(tok, "GET", "/edges/https/"+edge+"/routes", nil).wantError(t, 404, ep.CodeNotFound)
		for _, r := range routes {
			e.do(tok, "GET", "/edges/https/"+edge+"/routes/"+r, nil).wantError(t, 404, ep.CodeNotFound)
			e.do(tok, "GET", "/edges/https/"+edge+"/routes/"+r+"/backend", nil).wantError(t, 404, ep.CodeNotFound)
			e.do(tok, "PUT", "/edges/https/"+edge+"/routes/"+r+"/compression", map[string]any{}).wantError(t, 404, ep.CodeNotFound)
		}
		e.do(tok, "DELETE", "/backends/static/"+b, nil).must(t, 204)
		k.post("/edges/https", hostports(hp))
	})
	for _, kind := range []string{"tls", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			b := k.backend()
			var edge string
			if kind == "tls" {
				edge = k.tlsEdge()
			} else {
				edge = k.tcpEdge()
			}
			path := "/edges/" + kind + "/" + edge
			e.do(tok, "PUT", path+"/backend", map[string]any{"backend_id": b}).must(t, 200)
			hps := e.do(tok, "GET", path, nil).must(t, 200).body["hostports"]
			e.do(tok, "DELETE", "/backends/static/"+b, nil).wantError(t, 409, ep.CodeBackendInUse)
			e.do(tok, "DELETE", path, nil).must(t, 204)
			e.do(tok, "GET", path+"/backend", nil).wantError(t, 404, ep.CodeNotFound)
			e.do(tok, "PUT", path+"/backend", map[string]any{"backend_id": k.backend()}).wantError(t, 404, ep.CodeNotFound)
			e.do(tok, "DELETE", "/backends/static/"+b, nil).must(t, 204)
			k.post("/edges/"+kind, map[string]any{"hostports": hps})
		})
	}
}

// TestEdgeModulesInBodies: modules in create bodies; a PATCH naming a module replaces that module
// wholly and leaves the others; null and absent leave a module; PATCH never removes one.
func TestEdgeModulesInBodies(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}

	t.Run("tls", func(t *testing.T) {
		e.t = t
		b1, b2, p1, ca := k.backend(), k.backend(), k.ipPolicy(), k.ca()
		c := k.post("/edges/tls", merge(hostports(k.domain()+":443"), map[string]any{
			"description":     "tls",
			"backend":         map[string]any{"backend_id": b1},
			"ip_restriction":  map[string]any{"ip_policy_ids": []any{p1}, "enabled": false},
			"mutual_tls":      map[string]any{"certificate_authority_ids": []any{ca}},
			"tls_termination": map[string]any{"min_version": "1.3"},
			"traffic_policy":  map[string]any{"value": `{"on_tcp_connect":[]}`, "enabled": false},
		}))
		path := "/edges/tls/" + c.str("id")
		sameJSON(t, "backend", c.body["backend"], map[string]any{"enabled": true, "backend": refJSON(e, b1)})
		sameJSON(t, "ip_restriction", c.body["ip_restriction"], map[string]any{"enabled": false, "ip_policies": []any{refJSON(e, p1)}})
		sameJSON(t, "mutual_tls", c.body["mutual_tls"], map[string]any{"enabled": true, "certificate_authorities": []any{refJSON(e, ca)}})
		sameJSON(t, "tls_termination", c.body["tls_termination"], map[string]any{"enabled": true, "terminate_at": "edge", "min_version": "1.3"})
		sameJSON(t, "traffic_policy", c.body["traffic_policy"], map[string]any{"enabled": false, "value": `{"on_tcp_connect":[]}`})
		sameJSON(t, "GET after create", e.do(tok, "GET", path, nil).must(t, 200).body, c.body)

		// Replacing one module wholly: enabled false is not carried over, min_version resets.
		p := e.do(tok, "PATCH", path, map[string]any{"traffic_policy": map[string]any{"value": "on_tcp_connect: []"}, "tls_termination": map[string]any{}}).must(t, 200)
		want := merge(c.body, map[string]any{
			"traffic_policy":  map[string]any{"enabled": true, "value": "on_tcp_connect: []"},
			"tls_termination": map[string]any{"enabled": true, "terminate_at": "edge", "min_version": "1.2"},
		})
		sameJSON(t, "PATCH one module", p.body, want)
		// null, absent and {} leave every module.
		for _, body := range []any{
			map[string]any{"backend": nil, "ip_restriction": nil, "mutual_tls": nil, "tls_termination": nil, "traffic_policy": nil},
			map[string]any{}, map[string]any{"hostports": nil}, "",
		} {
			sameJSON(t, fmt.Sprintf("PATCH %v", body), e.do(tok, "PATCH", path, body).must(t, 200).body, want)
		}
		d := e.do(tok, "PATCH", path, map[string]any{"description": "changed"}).must(t, 200)
		sameJSON(t, "PATCH description", d.body, merge(want, map[string]any{"description": "changed"}))
		want = d.body
		// Replacing the backend moves the reference.
		e.do(tok, "DELETE", "/backends/static/"+b1, nil).wantError(t, 409, ep.CodeBackendInUse)
		p = e.do(tok, "PATCH", path, map[string]any{"backend": map[string]any{"backend_id": b2, "enabled": nil}}).must(t, 200)
		sameJSON(t, "PATCH backend", p.body, merge(want, map[string]any{"backend": map[string]any{"enabled": true, "backend": refJSON(e, b2)}}))
		e.do(tok, "DELETE", "/backends/static/"+b1, nil).must(t, 204)
		e.do(tok, "DELETE", "/backends/static/"+b2, nil).wantError(t, 409, ep.CodeBackendInUse)
		want = p.body
		// A refused PATCH changes nothing.
		e.do(tok, "PATCH", path, map[string]any{"description": "no", "backend": map[string]any{}}).wantError(t, 400, ep.CodeBackendMissing)
		e.do(tok, "PATCH", path, map[string]any{"description": "no", "traffic_policy": map[string]any{"value": "[1"}}).wantError(t, 400, ep.CodeInvalid)
		e.do(tok, "PATCH", path, map[string]any{"backend": map[string]any{"backend_id": b2, "weight": 1}}).wantError(t, 400, ep.CodeUnknownField)
		sameJSON(t, "after refused PATCHes", e.do(tok, "GET", path, nil).must(t, 200).body, want)
		// Deleting a module at its endpoint, then a PATCH that does not name it, leaves it null.
		e.do(tok, "DELETE", path+"/backend", nil).must(t, 204)
		if got := e.do(tok, "PATCH", path, map[string]any{"description": "x"}).must(t, 200); got.body["backend"] != nil {
			t.Fatalf("backend came back: %s", got.raw)
		}
		e.do(tok, "DELETE", "/backends/static/"+b2, nil).must(t, 204)
	})

	t.Run("https", func(t *testing.T) {
		e.t = t
		ca := k.ca()
		c := k.post("/edges/https", map[string]any{"mutual_tls": map[string]any{"certificate_authority_ids": []any{ca}},
			"tls_termination": map[string]any{"min_version": "1.0"}})
		path := "/edges/https/" + c.str("id")
		p := e.do(tok, "PATCH", path, map[string]any{"tls_termination": map[string]any{"enabled": false}}).must(t, 200)
		sameJSON(t, "https PATCH", p.body, merge(c.body, map[string]any{
			"tls_termination": map[string]any{"enabled": false, "terminate_at": "edge", "min_version": "1.2"}}))
		for _, bad := range []string{"backend", "ip_restriction", "traffic_policy", "circuit_breaker"} {
			e.do(tok, "PATCH", path, map[string]any{bad: map[string]any{}}).wantError(t, 400, ep.CodeUnknownField)
			e.do(tok, "POST", "/edges/https", map[string]any{bad: map[string]any{}}).wantError(t, 400, ep.CodeUnknownField)
		}
	})

	t.Run("tcp", func(t *testing.T) {
		e.t = t
		b, p1, p2 := k.backend(), k.ipPolicy(), k.ipPolicy()
		c := k.post("/edges/tcp", merge(hostports(reserveAddr(e, e.admin)), map[string]any{
			"backend": map[string]any{"backend_id": b}, "ip_restriction": map[string]any{"ip_policy_ids": []any{p1}},
			"traffic_policy": map[string]any{"value": "on_tcp_connect: []"}}))
		path := "/edges/tcp/" + c.str("id")
		p := e.do(tok, "PATCH", path, map[string]any{"ip_restriction": map[string]any{"ip_policy_ids": []any{p2, p1}}}).must(t, 200)
		sameJSON(t, "tcp PATCH", p.body, merge(c.body, map[string]any{
			"ip_restriction": map[string]any{"enabled": true, "ip_policies": []any{refJSON(e, p2), refJSON(e, p1)}}}))
		for _, bad := range []string{"mutual_tls", "tls_termination", "routes", "compression"} {
			e.do(tok, "PATCH", path, map[string]any{bad: map[string]any{}}).wantError(t, 400, ep.CodeUnknownField)
		}
	})

	t.Run("route", func(t *testing.T) {
		e.t = t
		edge := k.httpsEdge()
		c := k.post("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": routeMatch(),
			"circuit_breaker":         map[string]any{"num_buckets": 20, "tripped_duration": 5},
			"request_headers":         map[string]any{"add": map[string]any{"X-A": "1"}},
			"compression":             map[string]any{"enabled": false},
			"webhook_verification":    map[string]any{"provider": "sns"},
			"websocket_tcp_converter": map[string]any{},
		})
		sameJSON(t, "created circuit_breaker", c.body["circuit_breaker"], map[string]any{"enabled": true, "tripped_duration": 5.0,
			"rolling_window": 10.0, "num_buckets": 20.0, "volume_threshold": 20.0, "error_threshold_percentage": 0.5})
		sameJSON(t, "created request_headers", c.body["request_headers"], map[string]any{"enabled": true, "add": map[string]any{"X-A": "1"}, "remove": []any{}})
		sameJSON(t, "created webhook_verification", c.body["webhook_verification"], map[string]any{"enabled": true, "provider": "sns", "secret": ""})
		for _, f := range []string{"backend", "ip_restriction", "response_headers", "traffic_policy"} {
			if c.body[f] != nil {
				t.Fatalf("%s should be null: %s", f, c.raw)
			}
		}
		path := "/edges/https/" + edge + "/routes/" + c.str("id")
		p := e.do(tok, "PATCH", path, map[string]any{"circuit_breaker": map[string]any{"tripped_duration": 7}, "request_headers": nil,
			"response_headers": map[string]any{"remove": []any{"Server"}}}).must(t, 200)
		want := merge(c.body, map[string]any{
			"circuit_breaker": map[string]any{"enabled": true, "tripped_duration": 7.0, "rolling_window": 10.0, "num_buckets": 10.0,
				"volume_threshold": 20.0, "error_threshold_percentage": 0.5},
			"response_headers": map[string]any{"enabled": true, "add": map[string]any{}, "remove": []any{"Server"}},
		})
		sameJSON(t, "route PATCH", p.body, want)
		sameJSON(t, "edge shows the route", e.do(tok, "GET", "/edges/https/"+edge, nil).must(t, 200).body["routes"], []any{want})
		r := e.do(tok, "PATCH", path, map[string]any{"circuit_breaker": map[string]any{"num_buckets": 129}}).wantError(t, 400, ep.CodeBadNumBuckets)
		wantErrField(t, r, "circuit_breaker.num_buckets")
		for _, bad := range []string{"mutual_tls", "tls_termination", "hostports"} {
			e.do(tok, "PATCH", path, map[string]any{bad: map[string]any{}}).wantError(t, 400, ep.CodeUnknownField)
		}
		sameJSON(t, "route after refused PATCHes", e.do(tok, "GET", path, nil).must(t, 200).body, want)
	})
}

// TestHostportRace: 30 concurrent creates of TLS edges with one hostport; exactly one wins, every
// other gets 409 7122, and one edge has the hostport.
func TestHostportRace(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	hp := k.domain() + ":443"
	type result struct {
		status int
		code   string
		err    error
	}
	results := make([]result, 30)
	concurrently(len(results), func(i int) {
		status, body, err := k.try("POST", "/edges/tls", hostports(hp))
		results[i] = result{status: status, err: err}
		if body != nil {
			results[i].code, _ = body["error_code"].(string)
		}
	})
	wins := 0
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Fatalf("request failed: %v", r.err)
		case r.status == 201:
			wins++
		case r.status != 409 || r.code != "ERR_NGROK_7122":
			t.Fatalf("a losing create got %d %s, want 409 ERR_NGROK_7122: %+v", r.status, r.code, results)
		}
	}
	if wins != 1 {
		t.Fatalf("%d creates won: %+v", wins, results)
	}
	n := 0
	for _, it := range e.do(e.admin.token, "GET", "/edges/tls", nil).must(t, 200).items(t, "tls_edges") {
		for _, h := range it["hostports"].([]any) {
			if h == hp {
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d edges have %s", n, hp)
	}
}

// TestConcurrentModuleWrites: 64 concurrent writes to one TLS edge, each to one of its five
// modules, half through the module's endpoint and half by PATCH of the edge. Writes to one module
// are ordered (so its last value is known); writes to different modules race. No write may lose
// another module's: the edge ends with every module at its last written value.
func TestConcurrentModuleWrites(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	edge := k.tlsEdge()
	path := "/edges/tls/" + edge
	backends := []string{k.backend(), k.backend(), k.backend()}
	policies := []string{k.ipPolicy(), k.ipPolicy(), k.ipPolicy()}
	cas := []string{k.ca(), k.ca()}
	versions := []string{"1.0", "1.1", "1.2", "1.3"}
	modules := []string{"backend", "ip_restriction", "mutual_tls", "tls_termination", "traffic_policy"}
	body := func(module string, i int) map[string]any {
		switch module {
		case "backend":
			return map[string]any{"backend_id": backends[i%len(backends)]}
		case "ip_restriction":
			return map[string]any{"ip_policy_ids": []any{policies[i%len(policies)]}, "enabled": i%2 == 0}
		case "mutual_tls":
			return map[string]any{"certificate_authority_ids": []any{cas[i%len(cas)]}}
		case "tls_termination":
			return map[string]any{"min_version": versions[i%len(versions)]}
		}
		return map[string]any{"value": `{"on_tcp_connect":[{"name":"write ` + strconv.Itoa(i) + `","actions":[{"type":"deny"}]}]}`}
	}
	var (
		locks = make([]sync.Mutex, len(modules))
		last  = make([]int, len(modules))
		errs  = make(chan string, 64)
	)
	concurrently(64, func(i int) {
		m := i % len(modules)
		locks[m].Lock()
		defer locks[m].Unlock()
		var (
			status int
			out    map[string]any
			err    error
		)
		if i%2 == 0 {
			status, out, err = k.try("PUT", path+"/"+modules[m], body(modules[m], i))
		} else {
			status, out, err = k.try("PATCH", path, map[string]any{modules[m]: body(modules[m], i)})
		}
		if err != nil || status != 200 {
			errs <- fmt.Sprintf("write %d to %s: %d %v %v", i, modules[m], status, out, err)
			return
		}
		last[m] = i
	})
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if t.Failed() {
		t.FailNow()
	}
	got := e.do(e.admin.token, "GET", path, nil).must(t, 200)
	for m, name := range modules {
		want := k.e.do(k.a.token, "GET", path+"/"+name, nil).must(t, 200).body
		sameJSON(t, name+" in the edge and at its endpoint", got.body[name], want)
		checkModuleResponse(t, e, name, body(name, last[m]), want)
	}
	if !strings.HasPrefix(got.body["hostports"].([]any)[0].(string), "edge-") {
		t.Fatalf("hostports lost: %s", got.raw)
	}
}

// TestReservedAddrs: addresses are host:port from the configured host and port range, distinct,
// freed on delete; only description and metadata can be changed.
func TestReservedAddrs(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	seen := map[string]bool{}
	for range 5 {
		r := e.do(tok, "POST", "/reserved_addrs", map[string]any{"description": "db"}).must(t, 201)
		addr := r.str("addr")
		host, port, ok := strings.Cut(addr, ":")
		n, err := strconv.Atoi(port)
		if !ok || host != ep.DefaultTCPHost || err != nil || n < ep.DefaultTCPPortMin || n > ep.DefaultTCPPortMax {
			t.Fatalf("addr %q is not %s:%d-%d", addr, ep.DefaultTCPHost, ep.DefaultTCPPortMin, ep.DefaultTCPPortMax)
		}
		if seen[addr] {
			t.Fatalf("addr %s assigned twice", addr)
		}
		seen[addr] = true
		if v, ok := r.body["region"]; !ok || v != "" {
			t.Fatalf("region should be \"\": %s", r.raw)
		}
		id := r.str("id")
		e.do(tok, "PATCH", "/reserved_addrs/"+id, map[string]any{"region": "eu"}).wantError(t, 400, ep.CodeUnknownField)
		e.do(tok, "PATCH", "/reserved_addrs/"+id, map[string]any{"addr": "tcp.edgeplane.app:10001"}).wantError(t, 400, ep.CodeUnknownField)
		if got := e.do(tok, "PATCH", "/reserved_addrs/"+id, map[string]any{"description": "db 2"}).must(t, 200); got.str("addr") != addr {
			t.Fatalf("PATCH changed addr: %s", got.raw)
		}
	}
	e.do(tok, "POST", "/reserved_addrs", map[string]any{"addr": "tcp.edgeplane.app:10001"}).wantError(t, 400, ep.CodeUnknownField)
	e.do(tok, "POST", "/reserved_addrs", map[string]any{"region": "mars"}).wantError(t, 400, ep.CodeInvalid)
	if r := e.do(tok, "POST", "/reserved_addrs", map[string]any{"region": "eu"}).must(t, 201); r.str("region") != "eu" {
		t.Fatalf("region: %s", r.raw)
	}

	// A range of one port: the second reservation finds none free until the first is deleted.
	e.st.SetSettings(ep.Settings{TCPHost: "tcp.test.example", TCPPortMin: 20000, TCPPortMax: 20000})
	other := e.newAccount("addrs-other")
	first := e.do(tok, "POST", "/reserved_addrs", map[string]any{}).must(t, 201)
	if first.str("addr") != "tcp.test.example:20000" {
		t.Fatalf("addr %s, want the configured host and port", first.str("addr"))
	}
	e.do(tok, "POST", "/reserved_addrs", map[string]any{}).wantError(t, 409, ep.CodeNoFreeAddr)
	e.do(other.token, "POST", "/reserved_addrs", map[string]any{}).wantError(t, 409, ep.CodeNoFreeAddr)
	e.do(tok, "DELETE", "/reserved_addrs/"+first.str("id"), nil).must(t, 204)
	again := e.do(other.token, "POST", "/reserved_addrs", map[string]any{}).must(t, 201)
	if again.str("addr") != "tcp.test.example:20000" {
		t.Fatalf("freed addr not reassigned: %s", again.raw)
	}
	// The address now belongs to the other account: not usable here.
	e.do(tok, "POST", "/edges/tcp", hostports("tcp.test.example:20000")).wantError(t, 400, ep.CodeAddrNotReserved)
	edgeKit{e, other}.post("/edges/tcp", hostports("tcp.test.example:20000"))
}

// TestWildcardYieldsToOtherAccounts: a wildcard reservation covers the subdomains nobody has
// reserved; a name another account reserved is that account's, and the wildcard's owner cannot
// put it on an edge (7116).
func TestWildcardYieldsToOtherAccounts(t *testing.T) {
	e := newEnv(t)
	a, b := e.admin, e.newAccount("wildcard-other")
	base := fmt.Sprintf("shared-%d.example.com", domainCounter.Add(1))
	e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "*." + base}).must(t, 201)
	e.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": "api." + base}).must(t, 201)
	for _, kind := range []string{"tls", "https"} {
		r := e.do(a.token, "POST", "/edges/"+kind, hostports("api."+base+":443")).wantError(t, 400, ep.CodeHostNotReserved)
		wantErrField(t, r, "hostports[0]")
	}
	edgeKit{e, b}.post("/edges/tls", hostports("api."+base+":443"))
	edgeKit{e, a}.post("/edges/tls", hostports("www."+base+":443"))
}

// TestReferenceRaces: a delete racing a new reference to the same object, and two module writes
// racing across the rule that joins them, never both succeed.
func TestReferenceRaces(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	// race runs two requests at once and returns their statuses and error codes.
	race := func(t *testing.T, a, b func() (int, map[string]any, error)) (st [2]int, codes [2]string) {
		t.Helper()
		var errs [2]error
		fs := []func() (int, map[string]any, error){a, b}
		concurrently(len(fs), func(i int) {
			var body map[string]any
			st[i], body, errs[i] = fs[i]()
			if body != nil {
				codes[i], _ = body["error_code"].(string)
			}
		})
		for _, err := range errs {
			if err != nil && !strings.Contains(err.Error(), "EOF") {
				t.Fatal(err)
			}
		}
		return st, codes
	}
	want := func(t *testing.T, round int, st [2]int, codes [2]string, outcomes ...[4]any) {
		t.Helper()
		for _, o := range outcomes {
			if st[0] == o[0] && codes[0] == o[1] && st[1] == o[2] && codes[1] == o[3] {
				return
			}
		}
		t.Fatalf("round %d: outcome %v %v is none of %v", round, st, codes, outcomes)
	}

	t.Run("domain delete vs edge create", func(t *testing.T) {
		e.t = t
		// The contested domain comes first among many hostports, which widens the time between
		// the edge's check of it and the write of its reference.
		var fillers []string
		for range 30 {
			fillers = append(fillers, k.domain()+":443")
		}
		for round := range 8 {
			name := freshDomain("race")
			id := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": name}).must(t, 201).str("id")
			st, codes := race(t,
				func() (int, map[string]any, error) { return k.try("DELETE", "/reserved_domains/"+id, nil) },
				func() (int, map[string]any, error) {
					return k.try("POST", "/edges/tls", hostports(append([]string{name + ":443"}, fillers...)...))
				})
			want(t, round, st, codes, [4]any{204, "", 400, "ERR_NGROK_7116"}, [4]any{409, "ERR_NGROK_446", 201, ""})
			for _, it := range e.do(tok, "GET", "/edges/tls", nil).must(t, 200).items(t, "tls_edges") {
				e.do(tok, "DELETE", "/edges/tls/"+it["id"].(string), nil).must(t, 204)
			}
		}
	})
	t.Run("backend delete vs module PUT", func(t *testing.T) {
		e.t = t
		edge := k.tlsEdge()
		for round := range 8 {
			b := k.backend()
			st, codes := race(t,
				func() (int, map[string]any, error) { return k.try("DELETE", "/backends/static/"+b, nil) },
				func() (int, map[string]any, error) {
					return k.try("PUT", "/edges/tls/"+edge+"/backend", map[string]any{"backend_id": b})
				})
			want(t, round, st, codes, [4]any{204, "", 400, "ERR_NGROK_6501"}, [4]any{409, "ERR_NGROK_6502", 200, ""})
			e.do(tok, "DELETE", "/edges/tls/"+edge+"/backend", nil)
		}
	})
	t.Run("mutual_tls vs upstream termination", func(t *testing.T) {
		e.t = t
		ca := k.ca()
		for round := range 8 {
			edge := k.tlsEdge()
			st, codes := race(t,
				func() (int, map[string]any, error) {
					return k.try("PUT", "/edges/tls/"+edge+"/mutual_tls", map[string]any{"certificate_authority_ids": []any{ca}})
				},
				func() (int, map[string]any, error) {
					return k.try("PATCH", "/edges/tls/"+edge, map[string]any{"tls_termination": map[string]any{"terminate_at": "upstream"}})
				})
			want(t, round, st, codes, [4]any{200, "", 400, "ERR_NGROK_7062"}, [4]any{400, "ERR_NGROK_7062", 200, ""})
		}
	})
}
