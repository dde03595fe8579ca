package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// Hosts of the routes scenario: the one-edge account's reserved domain, and the wildcard domain
// under which the large account's edges are e0, e1, … .
const (
	oneEdgeHost = "one.example.net"
	manyDomain  = "many.example.net"
	routePath   = "/r7"
)

// routesResult is what the routes scenario measured.
type routesResult struct {
	edges, routes      int
	seedTook           time.Duration // creating both accounts' objects through the store
	startTook          time.Duration // from starting serve to the large account's route answering
	rss                int64         // edgeplane's RSS once serving
	small, large       *trafficPath
	rounds             map[resultKey][]round
	changeSmall        []time.Duration // PATCH answered → new body served, one-edge account
	changeLarge        []time.Duration // the same, large account
	callSmall          []time.Duration // PATCH sent → new body served
	callLarge          []time.Duration
	quiet, during      []time.Duration // one-edge account's latencies: no changes; during the large account's changes
	quietErr, duringEr int
}

// scaleAccount is one seeded account: its API key, and the http_response backend of the route
// the scenario changes.
type scaleAccount struct {
	token, changeBackend string
}

// storeCreate creates an object through the store as the API's create handler does: the body
// decoded into the collection's create type, validated, then created.
func storeCreate(ctx context.Context, st *store.Store, caller ep.Caller, res *ep.Resource, parent string, body any) (ep.Document, error) {
	c := res.NewCreate()
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%s: %w", res.Kind, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", res.Kind, err)
	}
	doc, err := st.Create(ctx, caller, res, parent, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", res.Kind, err)
	}
	return doc, nil
}

// seedAccount creates an account with an API key, a reserved domain, two http_response
// backends answering upstreamBody (one shared by every route, one for the changed route) and
// edges HTTPS edges of routesPerEdge path_prefix routes /r0, /r1, …; route /r7 of edge target
// uses the second backend. With one edge its host is oneEdgeHost, else e<i>.manyDomain under a
// wildcard reservation. Edges are created by workers goroutines at once, in batches of seedBatch
// with a checkpoint of the WAL between two.
func seedAccount(ctx context.Context, st *store.Store, dsn, name string, edges, routesPerEdge, target, workers int) (scaleAccount, error) {
	var a scaleAccount
	admin, _, err := st.EnsureAccount(ctx, name)
	if err != nil {
		return a, err
	}
	key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		return a, err
	}
	a.token = *key.(*ep.APIKey).Token
	domain := oneEdgeHost
	if edges > 1 {
		domain = "*." + manyDomain
	}
	if _, err := storeCreate(ctx, st, admin, ep.ReservedDomains, "", map[string]any{"domain": domain}); err != nil {
		return a, err
	}
	backend := map[string]any{"status_code": 200, "body": string(upstreamBody), "headers": map[string]string{"Content-Type": "text/plain"}}
	shared, err := storeCreate(ctx, st, admin, ep.HTTPResponseBackends, "", backend)
	if err != nil {
		return a, err
	}
	change, err := storeCreate(ctx, st, admin, ep.HTTPResponseBackends, "", backend)
	if err != nil {
		return a, err
	}
	a.changeBackend = change.Base().ID
	for from := 0; from < edges; from += seedBatch {
		to := min(from+seedBatch, edges)
		if err := seedEdges(ctx, st, admin, from, to, edges, routesPerEdge, target, workers, shared.Base().ID, a.changeBackend); err != nil {
			return a, err
		}
		if edges > 1 {
			if err := truncateWAL(ctx, dsn); err != nil {
				return a, err
			}
			logf("routes: seeded %d edges", to)
		}
	}
	return a, nil
}

// seedBatch is how many edges are seeded between two checkpoints of the WAL.
const seedBatch = 500

// truncateWAL checkpoints the SQLite database's WAL and truncates it, between two batches of
// seeding, when no write is in flight. Under sixteen writers whose reads overlap without a
// pause, the store's own checkpoints never find the moment to start the WAL over, and it grew
// past a gigabyte while each create grew slower.
func truncateWAL(ctx context.Context, dsn string) error {
	db, err := openRaw(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	return err
}

// seedEdges creates edges from to to (exclusive) of an account, workers at a time.
func seedEdges(ctx context.Context, st *store.Store, admin ep.Caller, from, to, edges, routesPerEdge, target, workers int, shared, change string) error {
	var next atomic.Int64
	next.Store(int64(from))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := seedEdge(ctx, st, admin, i, edges, routesPerEdge, target, shared, change); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(to))
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// seedEdge creates edge i of an account and its routes.
func seedEdge(ctx context.Context, st *store.Store, admin ep.Caller, i, edges, routesPerEdge, target int, shared, change string) error {
	host := edgeHostOf(i, edges)
	edge, err := storeCreate(ctx, st, admin, ep.HTTPSEdges, "", map[string]any{"hostports": []string{host + ":443"}})
	if err != nil {
		return err
	}
	for k := range routesPerEdge {
		b := shared
		if i == target && k == 7 {
			b = change
		}
		route := map[string]any{"match_type": "path_prefix", "match": fmt.Sprintf("/r%d", k),
			"backend": map[string]any{"backend_id": b}}
		if _, err := storeCreate(ctx, st, admin, ep.HTTPSEdgeRoutes, edge.Base().ID, route); err != nil {
			return err
		}
	}
	return nil
}

// edgeHostOf is the host of edge i of an account of edges edges.
func edgeHostOf(i, edges int) string {
	if edges == 1 {
		return oneEdgeHost
	}
	return fmt.Sprintf("e%d.%s", i, manyDomain)
}

// runRoutes is the routes scenario; see routesResult.
func (r *scaleRunner) runRoutes(ctx context.Context) (*routesResult, error) {
	res := &routesResult{edges: r.cfg.edges, routes: r.cfg.edges * r.cfg.routesPerEdge, rounds: map[resultKey][]round{}}
	dsn := filepath.Join(r.work, "routes.db")
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	logf("routes: seeding a 1-edge account and a %d-edge account of %d routes each through the store", r.cfg.edges, r.cfg.routesPerEdge)
	t0 := time.Now()
	small, err := seedAccount(ctx, st, dsn, "scale-one-edge", 1, r.cfg.routesPerEdge, 0, 1)
	if err != nil {
		st.Close()
		return nil, err
	}
	target := r.cfg.edges / 2
	large, err := seedAccount(ctx, st, dsn, "scale-many-edges", r.cfg.edges, r.cfg.routesPerEdge, target, 16)
	st.Close()
	if err != nil {
		return nil, err
	}
	res.seedTook = time.Since(t0)
	logf("routes: seeded %d edges and %d routes in %s", r.cfg.edges+1, res.routes+r.cfg.routesPerEdge, res.seedTook.Round(time.Millisecond))

	t0 = time.Now()
	srv, err := r.startServe(ctx, "edgeplane-routes", dsn, false)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	tlsTo := func(host string) *tls.Config {
		return &tls.Config{RootCAs: srv.ca, ServerName: host, NextProtos: []string{"http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	}
	mk := func(name, host string) *trafficPath {
		p := &trafficPath{name: name, addr: srv.https, host: host, tls: tlsTo(host), middle: []*child{srv.child}}
		p.req = request("GET", host, routePath, "", nil)
		return p
	}
	res.small = mk("1-edge account", oneEdgeHost)
	res.large = mk(fmt.Sprintf("%d-edge account (%d routes)", r.cfg.edges, res.routes), edgeHostOf(target, r.cfg.edges))
	for _, p := range []*trafficPath{res.large, res.small} {
		if err := waitBody(ctx, p, string(upstreamBody), 3*time.Minute); err != nil {
			return nil, err
		}
	}
	res.startTook = time.Since(t0)
	res.rss, _ = currentRSS(srv.child)
	r.fetchProfileTo(ctx, "heap", "", "routes-heap.pprof")
	logf("routes: serving after %s, RSS %d MB", res.startTook.Round(time.Millisecond), res.rss>>20)

	for _, c := range r.cfg.conc {
		for i := range r.cfg.rounds {
			paths := []*trafficPath{res.small, res.large}
			for k := range paths {
				p := paths[(i+k)%2]
				rd, err := measureRound(ctx, p, c, r.cfg.warmup, r.cfg.window)
				if err != nil {
					return nil, err
				}
				res.rounds[resultKey{p.name, c}] = append(res.rounds[resultKey{p.name, c}], rd)
				logf("routes: c=%-3d round %d  %-36s %8.0f req/s  p50 %7s  p99 %7s  errors %d %s",
					c, i+1, p.name, rd.rps(), fmtDur(rd.p50), fmtDur(rd.p99), rd.errors, rd.firstErr)
			}
		}
	}

	apiSmall := &apiClient{base: "http://" + srv.addr, token: small.token}
	apiLarge := &apiClient{base: "http://" + srv.addr, token: large.token}
	logf("routes: %d changes in the 1-edge account", r.cfg.changes)
	if res.changeSmall, res.callSmall, err = changes(ctx, apiSmall, small.changeBackend, res.small, r.cfg.changes, "small"); err != nil {
		return nil, err
	}
	// The one-edge account's requests with no changes, then during the large account's changes.
	const otherConc = 4
	stop := make(chan struct{})
	go func() { time.Sleep(5 * time.Second); close(stop) }()
	res.quiet, res.quietErr = loadUntil(ctx, res.small, otherConc, stop)
	logf("routes: %d changes in the %d-edge account, with the 1-edge account's requests (c=%d) beside them", r.cfg.changes, r.cfg.edges, otherConc)
	stop = make(chan struct{})
	type loadOut struct {
		lat  []time.Duration
		errs int
	}
	done := make(chan loadOut)
	go func() {
		l, e := loadUntil(ctx, res.small, otherConc, stop)
		done <- loadOut{l, e}
	}()
	profiled := make(chan struct{})
	go func() {
		r.fetchProfileTo(ctx, "profile", "?seconds=10", "routes-changes-cpu.pprof")
		close(profiled)
	}()
	res.changeLarge, res.callLarge, err = changes(ctx, apiLarge, large.changeBackend, res.large, r.cfg.changes, "large")
	close(stop)
	<-profiled
	o := <-done
	res.during, res.duringEr = o.lat, o.errs
	if err != nil {
		return nil, err
	}
	logf("routes: change reached traffic in p50 %s p99 %s (1 edge: p50 %s p99 %s)", fmtDur(pct(res.changeLarge, 0.5)),
		fmtDur(pct(res.changeLarge, 0.99)), fmtDur(pct(res.changeSmall, 0.5)), fmtDur(pct(res.changeSmall, 0.99)))
	return res, nil
}

// changes PATCHes the http_response backend's body n times, each time polling p right after
// the API call returns until the new body is served; it returns the times from the answer to
// the PATCH, and from sending it, to the first request served the new body.
func changes(ctx context.Context, api *apiClient, backend string, p *trafficPath, n int, tag string) (fromAnswer, fromCall []time.Duration, err error) {
	cl := p.newDoer()
	defer cl.close()
	for i := range n {
		body := fmt.Sprintf("change %d of the %s account\n", i, tag)
		t0 := time.Now()
		if err := api.patch("/backends/http_response/"+backend, map[string]any{"body": body}); err != nil {
			return nil, nil, err
		}
		t1 := time.Now()
		for {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			status, got, err := cl.do(p.req)
			if err == nil && status == 200 && string(got) == body {
				break
			}
			if time.Since(t1) > 30*time.Second {
				return nil, nil, fmt.Errorf("change %d of %s not served within 30 s (last %d %v %.100q)", i, p.name, status, err, got)
			}
			time.Sleep(time.Millisecond)
		}
		t2 := time.Now()
		fromAnswer, fromCall = append(fromAnswer, t2.Sub(t1)), append(fromCall, t2.Sub(t0))
	}
	return fromAnswer, fromCall, nil
}

// loadUntil sends requests through p from conc keep-alive clients until stop is closed, and
// returns every latency and the number of failed requests.
func loadUntil(ctx context.Context, p *trafficPath, conc int, stop <-chan struct{}) ([]time.Duration, int) {
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			cl := p.newDoer()
			defer cl.close()
			var lat []time.Duration
			e := 0
			for ctx.Err() == nil {
				select {
				case <-stop:
					mu.Lock()
					all, errs = append(all, lat...), errs+e
					mu.Unlock()
					return
				default:
				}
				t0 := time.Now()
				status, _, err := cl.do(p.req)
				if err != nil || status != 200 {
					e++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat = append(lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	return all, errs
}

// waitBody waits until a GET through p answers 200 with body.
func waitBody(ctx context.Context, p *trafficPath, body string, limit time.Duration) error {
	var last string
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cl := p.newDoer()
		status, got, err := cl.do(p.req)
		cl.close()
		if err == nil && status == 200 && string(got) == body {
			return nil
		}
		last = fmt.Sprintf("%d %v %.200s", status, err, got)
	}
	return fmt.Errorf("%s does not answer within %s (last: %s)", p.name, limit, last)
}
