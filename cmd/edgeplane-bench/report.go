package main

import (
	"fmt"
	"strings"
	"time"
)

// report renders the results as Markdown.
func (b *runner) report(took time.Duration) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# edgeplane benchmark results\n\n")
	fmt.Fprintf(&w, "Run %s on %s; %s measured per scenario after %s of warm-up; load generator, servers and\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), b.cfg.window, b.cfg.warmup)
	fmt.Fprintf(&w, "database on the same machine; every server in a process of its own. The whole run took %s.\n\n", took.Round(time.Second))
	fmt.Fprintf(&w, "Command: `make bench` (`go run ./cmd/edgeplane-bench -out bench/results.md`).\n\n")
	fmt.Fprintf(&w, "Columns: requests per second; latency percentiles; server CPU time (user + system, all threads) per\n")
	fmt.Fprintf(&w, "request; the server's peak RSS (VmHWM, reset before each scenario); and the ratio to the baseline\n")
	fmt.Fprintf(&w, "row of the same concurrency measured in the same run (GET baseline for reads, POST baseline for writes).\n")
	fmt.Fprintf(&w, "Every scenario is measured in %d rounds that alternate with its baseline, and its ratios are to that\n", b.cfg.rounds)
	fmt.Fprintf(&w, "paired baseline; a baseline row shows all of its rounds together.\n\n")
	for _, engine := range []string{"sqlite", "postgres"} {
		rows := b.engineRows(engine)
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&w, "## %s\n\n", engineTitle(engine))
		fmt.Fprintf(&w, "| server | scenario | c | req/s | p50 | p99 | CPU/req | peak RSS | req/s vs baseline | p99 vs baseline | errors |\n")
		fmt.Fprintf(&w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range rows {
			rate, p99 := "", ""
			if r.base != nil && r.base.rps() > 0 {
				rate = fmt.Sprintf("%.0f%%", 100*r.s.rps()/r.base.rps())
				p99 = fmt.Sprintf("%.2f×", float64(r.s.p99)/float64(r.base.p99))
			}
			fmt.Fprintf(&w, "| %s | %s | %d | %.0f | %s | %s | %s | %d MB | %s | %s | %d |\n",
				r.server, r.scenario, r.conc, r.s.rps(), fmtDur(r.s.p50), fmtDur(r.s.p99), fmtDur(r.s.cpuPerReq()),
				r.s.peakRSS>>20, rate, p99, r.s.errors)
		}
		fmt.Fprintln(&w)
	}
	fmt.Fprintf(&w, "## Targets\n\n")
	fmt.Fprintf(&w, "| engine | target | measured | met |\n|---|---|---|---|\n")
	for _, t := range b.targets() {
		met := "yes"
		if !t.met {
			met = "**no**"
		}
		if t.na {
			met = "n/a"
		}
		fmt.Fprintf(&w, "| %s | %s | %s | %s |\n", t.engine, t.name, t.measured, met)
	}
	fmt.Fprintln(&w)
	if len(b.crash) > 0 {
		fmt.Fprintf(&w, "## Crash checks\n\n")
		for _, c := range b.crash {
			fmt.Fprintf(&w, "- %s\n", c)
		}
		fmt.Fprintln(&w)
	}
	writeNotes(&w, b.notes)
	return w.String()
}

func (b *runner) engineRows(engine string) []row {
	var out []row
	for _, r := range b.rows {
		if r.engine == engine {
			out = append(out, r)
		}
	}
	return out
}

func (b *runner) find(engine, server, scenario string, conc int) *row {
	for i := range b.rows {
		r := &b.rows[i]
		if r.engine == engine && r.server == server && r.scenario == scenario && r.conc == conc {
			return r
		}
	}
	return nil
}

type target struct {
	engine, name, measured string
	met, na                bool
}

// targets evaluates the API's targets on the rows of this run.
func (b *runner) targets() []target {
	var out []target
	for _, engine := range []string{"sqlite", "postgres"} {
		if len(b.engineRows(engine)) == 0 {
			continue
		}
		e := engineTitle(engine)
		missing := func(name string) {
			out = append(out, target{engine: e, name: name, measured: "not measured in this run", na: true})
		}
		ratio := func(name string, r *row, min float64) {
			if r == nil || r.base == nil || r.base.rps() == 0 {
				missing(name)
				return
			}
			v := r.s.rps() / r.base.rps()
			out = append(out, target{engine: e, name: name, met: v >= min && r.s.errors == 0,
				measured: fmt.Sprintf("%.0f req/s vs baseline %.0f req/s = %.0f%%", r.s.rps(), r.base.rps(), 100*v)})
		}
		ratio("GET by id at c=16 ≥ 50% of the baseline GET rate", b.find(engine, "edgeplane", scGet, 16), 0.5)
		if r := b.find(engine, "edgeplane", scGet, 64); r != nil && r.base != nil && r.base.p99 > 0 {
			v := float64(r.s.p99) / float64(r.base.p99)
			out = append(out, target{engine: e, name: "GET by id: p99 at c=64 ≤ 3× the baseline's p99", met: v <= 3,
				measured: fmt.Sprintf("%s vs baseline %s = %.2f×", fmtDur(r.s.p99), fmtDur(r.base.p99), v)})
		} else {
			missing("GET by id: p99 at c=64 ≤ 3× the baseline's p99")
		}
		ratio("create at c=16 ≥ 35% of the baseline POST rate", b.find(engine, "edgeplane", scCreate, 16), 0.35)
		if engine == "sqlite" {
			g, one := b.find(engine, srvFull, scCreate, 16), b.find(engine, srvFullOne, scCreate, 16)
			if g != nil && one != nil && one.s.rps() > 0 {
				v := g.s.rps() / one.s.rps()
				out = append(out, target{engine: e, name: "`--durability full`: creates at c=16 ≥ 1.5× one fsync'd transaction per create", met: v >= 1.5 && g.s.errors == 0,
					measured: fmt.Sprintf("%.0f req/s vs %.0f req/s = %.2f×", g.s.rps(), one.s.rps(), v)})
			} else {
				missing("`--durability full`: creates at c=16 ≥ 1.5× one fsync'd transaction per create")
			}
		}
		var small, large *row
		for i := range b.rows {
			r := &b.rows[i]
			if r.engine != engine || r.server != "edgeplane" || r.conc != 1 {
				continue
			}
			switch r.scenario {
			case fmt.Sprintf(scListSmall, humanCount(b.cfg.smallN)):
				small = r
			case fmt.Sprintf(scListSmall, humanCount(b.cfg.largeN)):
				large = r
			}
		}
		name := fmt.Sprintf("list page at %s objects ≤ 1.5× the time at %s (p50, c=1)", humanCount(b.cfg.largeN), humanCount(b.cfg.smallN))
		if small != nil && large != nil && small.s.p50 > 0 {
			v := float64(large.s.p50) / float64(small.s.p50)
			out = append(out, target{engine: e, name: name, met: v <= 1.5,
				measured: fmt.Sprintf("%s vs %s = %.2f×", fmtDur(large.s.p50), fmtDur(small.s.p50), v)})
		} else {
			missing(name)
		}
		var peak int64
		for _, r := range b.rows {
			if r.engine == engine && r.server == "edgeplane" {
				peak = max(peak, r.s.peakRSS)
			}
		}
		out = append(out, target{engine: e, name: fmt.Sprintf("peak RSS ≤ 150 MB serving the %s-object account (highest of all scenarios)", humanCount(b.cfg.largeN)),
			met: peak > 0 && peak <= 150<<20, measured: fmt.Sprintf("%d MB", peak>>20)})
	}
	return out
}
