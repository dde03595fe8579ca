package server_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/internal/testproc"
	"github.com/edgeplane/edgeplane/server"
)

// pendingMetrics asks newEnvConfig for metrics over the env's own store.
var pendingMetrics = &server.Metrics{}

func scrape(t *testing.T, e *env) string {
	t.Helper()
	res, err := http.Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", res.StatusCode, body)
	}
	return string(body)
}

// metricValue is the value of an unlabelled series in an exposition.
func metricValue(t *testing.T, exposition, name string) float64 {
	t.Helper()
	v, ok := testproc.SeriesValue(t, exposition, name)
	if !ok {
		t.Fatalf("no series %s", name)
	}
	return v
}

func TestMetrics(t *testing.T) {
	e := newEnvConfig(t, server.Config{Metrics: pendingMetrics, MetricsOnMain: true, RateLimit: server.RateLimit{Requests: 2, Per: time.Hour}}) // unmatched paths spend no tokens
	id := e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201).str("id")
	e.do(e.admin.token, "GET", "/ip_policies/"+id, nil).must(t, 200)
	e.do(e.admin.token, "GET", "/nope", nil).wantError(t, 404, ep.CodeNotFound)
	e.do(e.admin.token, "GET", "/ip_policies", nil).wantError(t, 429, ep.CodeRateLimited)
	m := scrape(t, e)
	for _, want := range []string{
		`edgeplane_http_requests_total{method="POST",route="POST /ip_policies",status="201"} 1`,
		`edgeplane_http_requests_total{method="GET",route="GET /ip_policies/{id}",status="200"} 1`,
		`edgeplane_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`edgeplane_http_requests_total{method="GET",route="GET /ip_policies",status="429"} 1`,
		`edgeplane_http_request_duration_seconds_bucket{method="GET",route="GET /ip_policies/{id}",le="+Inf"} 1`,
		`edgeplane_http_requests_in_flight 1`, // the scrape itself
		`edgeplane_rate_limited_total 1`,
		`edgeplane_db_connections_open{pool=`,
		`edgeplane_read_cache_total{result="hit"}`,
		`edgeplane_read_cache_total{result="miss"}`,
		`edgeplane_write_batches_total `,
		`edgeplane_write_transactions_total `,
		`edgeplane_key_lookup_queries_total `,
		`edgeplane_key_lookups_total `,
		`edgeplane_key_lookups_alone_total `,
		`go_goroutines`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// On SQLite the POST went through the group committer, in a batch.
	if testdb.Engine() == "sqlite" && (metricValue(t, m, "edgeplane_write_transactions_total") < 1 || metricValue(t, m, "edgeplane_write_batches_total") < 1) {
		t.Error("the group commit counters did not count the POST")
	}
	// On PostgreSQL every request's key was looked up through the combiner: the POST's, the GET's
	// (with its object), the 404's is not (an unmatched path) and the 429's is (the limit is
	// checked after the key), so at least three.
	if testdb.Engine() == "postgres" && (metricValue(t, m, "edgeplane_key_lookups_total") < 3 || metricValue(t, m, "edgeplane_key_lookup_queries_total") < 1) {
		t.Error("the combined lookup counters did not count the requests' keys")
	}
	if strings.Contains(m, id) || strings.Contains(m, e.admin.token) {
		t.Fatal("metrics carry an object id or a token in a label")
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnvConfig(t, server.Config{RateLimit: server.RateLimit{Requests: 2, Per: time.Minute}})
	other := e.keyFor(e.admin.caller)
	e.do(e.admin.token, "GET", "/ip_policies", nil).must(t, 200)
	e.do(e.admin.token, "GET", "/ip_policies", nil).must(t, 200)
	r := e.do(e.admin.token, "POST", "/ip_policies", nil).wantError(t, 429, ep.CodeRateLimited)
	// A GET by id, which authenticates in its own query, is limited the same way and shows
	// nothing of the object.
	policy := e.do(other, "POST", "/ip_policies", map[string]any{"description": "secret"}).must(t, 201).str("id")
	if got := e.do(e.admin.token, "GET", "/ip_policies/"+policy, nil).wantError(t, 429, ep.CodeRateLimited); strings.Contains(string(got.raw), "secret") {
		t.Fatalf("a rate-limited GET shows the object: %s", got.raw)
	}
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// The refused create changed nothing; another key of the same account has its own bucket.
	if n := len(e.do(other, "GET", "/ip_policies", nil).must(t, 200).items(t, "ip_policies")); n != 1 {
		t.Fatalf("a rate-limited create created %d policies", n)
	}
	// Unauthenticated endpoints are not limited.
	for range 5 {
		e.doHeaders(nil, "GET", "/healthz", nil).must(t, 200)
	}
	for _, bad := range []string{"x", "10", "0/1s", "10/0s", "-1/1s", "5/fortnight"} {
		if _, err := server.ParseRateLimit(bad); err == nil {
			t.Errorf("ParseRateLimit(%q) accepted", bad)
		}
	}
	if l, err := server.ParseRateLimit("120/60s"); err != nil || l.Requests != 120 || l.Per != time.Minute {
		t.Fatalf("ParseRateLimit: %+v %v", l, err)
	}
}

func TestCORS(t *testing.T) {
	e := newEnvConfig(t, server.Config{CORSOrigins: []string{"https://app.example.com"}})
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest("OPTIONS", e.srv.URL+"/ip_policies", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, ngrok-version, content-type")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	res := preflight("https://app.example.com")
	if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(res.Header.Get("Access-Control-Allow-Headers"), "Ngrok-Version") ||
		!strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), "PATCH") {
		t.Fatalf("preflight: %d %v", res.StatusCode, res.Header)
	}
	if res := preflight("https://evil.example.com"); res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a foreign origin was allowed: %v", res.Header)
	}
	r := e.doHeaders(map[string]string{"Authorization": "Bearer " + e.admin.token, "Ngrok-Version": "2", "Origin": "https://app.example.com"}, "GET", "/ip_policies", nil).must(t, 200)
	if r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "Ngrok-Operation-Id") {
		t.Fatalf("CORS headers on a request: %v", r.header)
	}
	// Without configured origins there is no CORS at all.
	plain := newEnv(t)
	r = plain.doHeaders(map[string]string{"Authorization": "Bearer " + plain.admin.token, "Ngrok-Version": "2", "Origin": "https://app.example.com"}, "GET", "/ip_policies", nil).must(t, 200)
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS headers without configured origins")
	}
	any := newEnvConfig(t, server.Config{CORSOrigins: []string{"*"}})
	r = any.doHeaders(map[string]string{"Authorization": "Bearer " + any.admin.token, "Ngrok-Version": "2", "Origin": "https://x.example"}, "GET", "/ip_policies", nil).must(t, 200)
	if r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("wildcard origin: %v", r.header)
	}
}

// TestMetricsLabelsBounded: every label comes from a closed set, so requests with hundreds of
// invented methods and raw paths add no series after the first of each kind (once, 20,000
// random methods added 20,000 series).
func TestMetricsLabelsBounded(t *testing.T) {
	e := newEnvConfig(t, server.Config{Metrics: pendingMetrics, MetricsOnMain: true})
	id := e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201).str("id")
	series := func() int {
		n := 0
		for line := range strings.Lines(scrape(t, e)) {
			if strings.HasPrefix(line, "edgeplane_http_") {
				n++
			}
		}
		return n
	}
	round := func(i int) {
		method := "X" + strconv.Itoa(i) + "METHOD"
		e.do(e.admin.token, method, "/ip_policies", nil).wantError(t, 405, ep.CodeMethodNotAllowed)
		e.do(e.admin.token, method, "/ip_policies/"+id, nil).wantError(t, 405, ep.CodeMethodNotAllowed)
		e.do(e.admin.token, method, "/nope/"+strconv.Itoa(i), nil).wantError(t, 404, ep.CodeNotFound)
		e.do(e.admin.token, "GET", "/nope/"+strconv.Itoa(i), nil).wantError(t, 404, ep.CodeNotFound)
		e.do(e.admin.token, "GET", "/ip_policies/ipp_"+strconv.Itoa(i), nil).wantError(t, 404, ep.CodeNotFound)
		e.do(e.admin.token, "DELETE", "/ip_policies/ipp_"+strconv.Itoa(i), nil).wantError(t, 404, ep.CodeNotFound)
	}
	round(0)
	scrape(t, e) // the scrape's own series exist from here on
	before := series()
	for i := 1; i <= 200; i++ {
		round(i)
	}
	m := scrape(t, e)
	if after := series(); after != before {
		t.Fatalf("200 rounds of invented methods and paths added %d series (%d before)", after-before, before)
	}
	if !strings.Contains(m, `method="other"`) || strings.Contains(m, "METHOD") || strings.Contains(m, "/nope/") || strings.Contains(m, "ipp_") {
		t.Fatal("a raw method or path reached a label")
	}
}
