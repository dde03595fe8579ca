package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/benchcpu"
	"github.com/edgeplane/edgeplane/internal/serving"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// Benchmarks of the HTTP layer's hot paths: go test -run XXX -bench . -benchmem ./server/
// They report cpu-ns/op, the process's CPU time per operation, which on a shared machine is
// steadier than ns/op.

// benchHTTPSEdge is an HTTPS edge with two routes, each with several modules, as the store
// returns it (uris empty).
func benchHTTPSEdge() *ep.HTTPSEdge {
	route := func(id, match string) *ep.HTTPSEdgeRoute {
		return &ep.HTTPSEdgeRoute{
			EdgeID:    "edghts_3MPxPY6L8eny93zPfrocV5rPAvT",
			Meta:      ep.Meta{ID: id, CreatedAt: "2026-11-21T12:00:00Z"},
			MatchType: ep.MatchPathPrefix, Match: match,
			Annotations: ep.Annotations{Description: "route " + match},
			Backend:     &ep.EndpointBackend{Enabled: true, Backend: ep.NewRef("bkdsa_3MPxPY6L8eny93zPfrocV5rPAvU")},
			IPRestriction: &ep.EndpointIPPolicy{Enabled: true, IPPolicies: []*ep.Ref{
				ep.NewRef("ipp_3MPxPY6L8eny93zPfrocV5rPAvV"), ep.NewRef("ipp_3MPxPY6L8eny93zPfrocV5rPAvW")}},
			CircuitBreaker: &ep.EndpointCircuitBreaker{Enabled: true, TrippedDuration: 10, RollingWindow: 10,
				NumBuckets: 10, VolumeThreshold: 20, ErrorThresholdPercentage: 0.5},
			Compression: &ep.EndpointToggle{Enabled: true},
			RequestHeaders: &ep.EndpointHeaders{Enabled: true, Add: map[string]string{"x-edge": "edgeplane"},
				Remove: []string{"x-internal"}},
		}
	}
	return &ep.HTTPSEdge{
		Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_3MPxPY6L8eny93zPfrocV5rPAvT", CreatedAt: "2026-11-21T12:00:00Z"},
			Annotations: ep.Annotations{Description: "benchmark edge", Metadata: `{"team":"platform"}`},
			Hostports:   []string{"app.example.com:443", "api.example.com:443"}},
		MutualTLS:      &ep.EndpointMutualTLS{Enabled: true, CertificateAuthorities: []*ep.Ref{ep.NewRef("ca_3MPxPY6L8eny93zPfrocV5rPAvX")}},
		TLSTermination: &ep.EndpointTLSTermination{Enabled: true, TerminateAt: "edge", MinVersion: strPtr("1.2")},
		Routes: []*ep.HTTPSEdgeRoute{
			route("edghtsrt_3MPxPY6L8eny93zPfrocV5rPAvY", "/api"),
			route("edghtsrt_3MPxPY6L8eny93zPfrocV5rPAvZ", "/static"),
		},
	}
}

func strPtr(s string) *string { return &s }

// discardWriter is an http.ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkEncodeHTTPSEdge renders an HTTPS edge with its routes and their modules: uris filled
// in from the base URL, then JSON.
func BenchmarkEncodeHTTPSEdge(b *testing.B) {
	s := &Server{base: "https://api.example.com"}
	edges := newCollection(ep.HTTPSEdges)
	edges.embeds = newCollection(ep.HTTPSEdgeRoutes)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	benchcpu.PerOp(b)
	for b.Loop() {
		doc := benchHTTPSEdge()
		s.resolve(edges, "", doc)
		s.writeJSON(w, http.StatusOK, doc)
	}
}

// benchServer is a server on a fresh database with an API key, an IP policy and a rule, with the
// request log and metrics of edgeplane serve.
func benchServer(b testing.TB) (h http.Handler, token, policy, rule string) {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.Fresh(b, testdb.Engine()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	admin, _, err := st.EnsureAccount(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		b.Fatal(err)
	}
	pol, err := st.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
	if err != nil {
		b.Fatal(err)
	}
	cidr, action := "192.0.2.0/24", "allow"
	policyID := pol.Base().ID
	body := &ep.IPPolicyRuleCreate{CIDR: &cidr, IPPolicyID: &policyID, Action: &action}
	if err := body.Validate(); err != nil {
		b.Fatal(err)
	}
	r, err := st.Create(ctx, admin, ep.IPPolicyRules, "", body)
	if err != nil {
		b.Fatal(err)
	}
	// Configured as serve configures it: a request line for every request, written through a
	// LogWriter (to nowhere), and the metrics.
	logOut := serving.NewLogWriter(io.Discard)
	b.Cleanup(func() { logOut.Close() })
	log, err := serving.NewLogger(logOut, "text", slog.LevelInfo)
	if err != nil {
		b.Fatal(err)
	}
	srv := New(st, Config{BaseURL: "http://127.0.0.1:8080", Logger: log, Metrics: NewMetrics(st)})
	return srv, *key.(*ep.APIKey).Token, policyID, r.Base().ID
}

func benchRequest(method, path, token string, body []byte) *http.Request {
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Ngrok-Version", "2")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// BenchmarkServeGet is GET /ip_policy_rules/{id} through the whole handler (middleware,
// authentication, store, rendering), without the network.
func BenchmarkServeGet(b *testing.B) {
	h, token, _, rule := benchServer(b)
	b.ReportAllocs()
	benchcpu.PerOp(b)
	for b.Loop() {
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, benchRequest("GET", "/ip_policy_rules/"+rule, token, nil))
	}
}

// BenchmarkServeCreate is POST /ip_policy_rules through the whole handler, from 16 goroutines
// per CPU (so SQLite's group commit has company). The rules go to 256 policies in turn, as
// edgeplane-bench spreads its creates over many policies: each create counts its policy's rules
// (ep.MaxRulesPerIPPolicy), and a policy with hundreds of them would make that count the cost
// measured. Policies are added so that none holds more than half of the limit.
func BenchmarkServeCreate(b *testing.B) {
	h, token, policy, _ := benchServer(b)
	policies := max(256, b.N/(ep.MaxRulesPerIPPolicy/2)+1)
	var bodies [][]byte
	for i := range policies {
		if i > 0 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, benchRequest("POST", "/ip_policies", token, []byte(`{}`)))
			var p struct{ ID string }
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusCreated {
				b.Fatalf("policy: %d %s", rec.Code, rec.Body)
			}
			policy = p.ID
		}
		bodies = append(bodies, []byte(`{"ip_policy_id":"`+policy+`","cidr":"192.0.2.0/24","action":"allow","description":"benchmark"}`))
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	benchcpu.PerOp(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := bodies[int(next.Add(1)-1)%len(bodies)]
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, benchRequest("POST", "/ip_policy_rules", token, body))
			if rec.Code != http.StatusCreated {
				b.Fatalf("create: %d %s", rec.Code, rec.Body)
			}
		}
	})
}

// benchRouteBody is a POST body of an HTTPS edge route with several modules, as clients send it.
var benchRouteBody = []byte(`{"edge_id":"edghts_3MPxPY6L8eny93zPfrocV5rPAvT","match_type":"path_prefix","match":"/api",` +
	`"description":"route /api","metadata":"{\"team\":\"platform\"}",` +
	`"backend":{"enabled":true,"backend_id":"bkdsa_3MPxPY6L8eny93zPfrocV5rPAvU"},` +
	`"ip_restriction":{"enabled":null,"ip_policy_ids":["ipp_3MPxPY6L8eny93zPfrocV5rPAvV","ipp_3MPxPY6L8eny93zPfrocV5rPAvW"]},` +
	`"circuit_breaker":{"enabled":true,"tripped_duration":10,"rolling_window":10,"num_buckets":10,"volume_threshold":20,"error_threshold_percentage":0.5},` +
	`"compression":{"enabled":true},` +
	`"request_headers":{"enabled":true,"add":{"x-edge":"edgeplane","x-team":"platform"},"remove":["x-internal"]},` +
	`"response_headers":null,"webhook_verification":null,"oauth":null}`)

// BenchmarkDecodeRouteBody decodes an HTTPS edge route body with its modules, as POST and PATCH
// do before validation.
func BenchmarkDecodeRouteBody(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchRouteBody)))
	benchcpu.PerOp(b)
	for b.Loop() {
		if err := decodeStrict(benchRouteBody, new(ep.HTTPSEdgeRouteBody)); err != nil {
			b.Fatal(err)
		}
	}
}
