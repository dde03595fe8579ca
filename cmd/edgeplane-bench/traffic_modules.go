package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// backToBackPairs is how many back-to-back pairs of rounds measure a feature's cost at each
// concurrency (the three modules, the traffic inspector) by default (-pairs): one path without
// the feature and one with it. The main rounds rotate through every path, so they measure the two some ten seconds
// apart, and on a machine shared with other work the load drifts by more than the cost in that
// time: their paired ratio swung by ±10–20% between runs. Back to back, alternating which goes
// first, the drift between the two halves of a pair is a few seconds' at most and evens out over
// the pairs.
const backToBackPairs = 10

// measurePairs runs the back-to-back pairs of base (without the feature) and with (with it) and
// returns, per concurrency, the cost of each pair: one less with's rate over base's. cpu, when
// not nil, receives per concurrency each pair's CPU time per request of edgeplane (the first
// process between client and upstream), without and with the feature.
func (b *trafficRunner) measurePairs(ctx context.Context, what string, base, with *trafficPath, cpu map[int][][2]time.Duration) (map[int][]float64, error) {
	costs := map[int][]float64{}
	for _, c := range b.cfg.conc {
		for i := range b.cfg.pairs {
			pair := [2]*trafficPath{base, with}
			if i%2 == 1 {
				pair = [2]*trafficPath{with, base}
			}
			rates := map[*trafficPath]float64{}
			perReq := map[*trafficPath]time.Duration{}
			for _, p := range pair {
				r, err := measureRound(ctx, p, c, b.cfg.warmup, b.cfg.window)
				if err != nil {
					return nil, err
				}
				if r.errors > 0 {
					return nil, fmt.Errorf("%s at c=%d: %d errors (%s)", p.name, c, r.errors, r.firstErr)
				}
				rates[p] = r.rps()
				if len(r.cpu) > 0 && r.n > 0 {
					perReq[p] = r.cpu[0] / time.Duration(r.n)
				}
			}
			if cpu != nil {
				cpu[c] = append(cpu[c], [2]time.Duration{perReq[base], perReq[with]})
			}
			if rates[base] > 0 {
				cost := 1 - rates[with]/rates[base]
				costs[c] = append(costs[c], cost)
				logf("%s c=%-3d pair %d  without %8.0f req/s  with %8.0f req/s  cost %5.1f%%", what, c, i+1,
					rates[base], rates[with], 100*cost)
			}
		}
	}
	return costs, nil
}

// measureModulesCost measures the three modules' cost: the HTTPS edge without them and with them.
func (b *trafficRunner) measureModulesCost(ctx context.Context) error {
	var edge, mods *trafficPath
	for _, p := range b.paths {
		switch p.name {
		case pathEdge:
			edge = p
		case pathModules:
			mods = p
		}
	}
	if edge == nil || mods == nil {
		return nil
	}
	var err error
	b.modulesCost, err = b.measurePairs(ctx, "modules", edge, mods, nil)
	return err
}

// pairsText is the median of the pairs' costs at a concurrency and their spread (middle half).
func pairsText(costs map[int][]float64, c int) (float64, string, bool) {
	v := slices.Clone(costs[c])
	if len(v) == 0 {
		return 0, "", false
	}
	slices.Sort(v)
	q1, q3 := v[len(v)/4], v[(3*len(v))/4]
	return median(v), fmt.Sprintf("median of %d back-to-back pairs; middle half %.1f%% to %.1f%%", len(v), 100*q1, 100*q3), true
}

// modulesCostText is pairsText of the modules' pairs.
func (b *trafficRunner) modulesCostText(c int) (float64, string, bool) {
	return pairsText(b.modulesCost, c)
}
