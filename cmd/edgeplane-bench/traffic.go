package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The traffic benchmark: `edgeplane-bench traffic`, or `make bench-traffic`. In one
// process tree on this machine it runs a plain net/http upstream, net/http's ReverseProxy in
// front of it (the one-hop reference, on a plain and a TLS listener), and `edgeplane serve` with
// its data plane and an ngrok-go agent forwarding to the same upstream, and measures requests
// through each path, alternating the paths over several rounds. See trafficUsage.
const trafficUsage = `go run ./cmd/edgeplane-bench traffic [-duration 2s] [-rounds 5] [-bulk 1GiB] [-extra=true] [-inspector=true] [-frp bench/frp/bin] [-out bench/traffic.md]`

// Names of the paths, as the table shows them.
const (
	pathDirect    = "direct (client → upstream)"
	pathProxy     = "one-hop ReverseProxy, HTTP"
	pathProxyTLS  = "one-hop ReverseProxy, HTTPS"
	pathEdge      = "edgeplane HTTPS edge → agent"
	pathEndpoint  = "edgeplane https endpoint → agent"
	pprofEnv      = "EDGEPLANE_BENCH_PPROF"
	pprofFileName = "zz_edgeplane_bench_pprof.go"
)

type trafficConfig struct {
	window, warmup time.Duration
	conc           []int
	rounds         int
	bulk           int64
	out            string
	binary         string
	keep           bool
	profile        string
	extra          bool     // the http endpoint, TCP edge and modules rows, and new connections per second
	inspector      bool     // the traffic inspector's cost: the HTTPS edge of an edgeplane recording nothing
	pairs          int      // back-to-back pairs per concurrency of the modules' and the inspector's costs
	frp            string   // directory of frps and frpc (traffic_frp.go)
	frpPairs       int      // paired 256 MiB downloads through the http endpoint and frp
	only           []string // with -paths: the paths measured besides the references
}

// trafficRunner holds one run of the traffic benchmark.
type trafficRunner struct {
	cfg        trafficConfig
	work, self string
	serverEnv  []string
	paths      []*trafficPath
	rounds     map[resultKey][]round
	bulk       []bulkRow
	notes      []string
	pprofAddr  string
	world      *edgeplaneWorld
	connPaths  []*connPath
	connRounds map[string][]connRound
	// modulesCost and inspectorCost are the cost of the three modules and of the traffic
	// inspector in each back-to-back pair, by concurrency (traffic_modules.go,
	// traffic_inspector.go); noInspector is the edgeplane recording nothing.
	modulesCost, inspectorCost map[int][]float64
	noInspector                *inspectorOff
	// frpPairs are the paired 256 MiB downloads, the http endpoint's then frp's; frpSkipped
	// says why frp's rows are missing.
	frpPairs   [][2]transfer
	frpSkipped string
}

type resultKey struct {
	path string
	conc int
}

// bulkRow is one transfer of the bulk table.
type bulkRow struct {
	path, direction string
	t               transfer
}

func trafficBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edgeplane-bench traffic", flag.ContinueOnError)
	var cfg trafficConfig
	fs.DurationVar(&cfg.window, "duration", 2*time.Second, "measured time of each path in each round")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up of each path in each round")
	concs := fs.String("concurrency", "16,64", "comma-separated concurrencies")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds per concurrency, rotating through the paths; the table shows medians")
	bulk := fs.String("bulk", "1GiB", "size of each bulk download and upload (e.g. 256MiB, 1GiB; 0 skips them)")
	fs.StringVar(&cfg.out, "out", "bench/traffic.md", "Markdown file for the results (empty: stdout only)")
	fs.StringVar(&cfg.binary, "edgeplane", "", "edgeplane binary to measure (default: go build ./cmd/edgeplane)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the working directory (database and logs)")
	fs.BoolVar(&cfg.extra, "extra", true, "also measure a plain http endpoint bind, a TCP edge (and new connections per second through it) and an HTTPS edge route with three modules")
	fs.IntVar(&cfg.pairs, "pairs", backToBackPairs, "back-to-back pairs per concurrency measuring the modules' and the inspector's cost (more pairs give a steadier median on a busy machine)")
	fs.BoolVar(&cfg.inspector, "inspector", true, "also measure the traffic inspector's cost: the HTTPS edge of a second edgeplane started with --inspect-entries 0, in back-to-back pairs with the first")
	fs.StringVar(&cfg.frp, "frp", "bench/frp/bin", "directory holding frps and frpc of frp 0.70.1, the open tunnel server measured beside edgeplane's http endpoint (skipped with a note when absent)")
	fs.IntVar(&cfg.frpPairs, "frp-pairs", frpBulkPairs, "back-to-back pairs of 256 MiB downloads through the http endpoint and frp")
	fs.StringVar(&cfg.profile, "profile", "", "after the measurements, write CPU profiles of edgeplane and the agent under load (HTTPS edge, c=64) into this directory")
	only := fs.String("paths", "", "comma-separated words: measure only the paths whose names contain one (the direct path and the one-hop references always run), e.g. \"http endpoint,frp\"")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for w := range strings.SplitSeq(*only, ",") {
		if w = strings.TrimSpace(w); w != "" {
			cfg.only = append(cfg.only, w)
		}
	}
	conc, err := parseConcurrencies(*concs)
	if err != nil {
		return err
	}
	cfg.conc = conc
	size, err := parseSize(*bulk)
	if err != nil {
		return fmt.Errorf("-bulk: %w", err)
	}
	cfg.bulk = size
	if cfg.window <= 0 || cfg.window > time.Minute || cfg.warmup < 0 || cfg.warmup > time.Minute {
		return errors.New("-duration must be in (0, 1m] and -warmup in [0, 1m]")
	}
	if cfg.rounds < 1 || cfg.rounds > 50 {
		return errors.New("-rounds must be from 1 to 50")
	}
	if cfg.pairs < 1 || cfg.pairs > 100 {
		return errors.New("-pairs must be from 1 to 100")
	}
	if cfg.frpPairs < 0 || cfg.frpPairs > 100 {
		return errors.New("-frp-pairs must be from 0 to 100")
	}
	work, cleanup, err := workDir("edgeplane-traffic-", cfg.keep)
	if err != nil {
		return err
	}
	defer cleanup()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b := &trafficRunner{cfg: cfg, work: work, self: self, rounds: map[resultKey][]round{}, connRounds: map[string][]connRound{}}
	if b.cfg.profile != "" {
		if b.pprofAddr, err = freeAddr(); err != nil {
			return err
		}
		b.serverEnv = append(b.serverEnv, pprofEnv+"="+b.pprofAddr)
	}
	if b.cfg.binary == "" {
		if err := b.build(ctx); err != nil {
			return err
		}
	}
	started := time.Now()
	if err := b.run(ctx); err != nil {
		return err
	}
	report := b.report(time.Since(started))
	return publish(report, cfg.out)
}

// build compiles edgeplane. With -profile it adds, through the go command's -overlay (the source
// tree is not touched), a file that serves net/http/pprof's CPU, heap and goroutine profiles on
// $EDGEPLANE_BENCH_PPROF.
func (b *trafficRunner) build(ctx context.Context) error {
	b.cfg.binary = filepath.Join(b.work, "edgeplane")
	args := []string{"build", "-o", b.cfg.binary}
	if b.cfg.profile != "" {
		dir, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", "github.com/edgeplane/edgeplane/cmd/edgeplane").Output()
		if err != nil {
			return fmt.Errorf("find cmd/edgeplane: %w", err)
		}
		src := filepath.Join(b.work, pprofFileName)
		if err := os.WriteFile(src, []byte(pprofOverlaySource), 0o644); err != nil {
			return err
		}
		overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
			filepath.Join(strings.TrimSpace(string(dir)), pprofFileName): src}})
		path := filepath.Join(b.work, "overlay.json")
		if err := os.WriteFile(path, overlay, 0o644); err != nil {
			return err
		}
		args = append(args, "-overlay", path)
	}
	logf("building %s", b.cfg.binary)
	cmd := exec.CommandContext(ctx, "go", append(args, "github.com/edgeplane/edgeplane/cmd/edgeplane")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build edgeplane: %w", err)
	}
	return nil
}

// pprofOverlaySource is the file -profile adds to edgeplane's main package.
const pprofOverlaySource = `package main

import (
	"net/http"
	"net/http/pprof"
	"os"
)

// init serves the CPU, heap and goroutine profiles on $` + pprofEnv + ` (a build of edgeplane-bench traffic
// or scale with -profile only).
func init() {
	if addr := os.Getenv("` + pprofEnv + `"); addr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.Handle("/debug/pprof/heap", pprof.Handler("heap"))
		mux.Handle("/debug/pprof/goroutine", pprof.Handler("goroutine"))
		go func() { _ = http.ListenAndServe(addr, mux) }()
	}
}
`

// run starts every process, measures, and stops them.
func (b *trafficRunner) run(ctx context.Context) error {
	up, err := startChild("upstream", b.self, []string{"traffic-upstream", "--listen", "{addr}"}, nil, filepath.Join(b.work, "upstream.log"))
	if err != nil {
		return err
	}
	defer up.stop()
	certPath, keyPath, proxyCA, err := selfSigned(b.work, proxyHost)
	if err != nil {
		return err
	}
	tlsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	proxy, err := startChild("reverse proxy", b.self, []string{"traffic-proxy", "--listen", "{addr}", "--tls-listen", tlsAddr,
		"--cert", certPath, "--key", keyPath, "--upstream", "http://" + up.addr}, nil, filepath.Join(b.work, "proxy.log"))
	if err != nil {
		return err
	}
	defer proxy.stop()
	logf("starting edgeplane and the agent")
	w, err := b.startEdgeplaneWorld(ctx, "http://"+up.addr, worldOptions{extra: b.cfg.extra})
	if err != nil {
		return err
	}
	defer w.stop()
	b.world = w
	tlsTo := func(pool *x509.CertPool, host string) *tls.Config {
		return &tls.Config{RootCAs: pool, ServerName: host, NextProtos: []string{"http/1.1"},
			ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	}
	b.paths = []*trafficPath{
		{name: pathDirect, addr: up.addr, host: up.addr},
		{name: pathProxy, addr: proxy.addr, host: proxy.addr, middle: []*child{proxy}},
		{name: pathProxyTLS, addr: tlsAddr, host: proxyHost, tls: tlsTo(proxyCA, proxyHost), middle: []*child{proxy}},
		{name: pathEdge, addr: w.https, host: edgeHost, tls: tlsTo(w.ca, edgeHost), middle: []*child{w.srv, w.agent}},
		{name: pathEndpoint, addr: w.https, host: endpointHost, tls: tlsTo(w.ca, endpointHost), middle: []*child{w.srv, w.agent}},
	}
	if w.extra != nil {
		b.paths = append(b.paths, b.extraPaths(w, up.addr, func(host string) *tls.Config { return tlsTo(w.ca, host) })...)
	}
	if w.extra == nil {
		b.frpSkipped = "-extra=false leaves out the http endpoint it is compared with"
	} else {
		fw, err := b.startFrp(ctx, b.cfg.frp, up.addr)
		switch {
		case errors.Is(err, errFrpMissing):
			b.frpSkipped = err.Error()
		case err != nil:
			return fmt.Errorf("frp: %w", err)
		default:
			defer fw.stop()
			b.paths = append(b.paths, &trafficPath{name: pathFrp, addr: fw.vhost, host: frpHost, middle: []*child{fw.frps, fw.frpc}})
		}
	}
	if b.frpSkipped != "" {
		logf("frp skipped: %s", b.frpSkipped)
	}
	b.paths = slices.DeleteFunc(b.paths, func(p *trafficPath) bool {
		if len(b.cfg.only) == 0 || p.name == pathDirect || p.name == pathProxy || p.name == pathProxyTLS {
			return false
		}
		keep := slices.ContainsFunc(b.cfg.only, func(w string) bool { return strings.Contains(p.name, w) })
		if !keep && p.name == pathFrp {
			b.frpSkipped = "-paths leaves it out"
		}
		return !keep
	})
	for _, p := range b.paths {
		p.req = request("GET", p.host, "/", "", nil)
		if w.extra != nil && (p.name == pathEdge || p.name == pathModules) {
			p.req = withHeader(p.req, "Accept-Encoding: gzip")
		}
		if err := waitPath(ctx, p); err != nil {
			return err
		}
		if p.name == pathModules {
			if err := checkModules(ctx, p); err != nil {
				return err
			}
		}
	}
	for _, c := range b.cfg.conc {
		for i := range b.cfg.rounds {
			for k := range b.paths {
				p := b.paths[(i+k)%len(b.paths)] // rotate which goes first, so a drift of the load evens out
				r, err := measureRound(ctx, p, c, b.cfg.warmup, b.cfg.window)
				if err != nil {
					return err
				}
				key := resultKey{p.name, c}
				b.rounds[key] = append(b.rounds[key], r)
				logf("c=%-3d round %d  %-34s %8.0f req/s  p50 %7s  p99 %7s  errors %d %s",
					c, i+1, p.name, r.rps(), fmtDur(r.p50), fmtDur(r.p99), r.errors, r.firstErr)
			}
		}
	}
	if b.cfg.inspector && len(b.cfg.only) == 0 {
		if err := b.measureInspectorCost(ctx, "http://"+up.addr); err != nil {
			return err
		}
	}
	if w.extra != nil && len(b.cfg.only) == 0 { // the modules' cost and new connections: not with -paths
		if err := b.measureModulesCost(ctx); err != nil {
			return err
		}
		err := b.measureConnRate(ctx, []*connPath{{name: pathDirect, addr: up.addr}, {name: pathProxy, addr: proxy.addr, middle: []*child{proxy}},
			{name: pathTCPEdge, addr: w.extra.tcp, middle: []*child{w.srv, w.agent}}})
		if err != nil {
			return err
		}
	}
	if b.cfg.bulk > 0 {
		b.measureBulk(ctx)
	}
	b.frpBulk(ctx)
	if b.cfg.profile != "" {
		if err := b.writeProfiles(ctx); err != nil {
			b.notes = append(b.notes, "profiles not written: "+err.Error())
			logf("profiles: %v", err)
		}
	}
	return ctx.Err()
}

// measureBulk downloads and then uploads cfg.bulk bytes through every path but the plain proxy
// and the extra rows'.
func (b *trafficRunner) measureBulk(ctx context.Context) {
	for _, upload := range []bool{false, true} {
		dir := "download"
		if upload {
			dir = "upload"
		}
		for _, p := range b.paths {
			if p.name == pathProxy || p.name == pathHTTPEndpoint || p.name == pathTCPEdge || p.name == pathModules || p.name == pathFrp || ctx.Err() != nil {
				continue
			}
			var ep *child
			if len(p.middle) == 2 {
				ep = p.middle[0]
			}
			t := bulkTransfer(ctx, p, upload, b.cfg.bulk, ep)
			b.bulk = append(b.bulk, bulkRow{path: p.name, direction: dir, t: t})
			logf("%-8s %-34s %s in %s: %.0f MB/s %v", dir, p.name, fmtSize(b.cfg.bulk), t.elapsed.Round(time.Millisecond), t.mbps(), t.err)
		}
	}
}

// writeProfiles takes CPU profiles of edgeplane and of the agent at once: under load through the
// HTTPS edge at the highest concurrency, and during a bulk download through it.
func (b *trafficRunner) writeProfiles(ctx context.Context) error {
	if err := os.MkdirAll(b.cfg.profile, 0o755); err != nil {
		return err
	}
	var edge *trafficPath
	for _, p := range b.paths {
		if p.name == pathEdge || (edge == nil && len(p.middle) == 2 && p.name != pathFrp) {
			edge = p // the HTTPS edge, or with -paths the first of edgeplane's paths measured
		}
	}
	if edge == nil {
		return errors.New("no path through edgeplane was measured")
	}
	conc := b.cfg.conc[len(b.cfg.conc)-1]
	logf("profiling edgeplane and the agent (%s, c=%d)", edge.name, conc)
	if err := b.profile(ctx, "", 10, func() error {
		_, err := measureRound(ctx, edge, conc, 500*time.Millisecond, 11*time.Second)
		return err
	}); err != nil {
		return err
	}
	note := fmt.Sprintf("CPU profiles of edgeplane and the agent (10 s under requests through %s at c=%d", edge.name, conc)
	if b.cfg.bulk > 0 {
		logf("profiling edgeplane and the agent (bulk download through %s)", edge.name)
		if err := b.profile(ctx, "-bulk", 5, func() error {
			return bulkTransfer(ctx, edge, false, b.cfg.bulk, nil).err
		}); err != nil {
			return err
		}
		note += fmt.Sprintf("; *-bulk.pprof: the first 5 s of a %s download through it", fmtSize(b.cfg.bulk))
	}
	b.notes = append(b.notes, note+") written to "+b.cfg.profile+".")
	return nil
}

// profile fetches seconds of CPU profile from edgeplane and the agent while load runs, into
// edgeplane<suffix>.pprof and agent<suffix>.pprof.
func (b *trafficRunner) profile(ctx context.Context, suffix string, seconds int, load func() error) error {
	targets := map[string]string{"edgeplane" + suffix + ".pprof": b.pprofAddr, "agent" + suffix + ".pprof": b.world.agent.addr}
	errc := make(chan error, len(targets))
	for file, addr := range targets {
		go func() {
			errc <- fetchProfile(ctx, "http://"+addr+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), filepath.Join(b.cfg.profile, file))
		}()
	}
	err := load()
	for range targets {
		if e := <-errc; err == nil {
			err = e
		}
	}
	return err
}

func fetchProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitPath waits until a GET through p answers 200 with the upstream's body.
func waitPath(ctx context.Context, p *trafficPath) error {
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cl := p.newDoer()
		status, body, err := cl.do(p.req)
		cl.close()
		if err == nil && status == 200 && string(body) == string(upstreamBody) {
			return nil
		}
		last = fmt.Sprintf("%d %v %.200s", status, err, body)
	}
	return fmt.Errorf("%s does not reach the upstream within 30 s (last: %s)", p.name, last)
}

// parseSize reads a byte count with an optional KiB, MiB, GiB or bytes suffix (a space before it
// is allowed), so what fmtSize writes reads back.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "bytes": 1} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = strings.TrimSpace(v), m // fmtSize writes "2 GiB", with a space
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (64<<30)/mult {
		return 0, fmt.Errorf("%q is not a size from 0 to 64GiB", s)
	}
	return n * mult, nil
}

// fmtSize renders a byte count in the unit parseSize reads.
func fmtSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
