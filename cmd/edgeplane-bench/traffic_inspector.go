package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"
)

// The traffic inspector's cost. The run's edgeplane records every public request (the
// inspector is on by default, as in a deployment); a second edgeplane, started with
// --inspect-entries 0, records nothing, and its public listeners pay one nil check per request.
// Each has its own agent forwarding to the same upstream and the same HTTPS edge; the two edges
// are measured in back-to-back pairs, as the modules are, after the main rounds.

const pathEdgeNoInspector = "edgeplane HTTPS edge → agent, inspector off"

// inspectorOff is the second edgeplane's HTTPS edge.
type inspectorOff struct {
	path *trafficPath
	// cpu is edgeplane's CPU time per request in each pair, off and on, by concurrency: steadier
	// than the rate on a machine other work shares.
	cpu map[int][][2]time.Duration
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
	b.noInspector = &inspectorOff{path: off, cpu: map[int][][2]time.Duration{}}
	b.inspectorCost, err = b.measurePairs(ctx, "inspector", off, edge, b.noInspector.cpu)
	return err
}

// inspectorTargets is the inspector's target: recording costs at most 3% of the request rate
// of the same HTTPS edge recording nothing.
func (b *trafficRunner) inspectorTargets() []trafficTarget {
	var out []trafficTarget
	for _, c := range b.cfg.conc {
		cost, how, ok := pairsText(b.inspectorCost, c)
		if !ok {
			continue
		}
		out = append(out, trafficTarget{
			name: fmt.Sprintf("recording every request (the traffic inspector on) costs ≤ 3%% of the rate (c=%d)", c),
			ref:  pathEdgeNoInspector, met: cost <= 0.03,
			measured: fmt.Sprintf("%.1f%% (%s; %s)", 100*cost, how, b.noInspector.cpuText(c))})
	}
	return out
}

// cpuText says what recording adds to edgeplane's CPU time per request at a concurrency: the
// medians of the pairs' halves, and the median of the pairs' ratios.
func (o *inspectorOff) cpuText(c int) string {
	var off, on, ratio []float64
	for _, p := range o.cpu[c] {
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
