package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The scale benchmark: `edgeplane-bench scale`, or `make bench-scale`. Two scenarios,
// each against an `edgeplane serve` of its own on a new SQLite database:
//
//   - sessions: N ngrok-go v1 agent sessions, held open in this process with one labeled tunnel
//     each (their heartbeats answered), and edgeplane's RSS above the empty server, its CPU at
//     rest, and the time for one more session to authenticate and bind (scale_sessions.go);
//   - routes: an account with E HTTPS edges of R routes each beside an account with one edge,
//     the request rate and p99 to one route of each, and the time from an API change to its
//     effect on traffic (scale_routes.go).
//
// It is separate from `traffic` because it takes longer and holds tens of thousands of sockets.
// restWindow is the default window over which CPU at rest is read: the Go runtime forces a
// garbage collection every 2 minutes, and with 10,000 sessions one collection (marking 40,000
// goroutine stacks) is a few hundred milliseconds of CPU, so a 10 s window read 3% more or less
// depending on whether it held one. Two minutes hold exactly one: the average at rest.
const restWindow = 2 * time.Minute

const scaleUsage = `go run ./cmd/edgeplane-bench scale [-sessions 10000] [-settle 150s] [-rest 2m] [-edges 10000] [-routes-per-edge 10] [-changes 100] [-only sessions|routes] [-out bench/scale.md]`

type scaleConfig struct {
	sessions, probes, openConc    int
	edges, routesPerEdge, changes int
	rest, settle                  time.Duration
	window, warmup                time.Duration
	rounds                        int
	conc                          []int
	out, binary, only, profile    string
	keep                          bool
}

// scaleRunner holds one run of the scale benchmark.
type scaleRunner struct {
	cfg       scaleConfig
	work      string
	pprofAddr string // with -profile: where edgeplane serves its profiles
	sess      *sessionResult
	routes    *routesResult
	notes     []string
}

func scaleBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edgeplane-bench scale", flag.ContinueOnError)
	var cfg scaleConfig
	fs.IntVar(&cfg.sessions, "sessions", 10000, "agent sessions held open, one labeled tunnel each (0 skips the scenario)")
	fs.IntVar(&cfg.probes, "probes", 50, "sessions opened one at a time, each closed before the next, on the empty server and with -sessions held")
	fs.IntVar(&cfg.openConc, "open-concurrency", 64, "sessions being opened at once while the -sessions are opened")
	fs.DurationVar(&cfg.rest, "rest", restWindow, "window over which CPU at rest is read")
	fs.DurationVar(&cfg.settle, "settle", 150*time.Second, "wait after the sessions are open before RSS and CPU at rest are read (at least 15s; the Go runtime forces a GC every 2 minutes)")
	fs.IntVar(&cfg.edges, "edges", 10000, "HTTPS edges of the large account (0 skips the scenario)")
	fs.IntVar(&cfg.routesPerEdge, "routes-per-edge", 10, "routes of each edge (at most 64)")
	fs.IntVar(&cfg.changes, "changes", 100, "API changes timed to their effect on traffic, in each account")
	fs.DurationVar(&cfg.window, "duration", 2*time.Second, "measured time of each rate round")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up of each rate round")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rate rounds per concurrency, alternating the two accounts")
	concs := fs.String("concurrency", "16,64", "comma-separated concurrencies of the rate rounds")
	fs.StringVar(&cfg.only, "only", "", `"sessions" or "routes": run one scenario`)
	fs.StringVar(&cfg.out, "out", "bench/scale.md", "Markdown file for the results (empty: stdout only)")
	fs.StringVar(&cfg.binary, "edgeplane", "", "edgeplane binary to measure (default: go build ./cmd/edgeplane)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the working directory (databases and logs)")
	fs.StringVar(&cfg.profile, "profile", "", "write edgeplane's profiles into this directory: CPU at rest and heap with the sessions held, CPU during the large account's changes and heap with its routes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conc, err := parseConcurrencies(*concs)
	if err != nil {
		return err
	}
	cfg.conc = conc
	switch {
	case cfg.only != "" && cfg.only != "sessions" && cfg.only != "routes":
		return errors.New(`-only must be "sessions" or "routes"`)
	case cfg.sessions < 0 || cfg.probes < 1 || cfg.openConc < 1 || cfg.edges < 0 || cfg.changes < 1 || cfg.rounds < 1:
		return errors.New("-sessions and -edges must be ≥ 0, -probes, -open-concurrency, -changes and -rounds ≥ 1")
	case cfg.settle < 15*time.Second:
		return errors.New("-settle must be at least 15s")
	case cfg.routesPerEdge < 8 || cfg.routesPerEdge > 64:
		return errors.New("-routes-per-edge must be from 8 to 64 (the measured route is /r7)")
	}
	work, cleanup, err := workDir("edgeplane-scale-", cfg.keep)
	if err != nil {
		return err
	}
	defer cleanup()
	r := &scaleRunner{cfg: cfg, work: work}
	if cfg.profile != "" {
		if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
			return err
		}
		if r.pprofAddr, err = freeAddr(); err != nil {
			return err
		}
	}
	if cfg.binary == "" {
		tb := &trafficRunner{work: work, cfg: trafficConfig{profile: cfg.profile}}
		if err := tb.build(ctx); err != nil {
			return err
		}
		r.cfg.binary = tb.cfg.binary
	}
	if err := raiseFileLimit(); err != nil {
		return err
	}
	started := time.Now()
	if cfg.sessions > 0 && cfg.only != "routes" {
		load := loadAverage()
		if r.sess, err = r.runSessions(ctx); err != nil {
			return fmt.Errorf("sessions: %w", err)
		}
		r.notes = append(r.notes, fmt.Sprintf("Load average (1, 5, 15 min; /proc/loadavg) on this 2-core machine: %s at the start of the sessions scenario, %s at its end.", load, loadAverage()))
	}
	if cfg.edges > 0 && cfg.only != "sessions" {
		load := loadAverage()
		if r.routes, err = r.runRoutes(ctx); err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		r.notes = append(r.notes, fmt.Sprintf("Load average (1, 5, 15 min; /proc/loadavg) on this 2-core machine: %s at the start of the routes scenario, %s at its end.", load, loadAverage()))
	}
	report := r.report(time.Since(started))
	return publish(report, cfg.out)
}

// raiseFileLimit sets this process's soft limit of open files to its hard limit; the edgeplane
// it starts inherits it. Ten thousand sessions are ten thousand sockets on each side.
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise the open file limit: %w", err)
		}
	}
	logf("open file limit: %d", lim.Cur)
	return nil
}

// fileLimit is the soft limit of open files of this process.
func fileLimit() uint64 {
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

// serveProc is an `edgeplane serve` of the scale benchmark with its data plane.
type serveProc struct {
	*child
	dsn                string
	agent, http, https string
	token              string // the bootstrap API key (empty database only)
	ca                 *x509.CertPool
	caPath             string
}

// startServe starts serve on dsn with its data plane on ephemeral ports and the extra flags,
// waits for its data plane line (and, when wantToken, the bootstrap API key), and reads its CA.
func (r *scaleRunner) startServe(ctx context.Context, name, dsn string, wantToken bool, extra ...string) (*serveProc, error) {
	logPath := filepath.Join(r.work, name+".log")
	args := append([]string{"serve", "--listen", "{addr}", "--db", dsn,
		"--agent-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0"}, extra...)
	var env []string
	if r.pprofAddr != "" {
		env = append(env, pprofEnv+"="+r.pprofAddr)
	}
	c, err := startChild(name, r.cfg.binary, args, env, logPath)
	if err != nil {
		return nil, err
	}
	s := &serveProc{child: c, dsn: dsn}
	for deadline := time.Now().Add(60 * time.Second); s.agent == "" || (wantToken && s.token == ""); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("serve printed no data plane line or API key:\n%s", tail(logPath, 2000))
		}
		log, _ := os.ReadFile(logPath)
		if m := dataPlaneLine.FindSubmatch(log); m != nil {
			s.agent, s.http, s.https = string(m[1]), string(m[2]), string(m[3])
		}
		s.token = bootstrapToken(string(log))
	}
	out, err := exec.CommandContext(ctx, r.cfg.binary, "ca", "--db", dsn).Output()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("edgeplane ca: %w", err)
	}
	s.ca = x509.NewCertPool()
	if !s.ca.AppendCertsFromPEM(out) {
		c.stop()
		return nil, errors.New("edgeplane ca printed no certificate")
	}
	s.caPath = filepath.Join(r.work, name+"-ca.pem")
	return s, os.WriteFile(s.caPath, out, 0o644)
}

// selfRSS is this process's VmRSS in bytes.
func selfRSS() int64 {
	self, _ := os.FindProcess(os.Getpid())
	n, _ := currentRSS(&child{cmd: &exec.Cmd{Process: self}})
	return n
}

// fetchProfileTo writes edgeplane's profile kind (with query) into the -profile directory; without
// -profile it does nothing.
func (r *scaleRunner) fetchProfileTo(ctx context.Context, kind, query, file string) {
	if r.pprofAddr == "" {
		return
	}
	err := fetchProfile(ctx, "http://"+r.pprofAddr+"/debug/pprof/"+kind+query, filepath.Join(r.cfg.profile, file))
	if err != nil {
		r.notes = append(r.notes, "profile "+file+" not written: "+err.Error())
		return
	}
	logf("wrote %s", filepath.Join(r.cfg.profile, file))
}

// goroutines is edgeplane's number of goroutines, from its goroutine profile (-profile only;
// -1 without it or on an error).
func (r *scaleRunner) goroutines(ctx context.Context) int {
	if r.pprofAddr == "" {
		return -1
	}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+r.pprofAddr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var n int
	if _, err := fmt.Fscanf(resp.Body, "goroutine profile: total %d", &n); err != nil {
		return -1
	}
	return n
}

// memStats reads fields of edgeplane's runtime.MemStats from its heap profile in text form
// (-profile only; nil without it or on an error): where its RSS goes.
func (r *scaleRunner) memStats(ctx context.Context) map[string]int64 {
	if r.pprofAddr == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+r.pprofAddr+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "# "), " = ")
		if !ok {
			continue
		}
		value, _, _ = strings.Cut(value, " / ") // "Stack = StackInuse / StackSys"
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			out[name] = n
		}
	}
	return out
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, as /proc/loadavg has them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
