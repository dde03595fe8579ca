package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The rows of the traffic benchmark beyond the HTTPS edge and the https endpoint: a
// plain http endpoint bind on the public HTTP listener, a TCP edge (requests over kept-alive
// connections, and new connections per second), and an HTTPS edge whose route has three modules
// (ip_restriction admitting the client, request_headers adding one header, compression),
// measured beside the same edge without modules. -extra=false leaves them out.

// Names of the extra paths, as the table shows them, and the hosts they serve.
const (
	pathHTTPEndpoint = "edgeplane http endpoint → agent"
	pathTCPEdge      = "edgeplane TCP edge → agent"
	pathModules      = "edgeplane HTTPS edge + 3 modules → agent"
	httpEndpointHost = "bench-http.edgeplane.app"
	modulesHost      = "modules.example.com"
)

// extraWorld is what setupExtra adds to the edgeplane world: the public HTTP listener and the
// TCP edge's address (on --tcp-listen-host, 127.0.0.1).
type extraWorld struct {
	http, tcp string
}

// setupExtra creates, through the API, a TCP edge on a reserved address and an HTTPS edge on
// modulesHost whose one route has the three modules, both to the tunnel group the HTTPS edge
// uses (the agent's labeled tunnel joins any stream to the upstream, HTTP or raw bytes alike).
func setupExtra(api *apiClient, groupID, httpListen string) (*extraWorld, error) {
	x := &extraWorld{http: httpListen}
	var addr struct{ Addr string }
	if err := api.create("/reserved_addrs", map[string]any{"description": "traffic benchmark"}, &addr); err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(addr.Addr)
	if err != nil {
		return nil, fmt.Errorf("reserved address %q: %w", addr.Addr, err)
	}
	x.tcp = net.JoinHostPort("127.0.0.1", port)
	backend := map[string]any{"backend_id": groupID}
	if err := api.create("/edges/tcp", map[string]any{"hostports": []string{addr.Addr}, "backend": backend}, nil); err != nil {
		return nil, err
	}
	var pol, edge struct{ ID string }
	if err := api.create("/ip_policies", map[string]any{"description": "traffic benchmark"}, &pol); err != nil {
		return nil, err
	}
	if err := api.create("/ip_policy_rules", map[string]any{"ip_policy_id": pol.ID, "cidr": "127.0.0.0/8", "action": "allow"}, nil); err != nil {
		return nil, err
	}
	if err := api.create("/reserved_domains", map[string]any{"domain": modulesHost}, nil); err != nil {
		return nil, err
	}
	if err := api.create("/edges/https", map[string]any{"hostports": []string{modulesHost + ":443"}}, &edge); err != nil {
		return nil, err
	}
	route := map[string]any{"match_type": "path_prefix", "match": "/", "backend": backend,
		"ip_restriction":  map[string]any{"ip_policy_ids": []string{pol.ID}},
		"request_headers": map[string]any{"add": map[string]string{"X-Bench": "modules"}},
		"compression":     map[string]any{"enabled": true}}
	if err := api.create("/edges/https/"+edge.ID+"/routes", route, nil); err != nil {
		return nil, err
	}
	return x, nil
}

// extraPaths are the extra rows' paths. Their requests carry Accept-Encoding: gzip, as
// browsers' do, on the modules path and on the plain HTTPS edge alike (the edge without
// modules ignores it); the upstream's 64-byte answer is below compression's minimum size, so
// the compression module's cost is its negotiation, not a gzip stream.
func (b *trafficRunner) extraPaths(w *edgeplaneWorld, upstream string, tlsTo func(string) *tls.Config) []*trafficPath {
	mw := []*child{w.srv, w.agent}
	return []*trafficPath{
		{name: pathHTTPEndpoint, addr: w.extra.http, host: httpEndpointHost, middle: mw},
		{name: pathTCPEdge, addr: w.extra.tcp, host: upstream, middle: mw},
		{name: pathModules, addr: w.https, host: modulesHost, tls: tlsTo(modulesHost), middle: mw},
	}
}

// withHeader returns r with one more header line.
func withHeader(r *req, line string) *req {
	i := bytes.Index(r.raw, []byte("\r\n"))
	raw := slices.Concat(r.raw[:i+2], []byte(line+"\r\n"), r.raw[i+2:])
	out := *r
	out.raw = raw
	return &out
}

// checkModules asks the modules path for /echo once with net/http's client and checks that the
// modules are applied: the answer (the X-Bench request header the route adds, repeated past
// compression's minimum size) arrives gzip-compressed; ip_restriction admitting 127.0.0.1 is
// shown by the 200.
func checkModules(ctx context.Context, p *trafficPath) error {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, p.addr)
	}, TLSClientConfig: p.tls, DisableCompression: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "GET", "https://"+p.host+"/echo", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body []byte
	if resp.Header.Get("Content-Encoding") == "gzip" {
		if zr, err := gzip.NewReader(resp.Body); err == nil {
			body, _ = io.ReadAll(zr)
		}
	}
	if resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte("modules\n")) {
		return fmt.Errorf("%s: %d %v %.200q: the modules are not applied", p.name, resp.StatusCode, resp.Header, body)
	}
	return nil
}

// connPath is one path of the new-connection rate: each request on a connection of its own.
type connPath struct {
	name   string
	addr   string
	middle []*child
}

// connRound is one measurement of new connections per second.
type connRound struct {
	n, errors int
	firstErr  string
	elapsed   time.Duration
	p50, p99  time.Duration
	cpu       []time.Duration
}

func (r connRound) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// connRequest is the request of each new connection; the server closes after answering.
var connRequest = []byte("GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")

// oneConn dials addr, sends connRequest and reads the answer to its end (the server's close).
func oneConn(addr string, buf []byte) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := conn.Write(connRequest); err != nil {
		return err
	}
	n := 0
	for {
		k, err := conn.Read(buf[n:])
		n += k
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if n == len(buf) {
			return fmt.Errorf("answer longer than %d bytes", len(buf))
		}
	}
	if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) || !bytes.HasSuffix(buf[:n], upstreamBody) {
		return fmt.Errorf("unexpected answer %.200q", buf[:n])
	}
	return nil
}

// measureConns opens connections through p from conc workers, one request each, for a warm-up
// and a measured window.
func measureConns(ctx context.Context, p *connPath, conc int, warmup, window time.Duration) (connRound, error) {
	var out connRound
	measureFrom := time.Now().Add(warmup)
	end := measureFrom.Add(window)
	type result struct {
		lat      []time.Duration
		errors   int
		firstErr string
	}
	results := make([]result, conc)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			r := &results[w]
			buf := make([]byte, 4096)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				err := oneConn(p.addr, buf)
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					r.errors++
					if r.firstErr == "" {
						r.firstErr = err.Error()
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
			}
		})
	}
	out.elapsed, out.cpu, _ = cpuWindow(ctx, p.middle, measureFrom, wg.Wait)
	var all []time.Duration
	for _, r := range results {
		all = append(all, r.lat...)
		out.errors += r.errors
		if out.firstErr == "" {
			out.firstErr = r.firstErr
		}
	}
	out.n = len(all)
	if len(all) > 0 {
		slices.Sort(all)
		out.p50, out.p99 = percentile(all, 0.50), percentile(all, 0.99)
	}
	return out, ctx.Err()
}

// connConc is the concurrency of the new-connection rounds.
const connConc = 16

// measureConnRate measures new connections per second directly to the upstream, through the
// plain one-hop ReverseProxy and through the TCP edge, in rounds rotating through the three.
func (b *trafficRunner) measureConnRate(ctx context.Context, paths []*connPath) error {
	for i := range b.cfg.rounds {
		for k := range paths {
			p := paths[(i+k)%len(paths)]
			r, err := measureConns(ctx, p, connConc, b.cfg.warmup, b.cfg.window)
			if err != nil {
				return err
			}
			b.connRounds[p.name] = append(b.connRounds[p.name], r)
			logf("new conns c=%d round %d  %-34s %8.0f conn/s  p50 %7s  p99 %7s  errors %d %s",
				connConc, i+1, p.name, r.rate(), fmtDur(r.p50), fmtDur(r.p99), r.errors, r.firstErr)
		}
	}
	b.connPaths = paths
	return nil
}

// pairedRatio is the median over the rounds of path's rate divided by ref's in the same round.
func (b *trafficRunner) pairedRatio(path, ref string, conc int) float64 {
	rs, refs := b.rounds[resultKey{path, conc}], b.rounds[resultKey{ref, conc}]
	var v []float64
	for i := range min(len(rs), len(refs)) {
		if refs[i].rps() > 0 {
			v = append(v, rs[i].rps()/refs[i].rps())
		}
	}
	return median(v)
}

// extraReport renders the new-connection table and the modules' cost.
func (b *trafficRunner) extraReport(w io.Writer) {
	if len(b.connPaths) > 0 {
		fmt.Fprintf(w, "## New TCP connections per second (c=%d, one `GET /` with `Connection: close` per connection)\n\n", connConc)
		fmt.Fprintf(w, "Each worker dials, sends one request, reads the answer to the server's close, and dials again. Through\n")
		fmt.Fprintf(w, "the TCP edge each connection is a new tunnel stream to the agent, which dials the upstream anew.\n\n")
		fmt.Fprintf(w, "| path | conn/s | p50 | p99 | CPU/conn | vs direct | vs one-hop HTTP | errors |\n|---|--:|--:|--:|---|--:|--:|--:|\n")
		for _, p := range b.connPaths {
			rs := b.connRounds[p.name]
			var rate, p50, p99, vsDirect, vsProxy []float64
			cpu := make([]time.Duration, len(p.middle))
			n, errs := 0, 0
			for i, r := range rs {
				rate, p50, p99 = append(rate, r.rate()), append(p50, r.p50.Seconds()), append(p99, r.p99.Seconds())
				n, errs = n+r.n, errs+r.errors
				for j, c := range r.cpu {
					cpu[j] += c
				}
				if d := b.connRounds[pathDirect]; i < len(d) && d[i].rate() > 0 {
					vsDirect = append(vsDirect, r.rate()/d[i].rate())
				}
				if d := b.connRounds[pathProxy]; i < len(d) && d[i].rate() > 0 {
					vsProxy = append(vsProxy, r.rate()/d[i].rate())
				}
			}
			cpuText := "—"
			if n > 0 {
				switch len(cpu) {
				case 1:
					cpuText = "proxy " + fmtDur(cpu[0]/time.Duration(n))
				case 2:
					cpuText = fmt.Sprintf("edgeplane %s + agent %s", fmtDur(cpu[0]/time.Duration(n)), fmtDur(cpu[1]/time.Duration(n)))
				}
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.0f%% | %.0f%% | %d |\n", p.name, median(rate), secs(median(p50)),
				secs(median(p99)), cpuText, 100*median(vsDirect), 100*median(vsProxy), errs)
		}
		fmt.Fprintln(w)
	}
}

// extraTargets are the modules' target: the three together cost at most 5% of the rate of the
// same HTTPS edge without them, measured in the same rounds. Together is a bound on each: if
// the three cost at most 5%, so does each.
func (b *trafficRunner) extraTargets() []trafficTarget {
	var out []trafficTarget
	has := false
	for _, p := range b.paths {
		has = has || p.name == pathModules
	}
	if !has {
		return nil
	}
	for _, c := range b.cfg.conc {
		cost, how := 1-b.pairedRatio(pathModules, pathEdge, c), "median of the rotating rounds"
		if pc, text, ok := b.modulesCostText(c); ok {
			cost, how = pc, fmt.Sprintf("%s; the rotating rounds gave %.1f%%", text, 100*(1-b.pairedRatio(pathModules, pathEdge, c)))
		}
		st := b.stats(&trafficPath{name: pathModules, middle: make([]*child, 2)}, c)
		out = append(out, trafficTarget{
			name: fmt.Sprintf("ip_restriction + request_headers + compression together cost ≤ 5%% of the rate (c=%d)", c),
			ref:  pathEdge, met: cost <= 0.05 && st.errors == 0,
			measured: fmt.Sprintf("%.1f%% (modules %.0f req/s; %s)", 100*cost, st.rps, how)})
	}
	return out
}

// jsonBody is a helper for the API calls of the scale benchmark and the extra rows.
func jsonBody(v any) *bytes.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}
