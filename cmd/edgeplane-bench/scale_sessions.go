package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.ngrok.com/ngrok"
	ngrokconfig "golang.ngrok.com/ngrok/config"
)

// sessionResult is what the sessions scenario measured.
type sessionResult struct {
	n                  int           // sessions held
	openTook           time.Duration // to open all of them, -open-concurrency at a time
	rssEmpty, rssFull  int64         // edgeplane's RSS before the first session and with all held (after cfg.settle)
	rssEarly           int64         // edgeplane's RSS 15 s after the last session was opened
	cpuEmpty, cpuFull  time.Duration // edgeplane's CPU time over cfg.rest, empty and with all held
	beats, disconnects int64         // heartbeats answered and sessions lost during the rest window
	probeEmpty         []time.Duration
	probeFull          []time.Duration
	selfRSS            int64            // this process's RSS with the sessions held
	gEmpty, gFull      int              // edgeplane's goroutines, empty and with the sessions held (-profile only)
	memEmpty, memFull  map[string]int64 // edgeplane's runtime.MemStats, empty and with the sessions held (-profile only)
	connLimit          uint64
}

// agentDialer connects ngrok-go v1 sessions to one edgeplane with one authtoken, counting the
// heartbeats the server answered and the sessions lost.
type agentDialer struct {
	server, token      string
	ca                 *x509.CertPool
	beats, disconnects atomic.Int64
}

// open connects one session, authenticates, and binds one labeled tunnel scale=label; both
// return only once edgeplane has answered.
func (d *agentDialer) open(ctx context.Context, label string) (ngrok.Session, error) {
	sess, err := ngrok.Connect(ctx, ngrok.WithServer(d.server), ngrok.WithCA(d.ca), ngrok.WithAuthtoken(d.token),
		ngrok.WithHeartbeatHandler(func(context.Context, ngrok.Session, time.Duration) { d.beats.Add(1) }),
		ngrok.WithDisconnectHandler(func(context.Context, ngrok.Session, error) { d.disconnects.Add(1) }))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := sess.Listen(ctx, ngrokconfig.LabeledTunnel(ngrokconfig.WithLabel("scale", label))); err != nil {
		sess.Close()
		return nil, fmt.Errorf("bind: %w", err)
	}
	return sess, nil
}

// probe opens cfg.probes sessions one at a time, each closed before the next, and returns the
// time each took to authenticate and bind.
func (r *scaleRunner) probe(ctx context.Context, d *agentDialer, prefix string) ([]time.Duration, error) {
	var out []time.Duration
	for i := range r.cfg.probes {
		t0 := time.Now()
		sess, err := d.open(ctx, prefix+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
		sess.Close()
		time.Sleep(20 * time.Millisecond) // let the server finish with the closed one
	}
	return out, nil
}

// runSessions is the sessions scenario; see sessionResult.
func (r *scaleRunner) runSessions(ctx context.Context) (*sessionResult, error) {
	res := &sessionResult{n: r.cfg.sessions, connLimit: fileLimit()}
	logf("sessions: starting edgeplane (agent connection limits off)")
	srv, err := r.startServe(ctx, "edgeplane-sessions", filepath.Join(r.work, "sessions.db"), true,
		"--agent-max-connections", "0", "--agent-max-connections-per-ip", "0", "--agent-max-unauthenticated-per-ip", "0")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	api := &apiClient{base: "http://" + srv.addr, token: srv.token}
	var cred struct{ Token string }
	if err := api.create("/credentials", map[string]any{"acl": []string{}, "description": "scale benchmark"}, &cred); err != nil {
		return nil, err
	}
	d := &agentDialer{server: srv.agent, token: cred.Token, ca: srv.ca}

	// The empty server: one probe round first, so that what every session uses once (the
	// credential's lookup, the TLS session machinery) is counted in the empty server.
	if res.probeEmpty, err = r.probe(ctx, d, "empty-"); err != nil {
		return nil, fmt.Errorf("probe the empty server: %w", err)
	}
	time.Sleep(3 * time.Second)
	res.rssEmpty, _ = currentRSS(srv.child)
	res.gEmpty, res.memEmpty = r.goroutines(ctx), r.memStats(ctx)
	c0, _ := srv.cpu()
	time.Sleep(r.cfg.rest)
	c1, _ := srv.cpu()
	res.cpuEmpty = c1 - c0
	logf("sessions: empty server RSS %d MB, CPU %s over %s; bind p50 %s", res.rssEmpty>>20, res.cpuEmpty, r.cfg.rest,
		fmtDur(pct(res.probeEmpty, 0.5)))

	logf("sessions: opening %d sessions, %d at a time", r.cfg.sessions, r.cfg.openConc)
	sessions := make([]ngrok.Session, r.cfg.sessions)
	defer func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 256)
		for _, s := range sessions {
			if s != nil {
				sem <- struct{}{}
				wg.Go(func() { s.Close(); <-sem })
			}
		}
		wg.Wait()
	}()
	t0 := time.Now()
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range r.cfg.openConc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(sessions) {
					return
				}
				s, err := d.open(ctx, strconv.Itoa(i))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("session %d: %w", i, err)
					}
					mu.Unlock()
					next.Store(int64(len(sessions)))
					return
				}
				sessions[i] = s
				if (i+1)%1000 == 0 {
					logf("sessions: %d open (%s)", i+1, time.Since(t0).Round(time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.openTook = time.Since(t0)
	logf("sessions: %d open in %s; settling %s", r.cfg.sessions, res.openTook.Round(time.Millisecond), r.cfg.settle)
	time.Sleep(15 * time.Second)
	res.rssEarly, _ = currentRSS(srv.child)
	time.Sleep(r.cfg.settle - 15*time.Second)
	res.rssFull, _ = currentRSS(srv.child)
	res.gFull, res.memFull = r.goroutines(ctx), r.memStats(ctx)
	b0, dc0 := d.beats.Load(), d.disconnects.Load()
	profiled := make(chan struct{})
	go func() {
		r.fetchProfileTo(ctx, "profile", fmt.Sprintf("?seconds=%d", int(r.cfg.rest.Seconds())), "sessions-rest-cpu.pprof")
		close(profiled)
	}()
	c0, _ = srv.cpu()
	time.Sleep(r.cfg.rest)
	c1, _ = srv.cpu()
	<-profiled
	r.fetchProfileTo(ctx, "heap", "", "sessions-heap.pprof")
	r.fetchProfileTo(ctx, "goroutine", "", "sessions-goroutine.pprof")
	res.cpuFull = c1 - c0
	res.beats, res.disconnects = d.beats.Load()-b0, d.disconnects.Load()-dc0
	res.selfRSS = selfRSS()
	logf("sessions: RSS %d MB, CPU %s over %s, %d heartbeats answered, %d sessions lost", res.rssFull>>20, res.cpuFull,
		r.cfg.rest, res.beats, res.disconnects)
	if res.probeFull, err = r.probe(ctx, d, "next-"); err != nil {
		return nil, fmt.Errorf("probe with %d sessions: %w", r.cfg.sessions, err)
	}
	logf("sessions: the next session bound in p50 %s p99 %s", fmtDur(pct(res.probeFull, 0.5)), fmtDur(pct(res.probeFull, 0.99)))
	return res, nil
}

// pct is the q-quantile of durations (any order).
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return percentile(s, q)
}
