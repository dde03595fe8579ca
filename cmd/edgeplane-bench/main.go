// Command edgeplane-bench is edgeplane's load benchmark. In one run it measures, on this machine
// and with one load generator:
//
//   - a baseline: a bare net/http server that answers GET with a fixed JSON body the size of an
//     edgeplane object and POST by decoding a body the size of edgeplane's create body;
//   - edgeplane on a fresh SQLite database, and on PostgreSQL when EDGEPLANE_TEST_POSTGRES is set
//     (in a fresh schema that is dropped afterwards): authenticated, keep-alive, at several
//     concurrencies: GET by id, create (an IP policy rule), PATCH, and a list page of 100 in an
//     account of 1,000 and of 1,000,000 objects;
//   - on SQLite, creates under --durability full with group commit against the same server
//     committing one fsync'd transaction per create, and a crash check: the server is killed
//     (SIGKILL) while creating, and every create it acknowledged must be in the database.
//
// Every server runs in a process of its own, so its CPU time (from /proc/<pid>/stat) and its
// peak RSS (VmHWM, reset before each scenario) are its own. The table goes to stdout and to a
// Markdown file. Every loop is bounded in time and count; all traffic is to 127.0.0.1.
//
//	go run ./cmd/edgeplane-bench [-duration 3s] [-large 1000000] [-out bench/results.md]
//
// or `make bench`. `edgeplane-bench traffic` is the data-plane benchmark instead (see
// traffic.go), or `make bench-traffic`; `edgeplane-bench replicas` the benchmark of traffic
// forwarded between replicas (replicas.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

type config struct {
	window, warmup time.Duration
	conc           []int
	smallN, largeN int
	maxRequests    int
	out            string
	postgres       string
	binary         string
	keep           bool
	skip           map[string]bool
	only           string
	profile        string
	serverEnv      []string // extra environment of the edgeplane servers (-server-env)
	rounds         int
	netHTTP        bool
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "baseline-server":
			exit(baselineServer(os.Args[2:]))
			return
		case "reference-server":
			exit(referenceServer(os.Args[2:]))
			return
		case "traffic-upstream":
			exit(trafficUpstream(os.Args[2:]))
			return
		case "traffic-proxy":
			exit(trafficProxy(os.Args[2:]))
			return
		case "traffic-agent":
			exit(trafficAgent(os.Args[2:]))
			return
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "traffic" {
		exit(trafficBench(ctx, os.Args[2:]))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "scale" {
		exit(scaleBench(ctx, os.Args[2:]))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "replicas" {
		exit(replicasBench(ctx, os.Args[2:]))
		return
	}
	exit(bench(ctx, os.Args[1:]))
}

func exit(err error) {
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "edgeplane-bench:", err)
		os.Exit(1)
	}
}

func bench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edgeplane-bench", flag.ContinueOnError)
	var cfg config
	fs.DurationVar(&cfg.window, "duration", 3*time.Second, "measured time of each scenario")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each scenario")
	concs := fs.String("concurrency", "1,16,64", "comma-separated concurrencies")
	fs.IntVar(&cfg.smallN, "small", 1000, "objects in the small account")
	fs.IntVar(&cfg.largeN, "large", 1000000, "objects in the large account")
	fs.IntVar(&cfg.maxRequests, "max-requests", 2000000, "most requests of one scenario")
	fs.StringVar(&cfg.out, "out", "bench/results.md", "Markdown file for the results (empty: stdout only)")
	fs.StringVar(&cfg.postgres, "postgres", os.Getenv(testdb.PostgresEnv), "PostgreSQL DSN (default $"+testdb.PostgresEnv+"); empty skips PostgreSQL")
	fs.StringVar(&cfg.binary, "edgeplane", "", "edgeplane binary to measure (default: go build ./cmd/edgeplane)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the working directory (databases and server logs) and the PostgreSQL schema")
	loadClient := fs.String("client", "raw", "load generator: raw (a minimal HTTP/1.1 client) or nethttp (net/http's client, as common Go load tools use)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds per scenario, alternating with the baseline")
	fs.StringVar(&cfg.only, "only", "", "run only the edgeplane scenarios whose name contains this text")
	fs.StringVar(&cfg.profile, "cpuprofile", "", "serve the main edgeplane rows from this program's copy of the server and write its CPU profile to this file (for perf work)")
	serverEnv := fs.String("server-env", "", "comma-separated KEY=VALUE environment of the edgeplane servers only (for perf experiments, e.g. GOGC=400,EDGEPLANE_LOG_LEVEL=warn)")
	skip := fs.String("skip", "", "comma-separated parts to skip: baseline, durability, crash, postgres")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for s := range strings.SplitSeq(*concs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("-concurrency: %q is not a number from 1 to 1024", s)
		}
		cfg.conc = append(cfg.conc, n)
	}
	for kv := range strings.SplitSeq(*serverEnv, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("-server-env: %q is not KEY=VALUE", kv)
		}
		cfg.serverEnv = append(cfg.serverEnv, kv)
	}
	cfg.skip = map[string]bool{}
	for s := range strings.SplitSeq(*skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.skip[s] = true
		}
	}
	if cfg.window <= 0 || cfg.window > 10*time.Minute || cfg.warmup < 0 || cfg.warmup > time.Minute {
		return errors.New("-duration must be in (0, 10m] and -warmup in [0, 1m]")
	}
	switch *loadClient {
	case "raw":
	case "nethttp":
		cfg.netHTTP = true
	default:
		return fmt.Errorf("-client must be raw or nethttp, got %q", *loadClient)
	}
	if cfg.rounds < 1 || cfg.rounds > 20 {
		return errors.New("-rounds must be from 1 to 20")
	}
	if cfg.smallN < 101 || cfg.largeN < 101 {
		return errors.New("-small and -large must be at least 101, so a page of 100 has a next page")
	}

	work, cleanup, err := workDir("edgeplane-bench-", cfg.keep)
	if err != nil {
		return err
	}
	defer cleanup()
	if cfg.binary == "" {
		cfg.binary = filepath.Join(work, "edgeplane")
		logf("building %s", cfg.binary)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", cfg.binary, "github.com/edgeplane/edgeplane/cmd/edgeplane")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build edgeplane: %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	b := &runner{cfg: cfg, work: work, self: self}
	started := time.Now()
	if err := b.engine(ctx, "sqlite", filepath.Join(work, "sqlite.db")); err != nil {
		return err
	}
	if cfg.postgres != "" && !cfg.skip["postgres"] {
		if os.Getenv(store.SecretKeyEnv) == "" {
			// PostgreSQL replicas share their secret key through the environment; the
			// benchmark's servers inherit this one.
			os.Setenv(store.SecretKeyEnv, store.NewSecretKey())
		}
		dsn, drop, err := freshSchema(ctx, cfg.postgres)
		if err != nil {
			return err
		}
		err = b.engine(ctx, "postgres", dsn)
		if cfg.keep {
			fmt.Fprintln(os.Stderr, "PostgreSQL database kept:", dsn)
		} else {
			drop()
		}
		if err != nil {
			return err
		}
	} else {
		b.notes = append(b.notes, "PostgreSQL was not measured: set "+testdb.PostgresEnv+" to a DSN to include it.")
	}
	report := b.report(time.Since(started))
	return publish(report, cfg.out)
}

// parseConcurrencies reads -concurrency: comma-separated numbers from 1 to 256.
func parseConcurrencies(list string) ([]int, error) {
	var out []int
	for s := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 256 {
			return nil, fmt.Errorf("-concurrency: %q is not a number from 1 to 256", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// publish prints a benchmark's report and, when out is set, writes it there too
// (docs/performance.md quotes those files).
func publish(report, out string) error {
	fmt.Print(report)
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return err
	}
	logf("wrote %s", out)
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// row is one line of the results table.
type row struct {
	engine   string // sqlite, postgres
	server   string // what served: baseline, edgeplane, …
	scenario string
	family   string // the baseline row it is compared with: get or post
	conc     int
	s        sample
	base     *sample
}

type runner struct {
	cfg    config
	base   *child
	baseWL map[string]workload
	work   string
	self   string
	rows   []row
	notes  []string
	// crash holds the crash check results, one line each.
	crash []string
	// seedNote records how the large accounts were seeded.
	seedNote []string
}

// The scenarios, by name.
const (
	scGet        = "GET /ip_policy_rules/{id}"
	scCreate     = "POST /ip_policy_rules (create)"
	scPatch      = "PATCH /ip_policy_rules/{id}"
	scListSmall  = "list page of 100, account of %s"
	scListRandom = "list page of 100 at a random cursor, account of %s"
	scBaseGet    = "GET (fixed body)"
	scBasePost   = "POST (decode body, 201)"
)

func (b *runner) engine(ctx context.Context, engine, dsn string) error {
	logf("%s: seeding %d and %d rules", engine, b.cfg.smallN, b.cfg.largeN)
	ds, err := seed(ctx, dsn, b.cfg.smallN, b.cfg.largeN, logf)
	if err != nil {
		return fmt.Errorf("%s: seed: %w", engine, err)
	}
	srv, err := b.startEdgeplane(engine, dsn, "normal")
	if err != nil {
		return err
	}
	defer func() {
		if srv != nil {
			srv.stop()
		}
	}()
	host := srv.addr
	get := func(a account) []*req {
		out := make([]*req, len(a.rules))
		for i, id := range a.rules {
			out[i] = request("GET", host, "/ip_policy_rules/"+id, a.token, nil)
		}
		return out
	}
	const createCIDR, createDesc = "192.0.2.0/24", "created by the benchmark"
	createBody := createBody(ds.writes.policy, createCIDR, "allow", createDesc)
	patchBody := []byte(`{"description":"patched by the benchmark","metadata":"{\"run\":1}"}`)
	var patches []*req
	for _, id := range ds.small.rules {
		patches = append(patches, request("PATCH", host, "/ip_policy_rules/"+id, ds.small.token, patchBody))
	}
	listFirst := func(a account) []*req {
		return []*req{request("GET", host, "/ip_policy_rules?limit=100", a.token, nil)}
	}
	listRandom := func(a account) []*req {
		var out []*req
		for _, id := range a.rules[len(a.rules)/10:] { // cursors with at least a page below them
			out = append(out, request("GET", host, "/ip_policy_rules?limit=100&before_id="+id, a.token, nil))
		}
		return out
	}

	// The baseline answers with the bytes of a real GET response, and runs beside edgeplane for
	// the whole section: every edgeplane scenario is measured in rounds that alternate with the
	// baseline, so both see the same background load of this shared machine.
	cl := newClient(host)
	status, sampleBody, err := cl.do(get(ds.small)[0])
	sampleBody = append([]byte(nil), sampleBody...)
	cl.close()
	if err != nil || status != 200 {
		return fmt.Errorf("%s: sample GET: %d %v %s", engine, status, err, sampleBody)
	}
	if !b.cfg.skip["baseline"] {
		if err := b.startBaseline(sampleBody, createBody); err != nil {
			return err
		}
		defer b.stopBaseline()
	}

	small, large := humanCount(ds.smallN), humanCount(ds.largeN)
	scenarios := []struct {
		name, family string
		wl           workload
		concs        []int
	}{
		{scGet, "get", workload{reqs: get(ds.small), want: 200}, b.cfg.conc},
		{fmt.Sprintf(scListSmall, small), "get", workload{reqs: listFirst(ds.small), want: 200}, b.cfg.conc},
		{fmt.Sprintf(scListSmall, large), "get", workload{reqs: listFirst(ds.large), want: 200}, b.cfg.conc},
		{fmt.Sprintf(scListRandom, small), "get", workload{reqs: listRandom(ds.small), want: 200}, []int{1}},
		{fmt.Sprintf(scListRandom, large), "get", workload{reqs: listRandom(ds.large), want: 200}, []int{1}},
		{scPatch, "post", workload{reqs: patches, want: 200}, b.cfg.conc},
		{scCreate, "post", workload{reqs: ds.createReqs(host, createCIDR, "allow", createDesc), want: 201}, b.cfg.conc},
	}
	for _, sc := range scenarios {
		if b.cfg.only != "" && !strings.Contains(sc.name, b.cfg.only) {
			continue
		}
		for _, c := range sc.concs {
			if err := b.measure(ctx, engine, "edgeplane", sc.name, sc.family, c, srv, sc.wl); err != nil {
				return err
			}
		}
	}

	if !b.cfg.skip["crash"] {
		if err := b.crashCheck(ctx, engine, dsn, ds, srv, "normal"); err != nil {
			return err
		}
		srv = nil // killed by the crash check
	}
	if engine == "sqlite" && !b.cfg.skip["durability"] {
		if srv != nil {
			srv.stop()
			srv = nil
		}
		if err := b.durability(ctx, dsn, ds, createBody); err != nil {
			return err
		}
	}
	return nil
}

func (b *runner) startEdgeplane(engine, dsn, durability string) (*child, error) {
	if b.cfg.profile != "" && durability == "normal" {
		return startChild("reference "+engine, b.self, []string{"reference-server", "--listen", "{addr}", "--db", dsn,
			"--cpuprofile", b.cfg.profile}, b.cfg.serverEnv, filepath.Join(b.work, "reference-"+engine+".log"))
	}
	// The API alone: the data plane (its listeners and routing plan) is measured by its own
	// benchmark, and its fixed default ports would collide between runs.
	args := []string{"serve", "--listen", "{addr}", "--db", dsn, "--agent-listen", ""}
	if durability != "normal" {
		args = append(args, "--durability", durability)
	}
	return startChild("edgeplane "+engine, b.cfg.binary, args, b.cfg.serverEnv, filepath.Join(b.work, "edgeplane-"+engine+".log"))
}

// startBaseline starts the baseline server and prepares its GET and POST workloads.
func (b *runner) startBaseline(body, createBody []byte) error {
	path := filepath.Join(b.work, "baseline-body.json")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return err
	}
	srv, err := startChild("baseline", b.self, []string{"baseline-server", "--listen", "{addr}", "--body", path}, nil,
		filepath.Join(b.work, "baseline.log"))
	if err != nil {
		return err
	}
	b.base = srv
	b.baseWL = map[string]workload{
		"get":  {reqs: []*req{request("GET", srv.addr, "/ip_policy_rules/x", "", nil)}, want: 200},
		"post": {reqs: []*req{request("POST", srv.addr, "/ip_policy_rules", "", createBody)}, want: 201},
	}
	return nil
}

func (b *runner) stopBaseline() {
	if b.base != nil {
		b.base.stop()
		b.base = nil
	}
}

// contender is one server measured in a scenario.
type contender struct {
	server string
	srv    *child
	wl     workload
}

func humanCount(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	}
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d CPUs (%s), %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, runtime.Version())
}

// workDir makes the benchmark's working directory (databases, logs, binaries) and returns the
// function that removes it, or, with keep, prints where it is and leaves it.
func workDir(prefix string, keep bool) (string, func(), error) {
	work, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "working directory:", work)
		return work, func() {}, nil
	}
	return work, func() { os.RemoveAll(work) }, nil
}

// writeNotes renders a report's notes section, if it has notes.
func writeNotes(w io.Writer, notes []string) {
	if len(notes) == 0 {
		return
	}
	fmt.Fprintf(w, "## Notes\n\n")
	for _, n := range notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
}
