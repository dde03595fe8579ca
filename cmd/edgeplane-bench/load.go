package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// workload is one kind of request sent over and over.
type workload struct {
	// reqs are prepared requests; each request picks one at random.
	reqs []*req
	// want is the status every response must have.
	want int
	// onBody, when set, sees the body of every response with the wanted status (the crash
	// check collects acknowledged ids with it). It is called concurrently.
	onBody func(body []byte)
}

// sample is what one scenario measured.
type sample struct {
	n, errors int
	firstErr  string
	elapsed   time.Duration
	p50, p99  time.Duration
	cpu       time.Duration // server CPU during the measured window
	peakRSS   int64         // server VmHWM over warm-up and window, bytes
	lat       []time.Duration
}

// add merges another measurement of the same scenario (another round) into s.
func (s *sample) add(o sample) {
	s.n += o.n
	s.errors += o.errors
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
	s.elapsed += o.elapsed
	s.cpu += o.cpu
	s.peakRSS = max(s.peakRSS, o.peakRSS)
	s.lat = append(s.lat, o.lat...)
	slices.Sort(s.lat)
	if len(s.lat) > 0 {
		s.p50, s.p99 = percentile(s.lat, 0.50), percentile(s.lat, 0.99)
	}
}

func (s sample) rps() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.n) / s.elapsed.Seconds()
}

func (s sample) cpuPerReq() time.Duration {
	if s.n == 0 {
		return 0
	}
	return s.cpu / time.Duration(s.n)
}

// loadOpts bound one scenario in time and count.
type loadOpts struct {
	conc           int
	warmup, window time.Duration
	maxRequests    int
	// stopOnError ends a worker at its first failed request (the crash check).
	stopOnError bool
	// netHTTP selects the load generator built on net/http's client.
	netHTTP bool
}

// run drives srv with conc keep-alive connections: a warm-up that is not recorded, then a
// measured window. Every worker stops at the end of the window or after its share of
// maxRequests, whichever comes first.
func run(ctx context.Context, srv *child, wl workload, o loadOpts) (sample, error) {
	var s sample
	if err := srv.resetPeak(); err != nil {
		return s, fmt.Errorf("reset peak RSS: %w", err)
	}
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.window)
	perWorker := max(1, o.maxRequests/o.conc)

	type result struct {
		lat      []time.Duration
		errors   int
		firstErr string
	}
	results := make([]result, o.conc)
	var wg sync.WaitGroup
	var stop atomic.Bool
	for w := range o.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cl doer = newClient(srv.addr)
			if o.netHTTP {
				cl = newNetClient()
			}
			defer cl.close()
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
			r := &results[w]
			r.lat = make([]time.Duration, 0, 1<<14)
			for i := 0; i < perWorker && !stop.Load() && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				req := wl.reqs[rng.IntN(len(wl.reqs))]
				status, body, err := cl.do(req)
				lat := time.Since(t0)
				if err == nil && status != wl.want {
					err = fmt.Errorf("status %d, want %d: %.300s", status, wl.want, body)
				}
				if err != nil {
					if t0.After(measureFrom) || o.stopOnError {
						r.errors++
						if r.firstErr == "" {
							r.firstErr = err.Error()
						}
					}
					if o.stopOnError {
						return
					}
					continue
				}
				if wl.onBody != nil {
					wl.onBody(body)
				}
				if !t0.Before(measureFrom) {
					r.lat = append(r.lat, lat)
				}
			}
		}()
	}
	// Server CPU is read at the start and the end of the measured window.
	var cpu0 time.Duration
	var cpuErr error
	select {
	case <-time.After(time.Until(measureFrom)):
		cpu0, cpuErr = srv.cpu()
	case <-ctx.Done():
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	cpu1, err := srv.cpu()
	if cpuErr == nil {
		cpuErr = err
	}
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	var all []time.Duration
	for _, r := range results {
		all = append(all, r.lat...)
		s.errors += r.errors
		if s.firstErr == "" {
			s.firstErr = r.firstErr
		}
	}
	s.n, s.elapsed = len(all), elapsed
	if cpuErr == nil {
		s.cpu = cpu1 - cpu0
	}
	if len(all) > 0 {
		slices.Sort(all)
		s.p50, s.p99 = percentile(all, 0.50), percentile(all, 0.99)
	}
	s.lat = all
	s.peakRSS, _ = srv.peakRSS()
	return s, nil
}

// percentile of sorted values, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
