package agents

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testproc"
	"golang.ngrok.com/ngrok/config"
)

// TestMetrics: the data plane's series on /metrics follow what happens to a real server: an
// agent session and its bind, public requests to a bound and an unbound host (one ERR_NGROK_3200
// answer), the connections of every listener, a plan rebuild after an API change, and the
// session's end. No series names a host, an id or a token.
func TestMetrics(t *testing.T) {
	w := start(t)
	m := w.metrics()
	for _, series := range []string{
		`edgeplane_connections_open{listener="api"}`, `edgeplane_connections_open{listener="agent"}`,
		`edgeplane_connections_open{listener="public"}`,
		`edgeplane_connections_total{listener="public",result="refused"}`,
		`edgeplane_connections_total{listener="agent",result="evicted"}`,
		`edgeplane_public_requests_total{listener="https"}`,
		`edgeplane_plan_build_seconds_count`, `edgeplane_plan_build_seconds_bucket{le="0.001"}`,
		`edgeplane_plan_build_seconds_bucket{le="10"}`,
	} {
		m.value(series)
	}
	m.want(`edgeplane_agent_sessions`, 0)
	m.want(`edgeplane_agent_tunnels`, 0)
	m.want(`edgeplane_tcp_edge_ports_unavailable`, 0)
	m.want(`edgeplane_agent_window_budget_bytes`, 32<<20) // the default --agent-window-budget-mib
	for _, series := range []string{`edgeplane_agent_window_held_bytes`, `edgeplane_agent_window_held_peak_bytes`,
		`edgeplane_agent_window_account_peak_bytes`, `edgeplane_agent_window_accounts`} {
		m.want(series, 0)
	}
	// The codes an operator alerts on are there before their first answer, at 0 (no other
	// test in this process answered with them: each test runs its own serve).
	for _, code := range []string{"3200", "3210", "6515", "8012"} {
		m.want(`edgeplane_public_errors_total{code="ERR_NGROK_`+code+`"}`, 0)
	}
	if n := m.value(`edgeplane_connections_total{listener="api",result="accepted"}`); n < 1 {
		t.Errorf("the API listener accepted %v connections, want at least the scrape's", n)
	}
	if n := m.value(`edgeplane_plan_rebuilds_total`); n < 1 {
		t.Errorf("edgeplane_plan_rebuilds_total = %v, want the first plan at least", n)
	}
	before := m

	credID, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(t.Context(), config.HTTPEndpoint(config.WithDomain("metrics.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	// The session is counted before its Auth is answered, the tunnel before its Bind.
	m = w.metrics()
	m.want(`edgeplane_agent_sessions`, 1)
	m.want(`edgeplane_agent_tunnels`, 1)
	if n := m.value(`edgeplane_connections_total{listener="agent",result="accepted"}`); n < 1 {
		t.Errorf("the agent listener accepted %v connections, want at least 1", n)
	}
	if n := m.value(`edgeplane_connections_open{listener="agent"}`); n < 1 {
		t.Errorf("%v agent connections open, want at least 1", n)
	}

	if st, body, _ := get(t, w.httpClient(), "http://metrics.edgeplane.app/x"); st != 200 || !strings.HasPrefix(body, "hello host=metrics.edgeplane.app") {
		t.Fatalf("bound host: %d %q", st, body)
	}
	if st, _, h := get(t, w.httpClient(), "http://unbound.edgeplane.app/"); st != 404 || h.Get("ngrok-error-code") != "ERR_NGROK_3200" {
		t.Fatalf("unbound host: %d %q", st, h.Get("ngrok-error-code"))
	}
	m = w.metrics()
	m.grew(before, `edgeplane_public_requests_total{listener="http"}`, 2)
	m.grew(before, `edgeplane_public_requests_total{listener="https"}`, 0)
	m.grew(before, `edgeplane_public_errors_total{code="ERR_NGROK_3200"}`, 1)
	if n := m.value(`edgeplane_connections_total{listener="public",result="accepted"}`); n < 1 {
		t.Errorf("the public listeners accepted %v connections, want at least 1", n)
	}
	for _, secret := range []string{"metrics.edgeplane.app", "unbound.edgeplane.app", credID, token} {
		if strings.Contains(m.text, secret) {
			t.Errorf("the exposition names %q", secret)
		}
	}

	// A reserved domain puts the account in the routing plan: one more build, one more swap.
	w.reserveDomain("metrics.example.com")
	eventually(t, 2*time.Second, "a plan built for the reserved domain", func() bool {
		m = w.metrics()
		return m.value(`edgeplane_plan_build_seconds_count`) > before.value(`edgeplane_plan_build_seconds_count`) &&
			m.value(`edgeplane_plan_rebuilds_total`) > before.value(`edgeplane_plan_rebuilds_total`)
	})

	sess.Close()
	eventually(t, 2*time.Second, "the session's end counted", func() bool {
		m = w.metrics()
		return m.value(`edgeplane_agent_sessions`) == 0 && m.value(`edgeplane_agent_tunnels`) == 0
	})
}

// exposition is one scrape of /metrics.
type exposition struct {
	t    *testing.T
	text string
}

// metrics scrapes /metrics on the API listener (no API key).
func (w *world) metrics() exposition {
	w.t.Helper()
	resp, err := http.Get(w.api + "/metrics")
	if err != nil {
		w.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		w.t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	return exposition{t: w.t, text: string(body)}
}

// lookup finds the line `series value` (series is the name and its labels as the exposition
// writes them, sorted by label name).
func (e exposition) lookup(series string) (float64, bool) {
	e.t.Helper()
	return testproc.SeriesValue(e.t, e.text, series)
}

// value is the series' value; the test fails when the series is absent.
func (e exposition) value(series string) float64 {
	e.t.Helper()
	v, ok := e.lookup(series)
	if !ok {
		e.t.Fatalf("no series %s in:\n%s", series, e.text)
	}
	return v
}

func (e exposition) want(series string, v float64) {
	e.t.Helper()
	if got := e.value(series); got != v {
		e.t.Errorf("%s = %v, want %v", series, got, v)
	}
}

// grew checks that a counter grew by n since an earlier scrape, where it may have been absent
// (a counter labelled with an error code other than the watched ones appears with the code's
// first answer).
func (e exposition) grew(earlier exposition, series string, n float64) {
	e.t.Helper()
	was, _ := earlier.lookup(series)
	if got := e.value(series) - was; got != n {
		e.t.Errorf("%s grew by %v, want %v", series, got, n)
	}
}
