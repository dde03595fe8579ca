package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// TestMetricsRegister: a collector registered on the server's metrics is served by its handler
// beside the API's own metrics; one registered twice, or clashing with an API metric, is refused.
func TestMetricsRegister(t *testing.T) {
	st, err := store.Open(context.Background(), testdb.Fresh(t, testdb.Engine()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := server.NewMetrics(st)
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "edgeplane_test_extra_total", Help: "A test counter."})
	extra.Add(3)
	if err := m.Register(extra); err != nil {
		t.Fatalf("Register: %v", err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"edgeplane_test_extra_total 3\n", "edgeplane_http_requests_in_flight "} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("the exposition lacks %q:\n%s", want, rec.Body)
		}
	}
	if err := m.Register(extra); err == nil {
		t.Error("a collector registered twice was accepted")
	}
	clash := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeplane_http_requests_in_flight", Help: "Other help."}, []string{"x"})
	if err := m.Register(clash); err == nil {
		t.Error("a collector clashing with an API metric was accepted")
	}
}
