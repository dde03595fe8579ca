package server

import (
	"database/sql"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeplane/edgeplane/store"
)

// Metrics are the Prometheus collectors of a server, in a registry of their own (so tests can run
// many servers in one process). Every label value comes from a closed set: route is the pattern
// that matched ("unmatched" when none did), never the raw path; method is one of the standard
// methods or "other"; status is a code the server itself wrote.
type Metrics struct {
	registry    *prometheus.Registry
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	rateLimited prometheus.Counter
	// series maps a seriesKey to its collectors. It is replaced, never changed, under seriesMu
	// when a new key comes (bounded by the routes), so a request reads it with one atomic load
	// and a map lookup of a typed key, where a sync.Map hashed the key through its type at every
	// request.
	series   atomic.Pointer[map[seriesKey]series]
	seriesMu sync.Mutex
}

// PoolStatser is what the metrics need of the store: the statistics of its connection pools.
type PoolStatser interface {
	PoolStats() map[string]sql.DBStats
}

// NewMetrics creates the collectors, with the Go runtime, process and database pool statistics.
func NewMetrics(pools PoolStatser) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgeplane_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edgeplane_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgeplane_http_requests_in_flight",
			Help: "HTTP requests being answered now.",
		}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgeplane_rate_limited_total",
			Help: "API requests refused with 429 by the per-key rate limit.",
		}),
	}
	m.registry.MustRegister(m.requests, m.duration, m.inFlight, m.rateLimited,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&poolCollector{pools: pools})
	return m
}

// Register adds collectors to the server's registry, so that /metrics reports them beside the
// API's own: the data plane's, which cmd registers when the data plane is on. It fails, adding
// none of the collectors that follow, when one is invalid or its metrics clash with registered
// ones (the same name with other labels or help, or a collector registered twice).
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

func (m *Metrics) observe(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" || route == "/" {
		route = "unmatched"
	}
	method = methodLabel(method)
	key := seriesKey{route, method, status}
	var s series
	ok := false
	if p := m.series.Load(); p != nil {
		s, ok = (*p)[key]
	}
	if !ok {
		s = m.addSeries(key)
	}
	s.requests.Inc()
	s.duration.Observe(d.Seconds())
}

// addSeries resolves the collectors of key, once per route, method and status (bounded by the
// routes), not per request, and returns them.
func (m *Metrics) addSeries(key seriesKey) series {
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	old := map[seriesKey]series{}
	if p := m.series.Load(); p != nil {
		old = *p
	}
	if s, ok := old[key]; ok {
		return s
	}
	next := make(map[seriesKey]series, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	s := series{
		requests: m.requests.WithLabelValues(key.route, key.method, strconv.Itoa(key.status)),
		duration: m.duration.WithLabelValues(key.route, key.method),
	}
	next[key] = s
	m.series.Store(&next)
	return s
}

// methodLabel is the method's label value, from a closed set: the methods of RFC 9110 and PATCH
// as they are, every other method "other". A client chooses the method, and net/http accepts any
// token as one, so a raw method label would let anyone add series without limit.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// seriesKey and series are the label values of a request and the collectors they select.
type seriesKey struct {
	route, method string
	status        int
}

type series struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// poolCollector reports database/sql pool statistics of every pool of the store.
type poolCollector struct{ pools PoolStatser }

var (
	poolOpen     = prometheus.NewDesc("edgeplane_db_connections_open", "Open database connections.", []string{"pool"}, nil)
	poolInUse    = prometheus.NewDesc("edgeplane_db_connections_in_use", "Database connections in use.", []string{"pool"}, nil)
	poolIdle     = prometheus.NewDesc("edgeplane_db_connections_idle", "Idle database connections.", []string{"pool"}, nil)
	poolMax      = prometheus.NewDesc("edgeplane_db_connections_max", "Most connections the pool may open.", []string{"pool"}, nil)
	poolWaits    = prometheus.NewDesc("edgeplane_db_wait_total", "Times a request waited for a database connection.", []string{"pool"}, nil)
	poolWaitTime = prometheus.NewDesc("edgeplane_db_wait_seconds_total", "Time spent waiting for database connections.", []string{"pool"}, nil)
	cacheReads   = prometheus.NewDesc("edgeplane_read_cache_total",
		"Authentications and reads by id the SQLite read cache answered (result=hit) or sent to the database (result=miss).", []string{"result"}, nil)
	writeBatches = prometheus.NewDesc("edgeplane_write_batches_total",
		"SQLite: transactions the group committer ran; each commits the writes of the requests that were waiting together.", nil, nil)
	writeTxs = prometheus.NewDesc("edgeplane_write_transactions_total",
		"SQLite: write transactions of requests the group committer ran; divided by edgeplane_write_batches_total, the average batch.", nil, nil)
	lookupQueries = prometheus.NewDesc("edgeplane_key_lookup_queries_total",
		"PostgreSQL: queries that authenticated the keys (and read the objects of GETs by id) of requests waiting together.", nil, nil)
	lookups = prometheus.NewDesc("edgeplane_key_lookups_total",
		"PostgreSQL: key lookups of requests answered by those queries; divided by edgeplane_key_lookup_queries_total, the average number combined.", nil, nil)
	lookupsAlone = prometheus.NewDesc("edgeplane_key_lookups_alone_total",
		"PostgreSQL: key lookups requests ran on queries of their own because their query failed or the combining goroutines were stuck; growth means failing or stalling database connections.", nil, nil)
)

// readCacheStatser and commitStatser are what the metrics need of a SQLite store.
type readCacheStatser interface {
	ReadCacheStats() store.ReadCacheStats
}

type commitStatser interface {
	CommitStats() store.CommitStats
}

type lookupStatser interface {
	LookupStats() store.LookupStats
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolOpen, poolInUse, poolIdle, poolMax, poolWaits, poolWaitTime, cacheReads, writeBatches, writeTxs, lookupQueries, lookups, lookupsAlone} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for name, st := range c.pools.PoolStats() {
		ch <- prometheus.MustNewConstMetric(poolOpen, prometheus.GaugeValue, float64(st.OpenConnections), name)
		ch <- prometheus.MustNewConstMetric(poolInUse, prometheus.GaugeValue, float64(st.InUse), name)
		ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(st.Idle), name)
		ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(st.MaxOpenConnections), name)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(st.WaitCount), name)
		ch <- prometheus.MustNewConstMetric(poolWaitTime, prometheus.CounterValue, st.WaitDuration.Seconds(), name)
	}
	if rc, ok := c.pools.(readCacheStatser); ok {
		st := rc.ReadCacheStats()
		ch <- prometheus.MustNewConstMetric(cacheReads, prometheus.CounterValue, float64(st.Hits), "hit")
		ch <- prometheus.MustNewConstMetric(cacheReads, prometheus.CounterValue, float64(st.Misses), "miss")
	}
	if cs, ok := c.pools.(commitStatser); ok {
		st := cs.CommitStats()
		ch <- prometheus.MustNewConstMetric(writeBatches, prometheus.CounterValue, float64(st.Batches))
		ch <- prometheus.MustNewConstMetric(writeTxs, prometheus.CounterValue, float64(st.Requests))
	}
	if ls, ok := c.pools.(lookupStatser); ok {
		st := ls.LookupStats()
		ch <- prometheus.MustNewConstMetric(lookupQueries, prometheus.CounterValue, float64(st.Queries))
		ch <- prometheus.MustNewConstMetric(lookups, prometheus.CounterValue, float64(st.Lookups))
		ch <- prometheus.MustNewConstMetric(lookupsAlone, prometheus.CounterValue, float64(st.Alone))
	}
}
