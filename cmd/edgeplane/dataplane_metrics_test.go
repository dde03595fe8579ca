package main

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testproc"
)

// TestConnectionMetricsDataPlaneOff: with the data plane off, /metrics reports the API
// listener's connections, counted by the limiter that serves them (a connection over
// --max-connections-per-ip is refused and counted so), and none of the data plane's series.
func TestConnectionMetricsDataPlaneOff(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--max-connections-per-ip", "1", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := metricsListenAddr(t, p)
	scrape := func() string {
		t.Helper()
		res, err := client.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return string(body)
	}
	value := func(text, series string) float64 {
		t.Helper()
		v, ok := testproc.SeriesValue(t, text, series)
		if !ok {
			t.Fatalf("no series %s in:\n%s", series, text)
		}
		return v
	}
	held, err := net.Dial("tcp", p.Addr) // the address's one connection, idle
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitFor(t, "the held connection counted", func() bool {
		return value(scrape(), `edgeplane_connections_open{listener="api"}`) == 1
	})
	over, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := over.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatalf("the connection over the address's limit was not closed: %d, %v", n, err)
	}
	text := scrape()
	for series, want := range map[string]float64{
		`edgeplane_connections_open{listener="api"}`:                    1,
		`edgeplane_connections_total{listener="api",result="accepted"}`: 1,
		`edgeplane_connections_total{listener="api",result="refused"}`:  1,
		`edgeplane_connections_total{listener="api",result="evicted"}`:  0,
	} {
		if got := value(text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, absent := range []string{`listener="agent"`, `listener="public"`, "edgeplane_agent_", "edgeplane_public_", "edgeplane_plan_"} {
		if strings.Contains(text, absent) {
			t.Errorf("with the data plane off, the metrics hold %s", absent)
		}
	}
}

// waitFor polls cond every 20 ms for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
