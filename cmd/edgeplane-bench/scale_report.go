package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// report renders the scale benchmark's results as Markdown.
func (r *scaleRunner) report(took time.Duration) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# edgeplane scale benchmark\n\n")
	fmt.Fprintf(&w, "Run %s on %s. The whole run took %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), took.Round(time.Second))
	fmt.Fprintf(&w, "Command: `make bench-scale` (`%s`).\n\n", scaleUsage)
	fmt.Fprintf(&w, "**The machine is shared**: the benchmark process (which holds every agent session and is the load\n")
	fmt.Fprintf(&w, "generator), edgeplane and other engineers' work run on the same cores. Compare the ratios measured in the\n")
	fmt.Fprintf(&w, "same run; absolute figures are noise.\n\n")
	var targets []trafficTarget
	if s := r.sess; s != nil {
		targets = append(targets, r.sessionsReport(&w, s)...)
	}
	if rt := r.routes; rt != nil {
		targets = append(targets, r.routesReport(&w, rt)...)
	}
	fmt.Fprintf(&w, "## Targets measured here\n\n| target | measured | met |\n|---|---|---|\n")
	for _, t := range targets {
		met := "yes"
		switch {
		case t.na:
			met = "n/a"
		case !t.met:
			met = "**no**"
		}
		fmt.Fprintf(&w, "| %s | %s | %s |\n", t.name, t.measured, met)
	}
	fmt.Fprintln(&w)
	writeNotes(&w, r.notes)
	return w.String()
}

func (r *scaleRunner) sessionsReport(w io.Writer, s *sessionResult) []trafficTarget {
	fmt.Fprintf(w, "## %d idle agent sessions\n\n", s.n)
	fmt.Fprintf(w, "`edgeplane serve` on a new SQLite database with `--agent-max-connections 0 --agent-max-connections-per-ip 0\n")
	fmt.Fprintf(w, "--agent-max-unauthenticated-per-ip 0` (every session comes from 127.0.0.1). The benchmark process raises its\n")
	fmt.Fprintf(w, "open-file limit to %d (the hard limit; edgeplane inherits it) and opens %d ngrok-go v1 sessions\n", s.connLimit, s.n)
	fmt.Fprintf(w, "(`ngrok.Connect`, default heartbeat settings, one authtoken), %d at a time, each binding one labeled\n", r.cfg.openConc)
	fmt.Fprintf(w, "tunnel `scale=<i>` (`Session.Listen`), and holds them. RSS is VmRSS from `/proc/<pid>/status` %s after\n", r.cfg.settle)
	fmt.Fprintf(w, "the last session opened (past the Go runtime's forced GC every 2 minutes; 15 s after, it was\n")
	fmt.Fprintf(w, "%.1f MB); CPU at rest is utime + stime from `/proc/<pid>/stat` over %s\n", mb(s.rssEarly), r.cfg.rest)
	fmt.Fprintf(w, "right after. The empty server was\n")
	fmt.Fprintf(w, "measured after %d sessions were opened and closed one at a time (the \"empty\" bind times below).\n", r.cfg.probes)
	fmt.Fprintf(w, "A bind time is from `ngrok.Connect` to `Listen` returning: TLS handshake, Auth, Bind.\n\n")
	per := float64(s.rssFull-s.rssEmpty) / float64(s.n)
	cpuPct := func(d time.Duration) float64 { return 100 * d.Seconds() / r.cfg.rest.Seconds() }
	fmt.Fprintf(w, "| | empty server | %d sessions held | per session |\n|---|--:|--:|--:|\n", s.n)
	fmt.Fprintf(w, "| edgeplane RSS | %.1f MB | %.1f MB | %.1f KB |\n", mb(s.rssEmpty), mb(s.rssFull), per/1024)
	fmt.Fprintf(w, "| edgeplane CPU at rest (%% of one core, over %s) | %.2f%% | %.2f%% | |\n", r.cfg.rest, cpuPct(s.cpuEmpty), cpuPct(s.cpuFull))
	fmt.Fprintf(w, "| next session authenticated and bound, p50 / p90 / p99 (%d, one at a time) | %s / %s / %s | %s / %s / %s | |\n",
		r.cfg.probes, fmtDur(pct(s.probeEmpty, 0.5)), fmtDur(pct(s.probeEmpty, 0.9)), fmtDur(pct(s.probeEmpty, 0.99)),
		fmtDur(pct(s.probeFull, 0.5)), fmtDur(pct(s.probeFull, 0.9)), fmtDur(pct(s.probeFull, 0.99)))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Opening the %d sessions took %s (%.0f sessions/s). During the %s at rest edgeplane answered %d heartbeats\n",
		s.n, s.openTook.Round(time.Millisecond), float64(s.n)/s.openTook.Seconds(), r.cfg.rest, s.beats)
	fmt.Fprintf(w, "(ngrok-go's default interval is 10 s) and %d sessions were lost. The benchmark process itself held %.0f MB\n", s.disconnects, mb(s.selfRSS))
	fmt.Fprintf(w, "for the client side of the sessions.")
	if s.gFull >= 0 && s.gEmpty >= 0 {
		fmt.Fprintf(w, " edgeplane ran %d goroutines empty and %d with the sessions held (%.1f per session).",
			s.gEmpty, s.gFull, float64(s.gFull-s.gEmpty)/float64(s.n))
	}
	fmt.Fprintf(w, "\n\n")
	if s.memEmpty != nil && s.memFull != nil {
		fmt.Fprintf(w, "Where edgeplane's memory is, from its `runtime.MemStats` (`-profile`), per session held:\n\n")
		fmt.Fprintf(w, "| MemStats | empty server | %d sessions held | per session |\n|---|--:|--:|--:|\n", s.n)
		for _, f := range []string{"HeapInuse", "HeapIdle", "HeapReleased", "Stack", "Sys"} {
			name := f
			if f == "Stack" {
				name = "StackInuse"
			}
			fmt.Fprintf(w, "| %s | %.1f MB | %.1f MB | %.1f KB |\n", name, mb(s.memEmpty[f]), mb(s.memFull[f]),
				float64(s.memFull[f]-s.memEmpty[f])/float64(s.n)/1024)
		}
		fmt.Fprintf(w, "\nHeapIdle less HeapReleased is heap the runtime holds but does not use (freed since the last GC, or\n")
		fmt.Fprintf(w, "left over from opening the sessions), which counts in RSS.\n\n")
	}
	return []trafficTarget{
		{name: fmt.Sprintf("%d idle sessions: RSS ≤ 60 KB per session above the empty server", s.n), met: per <= 60*1024,
			measured: fmt.Sprintf("%.1f KB (%.0f → %.0f MB)", per/1024, mb(s.rssEmpty), mb(s.rssFull))},
		{name: fmt.Sprintf("%d idle sessions: CPU at rest ≤ 5%% of one core", s.n), met: cpuPct(s.cpuFull) <= 5,
			measured: fmt.Sprintf("%.2f%% (%s over %s; empty server %.2f%%)", cpuPct(s.cpuFull), s.cpuFull, r.cfg.rest, cpuPct(s.cpuEmpty))},
		{name: fmt.Sprintf("session %d authenticated and bound in ≤ 50 ms p99", s.n+1), met: pct(s.probeFull, 0.99) <= 50*time.Millisecond,
			measured: fmt.Sprintf("p99 %s, p50 %s over %d (empty server: p99 %s, p50 %s)", fmtDur(pct(s.probeFull, 0.99)), fmtDur(pct(s.probeFull, 0.5)),
				len(s.probeFull), fmtDur(pct(s.probeEmpty, 0.99)), fmtDur(pct(s.probeEmpty, 0.5)))},
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

func (r *scaleRunner) routesReport(w io.Writer, rt *routesResult) []trafficTarget {
	fmt.Fprintf(w, "## %d routes across %d edges\n\n", rt.routes, rt.edges)
	fmt.Fprintf(w, "One SQLite database, two accounts: one with a single HTTPS edge (`%s`), and one with %d HTTPS edges\n", oneEdgeHost, rt.edges)
	fmt.Fprintf(w, "(`e<i>.%s`, under a wildcard reserved domain), each edge in both with %d `path_prefix` routes\n", manyDomain, r.cfg.routesPerEdge)
	fmt.Fprintf(w, "`/r0`, `/r1`, … to `http_response` backends answering the same %d bytes; requests are `GET %s` over TLS\n", len(upstreamBody), routePath)
	fmt.Fprintf(w, "with keep-alive (no agent on the path: what is measured is edgeplane finding the route). The objects were\n")
	fmt.Fprintf(w, "created through the store package (`store.Create`, each body decoded and validated as the API's create\n")
	fmt.Fprintf(w, "handler does), 16 edges at a time in batches of %d with a `wal_checkpoint(TRUNCATE)` between two, before\n", seedBatch)
	fmt.Fprintf(w, "serve started: **%s** for %d edges and %d routes. serve then\n", rt.seedTook.Round(time.Millisecond), rt.edges+1, rt.routes+r.cfg.routesPerEdge)
	fmt.Fprintf(w, "took %s from its start to the large account's route answering (the plans of both accounts built), and\n", rt.startTook.Round(time.Millisecond))
	fmt.Fprintf(w, "its RSS was then %.0f MB.\n\n", mb(rt.rss))
	fmt.Fprintf(w, "Request rate: %d rounds of %s per account and concurrency, alternating which goes first; the ratio is the\n", r.cfg.rounds, r.cfg.window)
	fmt.Fprintf(w, "median of the per-round ratios.\n\n")
	fmt.Fprintf(w, "| account | c | req/s | p50 | p99 | edgeplane CPU/req | req/s vs 1-edge | p99 vs 1-edge | errors |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var targets []trafficTarget
	for _, c := range r.cfg.conc {
		for _, p := range []*trafficPath{rt.small, rt.large} {
			st := statsOf(rt.rounds[resultKey{p.name, c}])
			rate, lat := pairedRatios(rt.rounds[resultKey{p.name, c}], rt.rounds[resultKey{rt.small.name, c}])
			fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %.0f%% | %.2f× | %d |\n", p.name, c, st.rps, secs(st.p50), secs(st.p99),
				fmtDur(st.cpu), 100*rate, lat, st.errors)
			if p == rt.large {
				targets = append(targets, trafficTarget{name: fmt.Sprintf("%d routes: request rate ≥ 90%% of the 1-edge account (c=%d)", rt.routes, c),
					met: rate >= 0.9 && st.errors == 0, measured: fmt.Sprintf("%.0f%% (%.0f req/s; p99 %.2f× the 1-edge account's)", 100*rate, st.rps, lat)})
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Change to traffic: %d PATCHes of the changed route's `http_response` backend body (`PATCH /backends/http_response/{id}`),\n", len(rt.changeLarge))
	fmt.Fprintf(w, "one at a time; after each answer the route is polled (one keep-alive TLS connection, 1 ms between requests)\n")
	fmt.Fprintf(w, "until it serves the new body. The 1-edge account's changes were measured first, alone.\n\n")
	fmt.Fprintf(w, "| account | PATCH answered → served, p50 | p99 | max | PATCH sent → served, p50 | p99 |\n|---|--:|--:|--:|--:|--:|\n")
	for _, c := range []struct {
		name         string
		answer, call []time.Duration
	}{{rt.small.name, rt.changeSmall, rt.callSmall}, {rt.large.name, rt.changeLarge, rt.callLarge}} {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", c.name, fmtDur(pct(c.answer, 0.5)), fmtDur(pct(c.answer, 0.99)),
			fmtDur(slices.Max(c.answer)), fmtDur(pct(c.call, 0.5)), fmtDur(pct(c.call, 0.99)))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Other accounts during the large account's rebuilds: the 1-edge account's requests (c=4, keep-alive) for 5 s\n")
	fmt.Fprintf(w, "with no changes, then during the %d changes of the large account (each rebuilding its plan).\n\n", len(rt.changeLarge))
	fmt.Fprintf(w, "| 1-edge account's requests | requests | p50 | p99 | max | errors |\n|---|--:|--:|--:|--:|--:|\n")
	fmt.Fprintf(w, "| no changes | %d | %s | %s | %s | %d |\n", len(rt.quiet), fmtDur(pct(rt.quiet, 0.5)), fmtDur(pct(rt.quiet, 0.99)), fmtDur(maxDur(rt.quiet)), rt.quietErr)
	fmt.Fprintf(w, "| during the large account's changes | %d | %s | %s | %s | %d |\n\n", len(rt.during), fmtDur(pct(rt.during, 0.5)), fmtDur(pct(rt.during, 0.99)), fmtDur(maxDur(rt.during)), rt.duringEr)
	p99 := pct(rt.changeLarge, 0.99)
	targets = append(targets,
		trafficTarget{name: fmt.Sprintf("%d routes: a change reaches traffic in ≤ 1 s p99", rt.routes), met: p99 <= time.Second,
			measured: fmt.Sprintf("p99 %s, p50 %s after the PATCH's answer (1-edge account: p99 %s)", fmtDur(p99), fmtDur(pct(rt.changeLarge, 0.5)), fmtDur(pct(rt.changeSmall, 0.99)))},
		trafficTarget{name: "rebuilding one account's plan does not stall other accounts' traffic", na: true,
			measured: fmt.Sprintf("the other account's p99 %s during the rebuilds vs %s without (%.2f×), max %s vs %s, errors %d; the issue sets no figure",
				fmtDur(pct(rt.during, 0.99)), fmtDur(pct(rt.quiet, 0.99)), pct(rt.during, 0.99).Seconds()/max(pct(rt.quiet, 0.99).Seconds(), 1e-9),
				fmtDur(maxDur(rt.during)), fmtDur(maxDur(rt.quiet)), rt.duringEr)})
	return targets
}

func maxDur(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// roundStats are the medians over rounds of one path at one concurrency.
type roundStats struct {
	rps, p50, p99 float64
	cpu           time.Duration // of the first middle process, per request
	errors        int
}

func statsOf(rs []round) roundStats {
	var st roundStats
	var rps, p50, p99 []float64
	var cpu time.Duration
	n := 0
	for _, r := range rs {
		rps, p50, p99 = append(rps, r.rps()), append(p50, r.p50.Seconds()), append(p99, r.p99.Seconds())
		st.errors += r.errors
		n += r.n
		if len(r.cpu) > 0 {
			cpu += r.cpu[0]
		}
	}
	st.rps, st.p50, st.p99 = median(rps), median(p50), median(p99)
	if n > 0 {
		st.cpu = cpu / time.Duration(n)
	}
	return st
}

// pairedRatios are the medians of the per-round ratios of rs's rate and p99 to refs'.
func pairedRatios(rs, refs []round) (rate, p99 float64) {
	var a, b []float64
	for i := range min(len(rs), len(refs)) {
		if refs[i].rps() > 0 && refs[i].p99 > 0 {
			a = append(a, rs[i].rps()/refs[i].rps())
			b = append(b, float64(rs[i].p99)/float64(refs[i].p99))
		}
	}
	return median(a), median(b)
}
