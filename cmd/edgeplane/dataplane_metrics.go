package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/server"
)

// The data plane's metrics on /metrics, beside the API's. Most are read when they are scraped,
// from counts the parts keep anyway (the limiters' stats, the gateway's sessions, the registry's
// tunnels, the planner's swaps), so they cost the agents' and the public requests' paths
// nothing; the public requests and the error codes cost one atomic add each (ingress.Server,
// whose counter of error pages enforce.ErrorPage adds to). As for the API's, no label carries an id, a host, a token or an
// account, and every label value comes from a closed set: listener names, results and error
// codes written as constants in the code.

var (
	agentSessionsDesc = prometheus.NewDesc("edgeplane_agent_sessions",
		"Agent sessions authenticated on this replica now.", nil, nil)
	agentTunnelsDesc = prometheus.NewDesc("edgeplane_agent_tunnels",
		"Tunnels (endpoint binds, each bind of a pooled endpoint, and labeled tunnels) bound on this replica now.", nil, nil)
	connOpenDesc = prometheus.NewDesc("edgeplane_connections_open",
		"Connections open now, by listener: api, agent, public (HTTP, TLS and TCP endpoints together).", []string{"listener"}, nil)
	connTotalDesc = prometheus.NewDesc("edgeplane_connections_total",
		"Connections by listener and result: accepted (handed to the server), refused (closed at once, their address at its limit), evicted (closed while unproductive to admit a new client at the listener's limit), account_refused (closed or refused, their account at its share of the public connections).",
		[]string{"listener", "result"}, nil)
	publicRequestsDesc = prometheus.NewDesc("edgeplane_public_requests_total",
		"HTTP requests received on the public listeners, by listener: http, https (the TLS listener's HTTPS endpoints and edges).", []string{"listener"}, nil)
	publicErrorsDesc = prometheus.NewDesc("edgeplane_public_errors_total",
		"Public requests edgeplane answered itself with an ngrok error code, by code: ERR_NGROK_3200 offline endpoint, ERR_NGROK_8012 agent failure, ERR_NGROK_6515 no tunnel or backend, ERR_NGROK_3210 a module failing closed, ...",
		[]string{"code"}, nil)
	policyLogsDesc = prometheus.NewDesc("edgeplane_policy_log_records_total",
		"Records of traffic policies' log actions, by result: written to the log, or dropped (the account's policies over their bound of records per second).",
		[]string{"result"}, nil)
	windowBudgetDesc = prometheus.NewDesc("edgeplane_agent_window_budget_bytes",
		"Bytes beyond the agents' 256 KiB stream window that proxy streams' auto-tuned windows may hold at once (--agent-window-budget-mib; 0: off).", nil, nil)
	windowHeldDesc = prometheus.NewDesc("edgeplane_agent_window_held_bytes",
		"Bytes of the window budget proxy streams hold now.", nil, nil)
	windowPeakDesc = prometheus.NewDesc("edgeplane_agent_window_held_peak_bytes",
		"The most bytes of the window budget proxy streams held at once since the start.", nil, nil)
	windowAccountPeakDesc = prometheus.NewDesc("edgeplane_agent_window_account_peak_bytes",
		"The most bytes of the window budget any one account's streams held at once since the start (an account alone may hold half the budget, n accounts 1/(n+1) each).", nil, nil)
	windowAccountsDesc = prometheus.NewDesc("edgeplane_agent_window_accounts",
		"Accounts whose proxy streams hold some of the window budget now.", nil, nil)
	planRebuildsDesc = prometheus.NewDesc("edgeplane_plan_rebuilds_total",
		"Routing plans swapped in (at start, on each change of edges, routes, backends, policies, domains or certificates, and every 30 s).", nil, nil)
	tcpEdgePortsDesc = prometheus.NewDesc("edgeplane_tcp_edge_ports_unavailable",
		"Ports of TCP edges that this replica could not open at their last attempt (something else holds them) and is retrying: edges that do not listen here.", nil, nil)
)

// watchedErrorCodes are the public error codes reported at 0 before their first answer: an
// offline endpoint or unmatched route (3200), a module failing closed (3210), no tunnel or
// backend for an edge (6515), and the agent failing to carry a request (8012).
var watchedErrorCodes = []string{"ERR_NGROK_3200", "ERR_NGROK_3210", "ERR_NGROK_6515", "ERR_NGROK_8012"}

// dataPlaneMetrics is what the data plane keeps for its metrics beyond the counts its parts keep:
// the histogram of plan build times, which the planner reports to.
type dataPlaneMetrics struct {
	planBuild prometheus.Histogram
}

func newDataPlaneMetrics() dataPlaneMetrics {
	return dataPlaneMetrics{planBuild: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "edgeplane_plan_build_seconds",
		Help:    "Time to build one account's routing plan: read its snapshot from the database and build its part.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})}
}

// observePlanBuild is the planner's report of one account's build.
func (m dataPlaneMetrics) observePlanBuild(d time.Duration) { m.planBuild.Observe(d.Seconds()) }

// registerMetrics adds to the server's metrics the connection counts of the API listener's
// limiter and, when the data plane is on, of the agent and public listeners' limiters, with the
// rest of the data plane's metrics. With the data plane off, its metrics are absent.
func (d *dataPlane) registerMetrics(m *server.Metrics, api *netx.Limiter) error {
	conns := &connCollector{}
	conns.add("api", api)
	if d.gw == nil {
		return m.Register(conns)
	}
	conns.add("agent", d.agent)
	conns.add("public", d.public)
	if d.link != nil {
		conns.add("peer", d.peerLimiter)
		if err := m.Register(&peerCollector{d: d}); err != nil {
			return err
		}
	}
	return m.Register(conns, &dataPlaneCollector{d: d}, d.metrics.planBuild)
}

// connCollector reports the counts of connection limiters (netx.Limiter.Stats), each under its
// listener's name.
type connCollector struct {
	names    []string
	limiters []*netx.Limiter
}

func (c *connCollector) add(name string, l *netx.Limiter) {
	c.names = append(c.names, name)
	c.limiters = append(c.limiters, l)
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connOpenDesc
	ch <- connTotalDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	for i, l := range c.limiters {
		name, st := c.names[i], l.Stats()
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(st.Open), name)
		ch <- prometheus.MustNewConstMetric(connTotalDesc, prometheus.CounterValue, float64(st.Accepted), name, "accepted")
		ch <- prometheus.MustNewConstMetric(connTotalDesc, prometheus.CounterValue, float64(st.Refused), name, "refused")
		ch <- prometheus.MustNewConstMetric(connTotalDesc, prometheus.CounterValue, float64(st.Evicted), name, "evicted")
		ch <- prometheus.MustNewConstMetric(connTotalDesc, prometheus.CounterValue, float64(st.AccountRefused), name, "account_refused")
	}
}

// dataPlaneCollector reports the running data plane's sessions, tunnels, window budget, public
// requests and errors, plan swaps, and the TCP edge ports it cannot open.
type dataPlaneCollector struct{ d *dataPlane }

func (c *dataPlaneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{agentSessionsDesc, agentTunnelsDesc, publicRequestsDesc, publicErrorsDesc, planRebuildsDesc, policyLogsDesc, tcpEdgePortsDesc,
		windowBudgetDesc, windowHeldDesc, windowPeakDesc, windowAccountPeakDesc, windowAccountsDesc} {
		ch <- d
	}
}

func (c *dataPlaneCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	ch <- prometheus.MustNewConstMetric(agentSessionsDesc, prometheus.GaugeValue, float64(d.gw.Sessions()))
	ch <- prometheus.MustNewConstMetric(agentTunnelsDesc, prometheus.GaugeValue, float64(d.gw.Registry.Tunnels()))
	win, _ := d.gw.WindowBudget()
	for desc, v := range map[*prometheus.Desc]int64{windowBudgetDesc: win.Limit, windowHeldDesc: win.Used,
		windowPeakDesc: win.Peak, windowAccountPeakDesc: win.PeakAccount, windowAccountsDesc: int64(win.Accounts)} {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v))
	}
	overHTTP, overTLS := d.pub.Requests()
	ch <- prometheus.MustNewConstMetric(publicRequestsDesc, prometheus.CounterValue, float64(overHTTP), "http")
	ch <- prometheus.MustNewConstMetric(publicRequestsDesc, prometheus.CounterValue, float64(overTLS), "https")
	// The codes this data plane's public listeners answered with. The codes an operator alerts
	// on are reported from the start, at 0 until the first answer, so that rate() and increase()
	// see that answer too.
	counts := d.pub.Errors()
	for _, code := range watchedErrorCodes {
		if _, ok := counts[code]; !ok {
			counts[code] = 0
		}
	}
	for code, n := range counts {
		ch <- prometheus.MustNewConstMetric(publicErrorsDesc, prometheus.CounterValue, float64(n), code)
	}
	ch <- prometheus.MustNewConstMetric(planRebuildsDesc, prometheus.CounterValue, float64(d.planner.Rebuilds()))
	ch <- prometheus.MustNewConstMetric(tcpEdgePortsDesc, prometheus.GaugeValue, float64(d.pub.TCPEdgePortsUnavailable()))
	written, dropped := d.policyLog.Counts()
	ch <- prometheus.MustNewConstMetric(policyLogsDesc, prometheus.CounterValue, float64(written), "written")
	ch <- prometheus.MustNewConstMetric(policyLogsDesc, prometheus.CounterValue, float64(dropped), "dropped")
}
