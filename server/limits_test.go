package server_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// policyOfSize is a traffic policy document of n bytes, padded with a YAML comment.
func policyOfSize(n int) string {
	const head = "on_http_request: []\n#"
	return head + strings.Repeat("a", n-len(head))
}

// TestObjectLimitsOverHTTP: the limits on what one object holds (limits.go) answer 400 with
// ngrok's code and the field over the API, and the limits that count children (routes of an
// edge, rules of an IP policy) hold when creates race: on PostgreSQL too, exactly the room left
// is filled.
func TestObjectLimitsOverHTTP(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			e := newEnvOn(t, engine, server.Config{})
			k := edgeKit{e, e.admin}
			tok := e.admin.token

			// Routes: fill the edge but for 3, then race 10 creates: 3 win, 7 get 7128.
			edge := k.httpsEdge()
			path := "/edges/https/" + edge + "/routes"
			for range ep.MaxRoutesPerEdge - 3 {
				k.route(edge)
			}
			var won, refused atomic.Int32
			concurrently(10, func(i int) {
				status, body, err := k.try("POST", path, map[string]any{"match_type": "path_prefix", "match": fmt.Sprintf("/race%d", i)})
				switch {
				case err == nil && status == 201:
					won.Add(1)
				case err == nil && status == 400 && body["error_code"] == fmt.Sprintf("ERR_NGROK_%d", ep.CodeTooManyRoutes):
					refused.Add(1)
				default:
					t.Errorf("route create: %d %v %v", status, body, err)
				}
			})
			if won.Load() != 3 || refused.Load() != 7 {
				t.Fatalf("racing creates for 3 free route slots: %d created, %d refused", won.Load(), refused.Load())
			}
			r := e.do(tok, "POST", path, map[string]any{"match_type": "path_prefix", "match": "/one-more"}).wantError(t, 400, ep.CodeTooManyRoutes)
			wantErrField(t, r, "routes")
			if n := len(e.do(tok, "GET", "/edges/https/"+edge, nil).must(t, 200).items(t, "routes")); n != ep.MaxRoutesPerEdge {
				t.Fatalf("the edge has %d routes, want %d", n, ep.MaxRoutesPerEdge)
			}
			// A route too large as a whole names its largest field.
			big := map[string]any{"match_type": "path_prefix", "match": routeMatch(),
				"traffic_policy":  map[string]any{"value": policyOfSize(ep.MaxTrafficPolicyBytes)},
				"request_headers": map[string]any{"add": map[string]any{"X-Pad": strings.Repeat("a", ep.MaxRouteBytes)}}}
			r = e.do(tok, "POST", "/edges/https/"+k.httpsEdge()+"/routes", big).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "request_headers")

			// Rules: fill the policy but for 2, then race 6 creates: 2 win.
			policy := k.ipPolicy()
			rule := func(i int) map[string]any {
				return map[string]any{"ip_policy_id": policy, "cidr": fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), "action": "allow"}
			}
			concurrently(8, func(w int) {
				for i := w; i < ep.MaxRulesPerIPPolicy-2; i += 8 {
					if status, body, err := k.try("POST", "/ip_policy_rules", rule(i)); err != nil || status != 201 {
						t.Errorf("rule %d: %d %v %v", i, status, body, err)
						return
					}
				}
			})
			won.Store(0)
			refused.Store(0)
			concurrently(6, func(i int) {
				status, body, err := k.try("POST", "/ip_policy_rules", rule(ep.MaxRulesPerIPPolicy+i))
				switch {
				case err == nil && status == 201:
					won.Add(1)
				case err == nil && status == 400 && body["error_code"] == "ERR_NGROK_215":
					refused.Add(1)
				default:
					t.Errorf("rule create: %d %v %v", status, body, err)
				}
			})
			if won.Load() != 2 || refused.Load() != 4 {
				t.Fatalf("racing creates for 2 free rule slots: %d created, %d refused", won.Load(), refused.Load())
			}
			r = e.do(tok, "POST", "/ip_policy_rules", rule(ep.MaxRulesPerIPPolicy+10)).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "ip_policy_id")

			// Limits checked on the body alone.
			hps := make([]any, ep.MaxHostportsPerEdge+1)
			for i := range hps {
				hps[i] = fmt.Sprintf("h%d.example.com:443", i)
			}
			r = e.do(tok, "POST", "/edges/https", map[string]any{"hostports": hps}).wantError(t, 400, ep.CodeTooManyHostports)
			wantErrField(t, r, "hostports")
			r = e.do(tok, "PATCH", "/edges/tls/"+k.tlsEdge(), map[string]any{"hostports": hps}).wantError(t, 400, ep.CodeTooManyHostports)
			wantErrField(t, r, "hostports")
			r = e.do(tok, "POST", "/edges/tcp", map[string]any{"traffic_policy": map[string]any{"value": policyOfSize(ep.MaxTrafficPolicyBytes + 1)}}).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "traffic_policy.value")
			headers := map[string]any{}
			for i := range ep.MaxHeaderEntries + 1 {
				headers[fmt.Sprintf("X-H%d", i)] = "v"
			}
			r = e.do(tok, "POST", path, map[string]any{"match_type": "path_prefix", "match": "/h", "response_headers": map[string]any{"add": headers}}).wantError(t, 400, ep.CodeTooManyHeaders)
			wantErrField(t, r, "response_headers.add")
			r = e.do(tok, "POST", "/backends/http_response", map[string]any{"headers": headers}).wantError(t, 400, ep.CodeTooManyHeaders)
			wantErrField(t, r, "headers")
			labels := map[string]any{}
			for i := range ep.MaxBackendLabels + 1 {
				labels[fmt.Sprintf("k%d", i)] = "v"
			}
			r = e.do(tok, "POST", "/backends/tunnel_group", map[string]any{"labels": labels}).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "labels")
			ids, weights := make([]any, ep.MaxChildBackends+1), map[string]any{}
			for i := range ids {
				ids[i] = fmt.Sprintf("bkdsb_%027d", i)
				weights[fmt.Sprintf("bkdsb_%027d", i)] = 1
			}
			r = e.do(tok, "POST", "/backends/failover", map[string]any{"backends": ids}).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "backends")
			r = e.do(tok, "POST", "/backends/weighted", map[string]any{"backends": weights}).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "backends")
			regexes := make([]any, ep.MaxUserAgentRegexes+1)
			for i := range regexes {
				regexes[i] = fmt.Sprintf("bot%d", i)
			}
			r = e.do(tok, "POST", path, map[string]any{"match_type": "path_prefix", "match": "/ua", "user_agent_filter": map[string]any{"deny": regexes}}).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "user_agent_filter.deny")
			pols := make([]any, ep.MaxModuleListEntries+1)
			for i := range pols {
				pols[i] = fmt.Sprintf("ipp_%027d", i)
			}
			r = e.do(tok, "POST", "/edges/tcp", map[string]any{"ip_restriction": map[string]any{"ip_policy_ids": pols}}).wantError(t, 400, ep.CodeInvalid)
			wantErrField(t, r, "ip_restriction.ip_policy_ids")
		})
	}
}

// TestLargestHTTPSEdgeResponse builds the largest HTTPS edge the limits allow — every hostport,
// the longest annotations, mutual TLS with every authority, and every route at its largest size
// with the most references (whose uris the server adds) — and requires its GET to stay under
// ep.MaxHTTPSEdgeResponseBytes, the documented bound of one response showing an edge.
func TestLargestHTTPSEdgeResponse(t *testing.T) {
	e := newEnv(t)
	k := edgeKit{e, e.admin}
	tok := e.admin.token
	hps := make([]any, ep.MaxHostportsPerEdge)
	for i := range hps {
		hps[i] = k.domain() + ":443"
	}
	cas := make([]any, ep.MaxModuleListEntries)
	for i := range cas {
		cas[i] = k.ca()
	}
	edge := k.post("/edges/https", map[string]any{"hostports": hps,
		"description": strings.Repeat("d", ep.MaxDescription), "metadata": strings.Repeat("m", ep.MaxMetadata),
		"mutual_tls": map[string]any{"certificate_authority_ids": cas}, "tls_termination": map[string]any{"min_version": "1.2"}}).str("id")
	pols := make([]any, ep.MaxModuleListEntries)
	for i := range pols {
		pols[i] = k.ipPolicy()
	}
	backend := k.backend()
	route := func(i, pad int) map[string]any {
		return map[string]any{"match_type": "path_prefix", "match": fmt.Sprintf("/%04d", i),
			"description": strings.Repeat("d", ep.MaxDescription), "metadata": strings.Repeat("m", ep.MaxMetadata),
			"backend":         map[string]any{"backend_id": backend},
			"ip_restriction":  map[string]any{"ip_policy_ids": pols},
			"traffic_policy":  map[string]any{"value": policyOfSize(ep.MaxTrafficPolicyBytes)},
			"request_headers": map[string]any{"add": map[string]any{"X-Pad": strings.Repeat("a", pad)}}}
	}
	// The largest pad a route takes, found on the first route by bisection.
	path := "/edges/https/" + edge + "/routes"
	first := k.post(path, route(0, 0)).str("id")
	lo, hi := 0, ep.MaxRouteBytes // lo fits, hi does not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		body := route(0, mid)
		delete(body, "match_type")
		if r := e.do(tok, "PATCH", path+"/"+first, body); r.status == 200 {
			lo = mid
		} else {
			r.wantError(t, 400, ep.CodeInvalid)
			hi = mid
		}
	}
	e.do(tok, "PATCH", path+"/"+first, route(0, lo)).must(t, 200)
	for i := 1; i < ep.MaxRoutesPerEdge; i++ {
		k.post(path, route(i, lo))
	}
	e.do(tok, "POST", path, route(ep.MaxRoutesPerEdge, lo)).wantError(t, 400, ep.CodeTooManyRoutes)

	r := e.do(tok, "GET", "/edges/https/"+edge, nil).must(t, 200)
	if n := len(r.items(t, "routes")); n != ep.MaxRoutesPerEdge {
		t.Fatalf("%d routes, want %d", n, ep.MaxRoutesPerEdge)
	}
	size := len(r.raw)
	t.Logf("the largest HTTPS edge answers %d bytes (bound %d)", size, ep.MaxHTTPSEdgeResponseBytes)
	if size > ep.MaxHTTPSEdgeResponseBytes {
		t.Fatalf("the largest HTTPS edge answers %d bytes, more than the documented bound of %d", size, ep.MaxHTTPSEdgeResponseBytes)
	}
	if size < ep.MaxRoutesPerEdge*(ep.MaxRouteBytes-4<<10) {
		t.Fatalf("the edge answers only %d bytes: it is not the largest the limits allow", size)
	}

	// A list shows edges with their routes too: a page ends early rather than pass the bound. A
	// second, newer edge with a tenth of the routes does not fit on a page with the largest one.
	second := k.post("/edges/https", map[string]any{}).str("id")
	for i := range ep.MaxRoutesPerEdge / 10 {
		k.post("/edges/https/"+second+"/routes", route(i, lo))
	}
	page := e.do(tok, "GET", "/edges/https?limit=100", nil).must(t, 200)
	edges := page.items(t, "https_edges")
	next, _ := page.body["next_page_uri"].(string)
	if len(edges) != 1 || edges[0]["id"] != second || next == "" {
		t.Fatalf("first page: %d edges, next_page_uri %q; want the newer edge alone and a next page", len(edges), next)
	}
	if len(page.raw) > ep.MaxHTTPSEdgeResponseBytes {
		t.Fatalf("the first page is %d bytes", len(page.raw))
	}
	page = e.do(tok, "GET", strings.TrimPrefix(next, e.base), nil).must(t, 200)
	if edges := page.items(t, "https_edges"); len(edges) != 1 || edges[0]["id"] != edge || page.body["next_page_uri"] != nil {
		t.Fatalf("second page: %d edges, next_page_uri %v; want the largest edge alone, last", len(edges), page.body["next_page_uri"])
	}
	if len(page.raw) > ep.MaxHTTPSEdgeResponseBytes {
		t.Fatalf("the second page is %d bytes", len(page.raw))
	}
}

// TestListPageBytes: a page of any list ends early rather than pass ep.MaxPageBytes — here HTTP
// response backends of nearly the 1 MiB a request body may hold, which a page of 100 would show
// as 100 MiB — and following next_page_uri shows every object once.
func TestListPageBytes(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	const n = 12
	body := map[string]any{"status_code": 200, "body": strings.Repeat("b", 60<<10), "headers": map[string]any{"X-Pad": strings.Repeat("h", 900<<10)}}
	for range n {
		e.do(tok, "POST", "/backends/http_response", body).must(t, 201)
	}
	seen, pages := 0, 0
	for path := "/backends/http_response?limit=100"; path != ""; pages++ {
		page := e.do(tok, "GET", path, nil).must(t, 200)
		seen += len(page.items(t, "backends"))
		if len(page.raw) > ep.MaxPageBytes {
			t.Fatalf("a page of %d bytes, over %d", len(page.raw), ep.MaxPageBytes)
		}
		next, _ := page.body["next_page_uri"].(string)
		path = strings.TrimPrefix(next, e.base)
	}
	if seen != n || pages != 2 {
		t.Fatalf("%d backends in %d pages, want %d in 2", seen, pages, n)
	}
}

// TestHostileAccountLiveHeap is a hostile account within the limits: a thousand TLS
// edges with the largest traffic policy (64 MB of documents), each read twice, concurrently, so
// that the read cache fills and keeps rendered bodies. What the process holds afterwards (its
// live heap after a collection, against the same figure before) stays within the read cache's
// budget and a margin: without the cache's byte bound it held every document and rendered body,
// about twice the data.
func TestHostileAccountLiveHeap(t *testing.T) {
	e := newEnvOn(t, "sqlite", server.Config{}) // the read cache is SQLite's
	k := edgeKit{e, e.admin}
	live := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := live()
	const edges = 1000
	pol := policyOfSize(ep.MaxTrafficPolicyBytes)
	ids := make([]string, edges)
	for i := range ids {
		ids[i] = k.post("/edges/tls", map[string]any{"traffic_policy": map[string]any{"value": pol}}).str("id")
	}
	concurrently(8, func(w int) {
		for i := w; i < edges; i += 8 {
			for range 2 {
				if status, _, err := k.try("GET", "/edges/tls/"+ids[i], nil); err != nil || status != 200 {
					t.Errorf("GET: %d %v", status, err)
					return
				}
			}
		}
	})
	grown := live() - before
	stats := e.st.ReadCacheStats()
	t.Logf("the live heap grew by %d MiB; read cache: %+v", grown>>20, stats)
	if stats.Bytes > store.DefaultReadCacheBytes {
		t.Fatalf("the read cache counts %d bytes, over its budget of %d", stats.Bytes, store.DefaultReadCacheBytes)
	}
	if limit := int64(store.DefaultReadCacheBytes + 16<<20); grown > limit {
		t.Fatalf("the live heap grew by %d bytes, more than the read cache's budget and 16 MiB (%d)", grown, limit)
	}
}
