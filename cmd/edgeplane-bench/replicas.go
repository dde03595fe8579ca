package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// The replicas benchmark: `edgeplane-bench replicas`. Two replicas of edgeplane on one
// PostgreSQL database, linked (--peer-listen), an ngrok-go agent connected to replica A with an
// https endpoint forwarding to the traffic benchmark's upstream, and the same requests sent to
// replica A (local: the agent's own replica) and to replica B (forwarded: B terminates TLS and
// carries the connection over its link to A, which opens the agent's stream). The paths
// alternate over the rounds; the table shows the forwarded path's rate and p99 against the
// local one's in the same round, the bytes per second of a bulk transfer each way, and the
// memory a forwarded stream costs the two replicas against a local one's.
const replicasUsage = `go run ./cmd/edgeplane-bench replicas [-duration 2s] [-rounds 5] [-bulk 256MiB] [-streams 1000] [-out bench/replicas.md]`

// The targets for replicas: a forwarded request at least 70% of the local rate, its p99 at most
// 1.5 times, a forwarded bulk transfer at least 70% of the local bytes per second.
const (
	replicasRateTarget = 0.70
	replicasP99Target  = 1.5
	replicasBulkTarget = 0.70
)

const (
	pathLocal     = "local (at the agent's replica)"
	pathForwarded = "forwarded (over the link)"
)

// replicasRunner holds one run of the replicas benchmark.
type replicasRunner struct {
	trafficRunner
	streams    int
	bulkRounds int
	postgres   string
	memory     []memoryRow
	bulkCPU    map[bulkKey][]bulkSample
	pprof      map[*child]string // each replica's profile address, with -profile
}

type bulkKey struct{ path, direction string }

// bulkSample is one bulk transfer and the CPU each middle process spent during it.
type bulkSample struct {
	t   transfer
	cpu []time.Duration
}

// cpuOf is the CPU time each process has used so far.
func cpuOf(procs []*child) []time.Duration {
	out := make([]time.Duration, len(procs))
	for i, c := range procs {
		out[i], _ = c.cpu()
	}
	return out
}

// memoryRow is the memory held for n open public connections through one path, each with its
// stream to the agent open (an idle keep-alive connection after one request).
type memoryRow struct {
	path  string
	n     int
	bytes map[string]int64 // heap and stacks in use, grown, by replica
}

func replicasBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edgeplane-bench replicas", flag.ContinueOnError)
	b := &replicasRunner{trafficRunner: trafficRunner{rounds: map[resultKey][]round{}}, bulkCPU: map[bulkKey][]bulkSample{},
		pprof: map[*child]string{}}
	cfg := &b.cfg
	fs.DurationVar(&cfg.window, "duration", 2*time.Second, "measured time of each path in each round")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up of each path in each round")
	concs := fs.String("concurrency", "16,64", "comma-separated concurrencies")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds per concurrency, alternating the two paths; the table shows medians")
	bulk := fs.String("bulk", "256MiB", "size of each bulk download and upload (0 skips them)")
	fs.IntVar(&b.streams, "streams", 1000, "open connections for the memory measure (0 skips it)")
	fs.IntVar(&b.bulkRounds, "bulk-rounds", 3, "bulk transfers each way per path, alternating; the table shows medians")
	fs.StringVar(&cfg.profile, "profile", "", "write CPU profiles of both replicas during a forwarded bulk download and forwarded requests into this directory")
	fs.StringVar(&cfg.out, "out", "bench/replicas.md", "Markdown file for the results (empty: stdout only)")
	fs.StringVar(&cfg.binary, "edgeplane", "", "edgeplane binary to measure (default: go build ./cmd/edgeplane)")
	fs.StringVar(&b.postgres, "postgres", os.Getenv(testdb.PostgresEnv), "PostgreSQL DSN (default $"+testdb.PostgresEnv+"); the replicas share it")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the working directory (logs) and the PostgreSQL schema")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.conc, err = parseConcurrencies(*concs); err != nil {
		return err
	}
	if cfg.bulk, err = parseSize(*bulk); err != nil {
		return fmt.Errorf("-bulk: %w", err)
	}
	switch {
	case b.postgres == "":
		return errors.New("the replicas share a PostgreSQL database: give -postgres or set " + testdb.PostgresEnv)
	case cfg.window <= 0 || cfg.window > time.Minute || cfg.warmup < 0 || cfg.warmup > time.Minute:
		return errors.New("-duration must be in (0, 1m] and -warmup in [0, 1m]")
	case cfg.rounds < 1 || cfg.rounds > 50:
		return errors.New("-rounds must be from 1 to 50")
	case b.streams < 0 || b.streams > 20000:
		return errors.New("-streams must be from 0 to 20000")
	case b.bulkRounds < 1 || b.bulkRounds > 20:
		return errors.New("-bulk-rounds must be from 1 to 20")
	}
	work, cleanup, err := workDir("edgeplane-replicas-", cfg.keep)
	if err != nil {
		return err
	}
	defer cleanup()
	b.work = work
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if cfg.binary == "" {
		if err := b.build(ctx); err != nil {
			return err
		}
	}
	if os.Getenv(store.SecretKeyEnv) == "" {
		os.Setenv(store.SecretKeyEnv, store.NewSecretKey()) // the replicas inherit it
	}
	dsn, drop, err := freshSchema(ctx, b.postgres)
	if err != nil {
		return err
	}
	if cfg.keep {
		defer fmt.Fprintln(os.Stderr, "PostgreSQL database kept:", dsn)
	} else {
		defer drop()
	}
	started := time.Now()
	if err := b.runReplicas(ctx, dsn); err != nil {
		return err
	}
	return publish(b.replicasReport(time.Since(started)), cfg.out)
}

// replica is one running `edgeplane serve` of the benchmark.
type replica struct {
	srv           *child
	agents, https string
}

var replicaLine = regexp.MustCompile(`msg="data plane listening" agents=(\S+) http=\S* https=(\S*)`)

// startReplica runs serve on dsn with a link, its public listeners unlimited per address (the
// load comes from one), and a long keep-alive idle time (the memory measure holds connections
// open).
func (b *replicasRunner) startReplica(name, dsn string) (*replica, error) {
	logPath := filepath.Join(b.work, "edgeplane-"+name+".log")
	var env []string
	pprofAddr := ""
	if b.cfg.profile != "" {
		var err error
		if pprofAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		env = append(env, pprofEnv+"="+pprofAddr)
	}
	srv, err := startChild("replica "+name, b.cfg.binary, []string{"serve", "--listen", "{addr}", "--db", dsn,
		"--agent-listen", "127.0.0.1:0", "--http-listen", "", "--https-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0",
		"--public-max-connections", "0", "--public-max-connections-per-ip", "0", "--public-idle-timeout", "5m"},
		env, logPath)
	if err != nil {
		return nil, err
	}
	b.pprof[srv] = pprofAddr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		log, _ := os.ReadFile(logPath)
		if m := replicaLine.FindSubmatch(log); m != nil {
			return &replica{srv: srv, agents: string(m[1]), https: string(m[2])}, nil
		}
		if time.Now().After(deadline) {
			srv.stop()
			return nil, fmt.Errorf("replica %s printed no data plane line:\n%s", name, tail(logPath, 2000))
		}
	}
}

// runReplicas starts the upstream, the two replicas and the agent, and measures.
func (b *replicasRunner) runReplicas(ctx context.Context, dsn string) error {
	up, err := startChild("upstream", b.self, []string{"traffic-upstream", "--listen", "{addr}"}, nil, filepath.Join(b.work, "upstream.log"))
	if err != nil {
		return err
	}
	defer up.stop()
	logf("starting two replicas on PostgreSQL and the agent")
	a, err := b.startReplica("A", dsn)
	if err != nil {
		return err
	}
	defer a.srv.stop()
	token := ""
	for deadline := time.Now().Add(10 * time.Second); token == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		log, _ := os.ReadFile(a.srv.log)
		token = bootstrapToken(string(log))
	}
	if token == "" {
		return errors.New("replica A printed no API key")
	}
	bb, err := b.startReplica("B", dsn)
	if err != nil {
		return err
	}
	defer bb.srv.stop()
	caPEM, err := exec.CommandContext(ctx, b.cfg.binary, "ca", "--db", dsn).Output()
	if err != nil {
		return fmt.Errorf("edgeplane ca: %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(caPEM) {
		return errors.New("edgeplane ca printed no certificate")
	}
	caPath := filepath.Join(b.work, "edgeplane-ca.pem")
	if err := os.WriteFile(caPath, caPEM, 0o644); err != nil {
		return err
	}
	api := &apiClient{base: "http://" + a.srv.addr, token: token}
	var cred struct{ Token string }
	if err := api.create("/credentials", map[string]any{"acl": []string{}, "description": "replicas benchmark"}, &cred); err != nil {
		return err
	}
	agent, err := startChild("agent", b.self, []string{"traffic-agent", "--listen", "{addr}", "--server", a.agents,
		"--ca", caPath, "--upstream", "http://" + up.addr, "--domain", endpointHost},
		[]string{"EDGEPLANE_BENCH_AUTHTOKEN=" + cred.Token}, filepath.Join(b.work, "agent.log"))
	if err != nil {
		return err
	}
	defer agent.stop()
	tlsTo := func() *tls.Config {
		return &tls.Config{RootCAs: ca, ServerName: endpointHost, NextProtos: []string{"http/1.1"},
			ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	}
	b.paths = []*trafficPath{
		{name: pathLocal, addr: a.https, host: endpointHost, tls: tlsTo(), middle: []*child{a.srv, agent}},
		{name: pathForwarded, addr: bb.https, host: endpointHost, tls: tlsTo(), middle: []*child{bb.srv, a.srv, agent}},
	}
	for _, p := range b.paths {
		p.req = request("GET", p.host, "/", "", nil)
		if err := waitPath(ctx, p); err != nil {
			return err
		}
	}
	for _, c := range b.cfg.conc {
		for i := range b.cfg.rounds {
			for k := range b.paths {
				p := b.paths[(i+k)%len(b.paths)]
				r, err := measureRound(ctx, p, c, b.cfg.warmup, b.cfg.window)
				if err != nil {
					return err
				}
				b.rounds[resultKey{p.name, c}] = append(b.rounds[resultKey{p.name, c}], r)
				logf("c=%-3d round %d  %-32s %8.0f req/s  p50 %7s  p99 %7s  errors %d %s",
					c, i+1, p.name, r.rps(), fmtDur(r.p50), fmtDur(r.p99), r.errors, r.firstErr)
			}
		}
	}
	if b.cfg.bulk > 0 {
		for _, upload := range []bool{false, true} {
			dir := map[bool]string{false: "download", true: "upload"}[upload]
			for i := range b.bulkRounds {
				for k := range b.paths {
					p := b.paths[(i+k)%len(b.paths)]
					cpu0 := cpuOf(p.middle)
					t := bulkTransfer(ctx, p, upload, b.cfg.bulk, p.middle[0])
					cpu := cpuOf(p.middle)
					for j := range cpu {
						cpu[j] -= cpu0[j]
					}
					b.bulkCPU[bulkKey{p.name, dir}] = append(b.bulkCPU[bulkKey{p.name, dir}], bulkSample{t: t, cpu: cpu})
					logf("%-8s %-32s %s in %s: %.0f MB/s, CPU %s %v", dir, p.name, fmtSize(b.cfg.bulk), t.elapsed.Round(time.Millisecond),
						t.mbps(), cpuList(cpu), t.err)
				}
			}
		}
	}
	if b.cfg.profile != "" {
		if err := b.profileForwarded(ctx, a.srv, bb.srv, agent); err != nil {
			b.notes = append(b.notes, "profiles not written: "+err.Error())
		}
	}
	if b.streams > 0 {
		replicas := map[string]*child{"A": a.srv, "B": bb.srv}
		for _, p := range []*trafficPath{b.paths[1], b.paths[0]} {
			row, err := holdStreams(ctx, p, b.streams, replicas)
			if err != nil {
				return err
			}
			b.memory = append(b.memory, row)
			logf("%d open streams %-32s %v", row.n, p.name, row.bytes)
		}
	}
	return ctx.Err()
}

// heapInUse is the Go heap and stacks a replica has in use, from its /metrics.
func heapInUse(c *child) (int64, error) {
	resp, err := http.Get("http://" + c.addr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("%s /metrics: %w", c.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return 0, fmt.Errorf("%s /metrics: %d %v", c.name, resp.StatusCode, err)
	}
	var total int64
	for line := range strings.SplitSeq(string(body), "\n") {
		for _, name := range []string{"go_memstats_heap_inuse_bytes ", "go_memstats_stack_inuse_bytes "} {
			if v, ok := strings.CutPrefix(line, name); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return 0, err
				}
				total += int64(f)
			}
		}
	}
	return total, nil
}

// holdStreams opens n connections through p, each making one request and then staying open
// (its stream to the agent stays open with it), and reports how much the replicas' heap and
// stacks in use grew while they are held; it closes them all before returning.
func holdStreams(ctx context.Context, p *trafficPath, n int, replicas map[string]*child) (memoryRow, error) {
	row := memoryRow{path: p.name, n: n, bytes: map[string]int64{}}
	time.Sleep(2 * time.Second) // the earlier connections' memory back to the heap
	before := map[string]int64{}
	for name, c := range replicas {
		v, err := heapInUse(c)
		if err != nil {
			return row, err
		}
		before[name] = v
	}
	doers := make([]doer, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range doers {
		doers[i] = p.newDoer()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if status, _, err := doers[i].do(p.req); err != nil || status != 200 {
				errs <- fmt.Errorf("%s: connection %d: %d %v", p.name, i, status, err)
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, d := range doers {
			d.close()
		}
	}()
	select {
	case err := <-errs:
		return row, err
	default:
	}
	for name, c := range replicas {
		v, err := heapInUse(c)
		if err != nil {
			return row, err
		}
		row.bytes[name] = v - before[name]
	}
	return row, ctx.Err()
}

// profileForwarded writes CPU profiles of both replicas and the agent: during a forwarded bulk
// download, and during forwarded requests at the highest concurrency.
func (b *replicasRunner) profileForwarded(ctx context.Context, a, bb, agent *child) error {
	if err := os.MkdirAll(b.cfg.profile, 0o755); err != nil {
		return err
	}
	fwd := b.paths[1]
	take := func(suffix string, seconds int, load func()) error {
		targets := map[string]string{"replica-a" + suffix: b.pprof[a], "replica-b" + suffix: b.pprof[bb], "agent" + suffix: agent.addr}
		errc := make(chan error, len(targets))
		for name, addr := range targets {
			go func() {
				errc <- fetchProfile(ctx, "http://"+addr+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), filepath.Join(b.cfg.profile, name+".pprof"))
			}()
		}
		load()
		var err error
		for range targets {
			if e := <-errc; err == nil {
				err = e
			}
		}
		return err
	}
	logf("profiling the replicas during a forwarded bulk download")
	if err := take("-bulk", 5, func() {
		for start := time.Now(); time.Since(start) < 6*time.Second && ctx.Err() == nil; {
			bulkTransfer(ctx, fwd, false, b.cfg.bulk, nil)
		}
	}); err != nil {
		return err
	}
	conc := b.cfg.conc[len(b.cfg.conc)-1]
	logf("profiling the replicas during forwarded requests, c=%d", conc)
	if err := take("-requests", 5, func() { _, _ = measureRound(ctx, fwd, conc, 200*time.Millisecond, 6*time.Second) }); err != nil {
		return err
	}
	b.notes = append(b.notes, "CPU profiles of replica A (the holder), replica B (where requests arrive) and the agent, during a forwarded bulk download (*-bulk.pprof) and forwarded requests (*-requests.pprof), written to "+b.cfg.profile+".")
	return nil
}
