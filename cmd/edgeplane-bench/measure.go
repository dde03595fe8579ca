package main

import (
	"context"
	"fmt"
	"time"
)

// measure runs one scenario in rounds that alternate with the baseline of its family at the same
// concurrency, and records it with that paired baseline.
func (b *runner) measure(ctx context.Context, engine, server, scenario, family string, conc int, srv *child, wl workload) error {
	return b.measureAll(ctx, engine, scenario, family, conc, []contender{{server, srv, wl}})
}

// measureAll measures several servers in one scenario, in rounds that rotate through them and the
// baseline, so that every one of them sees the same background load of this shared machine.
func (b *runner) measureAll(ctx context.Context, engine, scenario, family string, conc int, cs []contender) error {
	rounds := b.cfg.rounds
	o := loadOpts{conc: conc, warmup: b.cfg.warmup / time.Duration(rounds), window: b.cfg.window / time.Duration(rounds),
		maxRequests: b.cfg.maxRequests / rounds, netHTTP: b.cfg.netHTTP}
	all := cs
	if b.base != nil {
		all = append([]contender{{"baseline", b.base, b.baseWL[family]}}, cs...)
	}
	samples := make([]sample, len(all))
	before := make([]storeCounters, len(cs))
	for i, c := range cs {
		before[i], _ = c.srv.counters()
	}
	for i := range rounds {
		for k := range all {
			j := (i + k) % len(all) // rotate which goes first, so a drift of the load evens out
			s, err := run(ctx, all[j].srv, all[j].wl, o)
			if err != nil {
				return err
			}
			samples[j].add(s)
		}
	}
	var base *sample
	if b.base != nil {
		bs := samples[0]
		base = &bs
		b.addBaseline(engine, family, conc, bs)
		samples = samples[1:]
	}
	for i, c := range cs {
		es := samples[i]
		r := row{engine: engine, server: c.server, scenario: scenario, family: family, conc: conc, s: es, base: base}
		b.rows = append(b.rows, r)
		store := ""
		if after, ok := c.srv.counters(); ok {
			store = after.since(before[i])
		}
		ratio := ""
		if base != nil && base.rps() > 0 {
			ratio = fmt.Sprintf("(%.0f%% of baseline %.0f req/s, p99 %.2f×)", 100*es.rps()/base.rps(), base.rps(), float64(es.p99)/float64(max(1, base.p99)))
		}
		logf("%-8s %-28s %-58s c=%-3d %8.0f req/s  p50 %7s  p99 %7s  cpu %6s/req  rss %4d MB  errors %d %s %s %s",
			engine, c.server, scenario, conc, es.rps(), fmtDur(es.p50), fmtDur(es.p99), fmtDur(es.cpuPerReq()), es.peakRSS>>20, es.errors, ratio, store, es.firstErr)
	}
	return nil
}

// addBaseline merges a paired baseline measurement into the engine's baseline row of its family
// and concurrency, which the table shows for reference.
func (b *runner) addBaseline(engine, family string, conc int, s sample) {
	name := scBaseGet
	if family == "post" {
		name = scBasePost
	}
	for i := range b.rows {
		r := &b.rows[i]
		if r.engine == engine && r.server == "baseline" && r.family == family && r.conc == conc {
			r.s.add(s)
			return
		}
	}
	b.rows = append(b.rows, row{engine: engine, server: "baseline", scenario: name, family: family, conc: conc, s: s})
}
