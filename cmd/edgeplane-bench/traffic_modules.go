package main

import (
	"context"
	"fmt"
	"slices"
)

// modulesPairs is how many back-to-back pairs of rounds, the HTTPS edge with and without the three
// modules, measure the modules' cost at each concurrency. The main rounds rotate through every
// path, so they measure the two some ten seconds apart, and on a machine shared with other work
// the load drifts by more than the cost in that time: their paired ratio swung by ±10–20% between
// runs. Back to back, alternating which goes first, the drift between the two halves of a pair is
// a few seconds' at most and evens out over the pairs.
const modulesPairs = 10

// measureModulesCost runs the pairs and records, per concurrency, the cost of each pair: one less
// the modules path's rate over the plain edge's.
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
	b.modulesCost = map[int][]float64{}
	for _, c := range b.cfg.conc {
		for i := range modulesPairs {
			pair := [2]*trafficPath{edge, mods}
			if i%2 == 1 {
				pair = [2]*trafficPath{mods, edge}
			}
			rates := map[string]float64{}
			for _, p := range pair {
				r, err := measureRound(ctx, p, c, b.cfg.warmup, b.cfg.window)
				if err != nil {
					return err
				}
				if r.errors > 0 {
					return fmt.Errorf("%s at c=%d: %d errors (%s)", p.name, c, r.errors, r.firstErr)
				}
				rates[p.name] = r.rps()
			}
			if rates[pathEdge] > 0 {
				cost := 1 - rates[pathModules]/rates[pathEdge]
				b.modulesCost[c] = append(b.modulesCost[c], cost)
				logf("modules c=%-3d pair %d  edge %8.0f req/s  modules %8.0f req/s  cost %5.1f%%", c, i+1,
					rates[pathEdge], rates[pathModules], 100*cost)
			}
		}
	}
	return nil
}

// modulesCostText is the median cost of the pairs at a concurrency and their spread (middle half).
func (b *trafficRunner) modulesCostText(c int) (float64, string, bool) {
	v := slices.Clone(b.modulesCost[c])
	if len(v) == 0 {
		return 0, "", false
	}
	slices.Sort(v)
	q1, q3 := v[len(v)/4], v[(3*len(v))/4]
	return median(v), fmt.Sprintf("median of %d back-to-back pairs; middle half %.1f%% to %.1f%%", len(v), 100*q1, 100*q3), true
}
