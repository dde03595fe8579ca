package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The traffic inspector's cost. The run's edgeplane records every public request (the
// inspector is on by default, as in a deployment); a second edgeplane, started with
// --inspect-entries 0, records nothing, and its public listeners pay one nil check per request.
// Each has its own agent forwarding to the same upstream and the same HTTPS edge. The two edges
// are measured in back-to-back pairs, as the modules are, and then at the same time (each with
// its own clients): back to back, the two halves of a pair see the machine's other work a few
// seconds apart; at the same time they see the same at every instant, so the ratio of their
// rates is the one measure that other work on a shared machine cannot tilt.

const pathEdgeNoInspector = "edgeplane HTTPS edge → agent, inspector off"

// inspectorOff is the second edgeplane's HTTPS edge.
type inspectorOff struct {
	path *trafficPath
	// cpu is edgeplane's CPU time per request in each pair, off and on, by concurrency: steadier
	// than the rate on a machine other work shares.
	cpu map[int][][2]time.Duration
	// together are the costs of the rounds measuring both at once, and togetherCPU edgeplane's
	// CPU per request of each in them, by concurrency.
	together    map[int][]float64
	togetherCPU map[int][][2]time.Duration
}

// measureInspectorCost starts the second edgeplane and its agent, measures the pairs, and stops
// them.
func (b *trafficRunner) measureInspectorCost(ctx context.Context, upstream string) error {
	var edge *trafficPath
	for _, p := range b.paths {
		if p.name == pathEdge {
			edge = p
		}
	}
	if edge == nil {
		return nil
	}
	logf("starting a second edgeplane (--inspect-entries 0) and its agent")
	w, err := b.startEdgeplaneWorld(ctx, upstream, worldOptions{name: "noinspect-", serveArgs: []string{"--inspect-entries", "0"}})
	if err != nil {
		return err
	}
	defer w.stop()
	off := &trafficPath{name: pathEdgeNoInspector, addr: w.https, host: edgeHost, middle: []*child{w.srv, w.agent}, req: edge.req,
		tls: &tls.Config{RootCAs: w.ca, ServerName: edgeHost, NextProtos: []string{"http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(256)}}
	if err := waitPath(ctx, off); err != nil {
		return err
	}
	o := &inspectorOff{path: off, cpu: map[int][][2]time.Duration{}, together: map[int][]float64{}, togetherCPU: map[int][][2]time.Duration{}}
	b.noInspector = o
	if b.inspectorCost, err = b.measurePairs(ctx, "inspector", off, edge, o.cpu); err != nil {
		return err
	}
	for _, c := range b.cfg.conc {
		for i := range b.cfg.pairs {
			var rOff, rOn round
			var errOff, errOn error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); rOff, errOff = measureRound(ctx, off, c, b.cfg.warmup, b.cfg.window) }()
			go func() { defer wg.Done(); rOn, errOn = measureRound(ctx, edge, c, b.cfg.warmup, b.cfg.window) }()
			wg.Wait()
			for _, e := range []error{errOff, errOn} {
				if e != nil {
					return e
				}
			}
			if rOff.errors+rOn.errors > 0 || rOff.rps() == 0 {
				return fmt.Errorf("inspector together at c=%d: %d and %d errors (%s%s)", c, rOff.errors, rOn.errors, rOff.firstErr, rOn.firstErr)
			}
			cost := 1 - rOn.rps()/rOff.rps()
			o.together[c] = append(o.together[c], cost)
			o.togetherCPU[c] = append(o.togetherCPU[c], [2]time.Duration{cpuPerRequest(rOff), cpuPerRequest(rOn)})
			logf("inspector together c=%-3d round %d  off %8.0f req/s  on %8.0f req/s  cost %5.1f%%", c, i+1, rOff.rps(), rOn.rps(), 100*cost)
		}
	}
	return nil
}

// cpuPerRequest is edgeplane's CPU time (the first process between client and upstream) per
// request of a round.
func cpuPerRequest(r round) time.Duration {
	if len(r.cpu) == 0 || r.n == 0 {
		return 0
	}
	return r.cpu[0] / time.Duration(r.n)
}

// inspectorTargets is the inspector's target: recording costs at most 3% of the request rate
// of the same HTTPS edge recording nothing.
func (b *trafficRunner) inspectorTargets() []trafficTarget {
	if b.noInspector == nil {
		return nil // -inspector=false
	}
	var out []trafficTarget
	for _, c := range b.cfg.conc {
		cost, how, ok := pairsText(b.noInspector.together, c)
		if !ok {
			continue
		}
		pairs, pairsHow, _ := pairsText(b.inspectorCost, c)
		out = append(out, trafficTarget{
			name: fmt.Sprintf("recording every request (the traffic inspector on) costs ≤ 3%% of the rate (c=%d)", c),
			ref:  pathEdgeNoInspector, met: cost <= 0.03,
			measured: fmt.Sprintf("%.1f%% (%s, both at once; %s. Back to back: %.1f%%, %s; %s)",
				100*cost, strings.Replace(how, "back-to-back pairs", "rounds", 1), cpuText(b.noInspector.togetherCPU[c]),
				100*pairs, pairsHow, cpuText(b.noInspector.cpu[c]))})
	}
	return out
}

// cpuText says what recording adds to edgeplane's CPU time per request: the medians of the
// pairs' halves, and the median of the pairs' ratios.
func cpuText(pairs [][2]time.Duration) string {
	var off, on, ratio []float64
	for _, p := range pairs {
		if p[0] > 0 && p[1] > 0 {
			off, on = append(off, float64(p[0])), append(on, float64(p[1]))
			ratio = append(ratio, float64(p[1])/float64(p[0])-1)
		}
	}
	if len(ratio) == 0 {
		return "no CPU figures"
	}
	return fmt.Sprintf("edgeplane's CPU per request %s off, %s on: %+.1f%%", fmtDur(time.Duration(median(off))),
		fmtDur(time.Duration(median(on))), 100*median(ratio))
}
