package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// pathStats is what the table shows of one path at one concurrency: medians over the rounds,
// and the paired ratios (each round against the reference's measurement of the same round).
type pathStats struct {
	rps, p50, p99 float64 // p50 and p99 in seconds
	rateVs, p99Vs map[string]float64
	cpu           []time.Duration // per request, of each middle process
	sys           []procCounts    // over all rounds, of each middle process (divide by n)
	errors        int
	firstErr      string
	n             int
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (b *trafficRunner) stats(p *trafficPath, conc int) pathStats {
	rs := b.rounds[resultKey{p.name, conc}]
	st := pathStats{rateVs: map[string]float64{}, p99Vs: map[string]float64{}, cpu: make([]time.Duration, len(p.middle)), sys: make([]procCounts, len(p.middle))}
	var rps, p50, p99 []float64
	cpu := make([]time.Duration, len(p.middle))
	for _, r := range rs {
		rps = append(rps, r.rps())
		p50 = append(p50, r.p50.Seconds())
		p99 = append(p99, r.p99.Seconds())
		st.errors += r.errors
		st.n += r.n
		if st.firstErr == "" {
			st.firstErr = r.firstErr
		}
		for i, c := range r.cpu {
			cpu[i] += c
		}
		for i, c := range r.sys {
			st.sys[i].reads += c.reads
			st.sys[i].writes += c.writes
			st.sys[i].switches += c.switches
		}
	}
	st.rps, st.p50, st.p99 = median(rps), median(p50), median(p99)
	for i := range cpu {
		if st.n > 0 {
			st.cpu[i] = cpu[i] / time.Duration(st.n)
		}
	}
	for _, ref := range []string{pathProxy, pathProxyTLS} {
		refs := b.rounds[resultKey{ref, conc}]
		var rate, lat []float64
		for i := range min(len(rs), len(refs)) {
			if refs[i].rps() > 0 && refs[i].p99 > 0 {
				rate = append(rate, rs[i].rps()/refs[i].rps())
				lat = append(lat, float64(rs[i].p99)/float64(refs[i].p99))
			}
		}
		st.rateVs[ref], st.p99Vs[ref] = median(rate), median(lat)
	}
	return st
}

func secs(v float64) string { return fmtDur(time.Duration(v * float64(time.Second))) }

// report renders the results as Markdown.
func (b *trafficRunner) report(took time.Duration) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# edgeplane data-plane benchmark\n\n")
	fmt.Fprintf(&w, "Run %s on %s. The whole run took %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), took.Round(time.Second))
	fmt.Fprintf(&w, "Command: `make bench-traffic` (`%s`); this run: %d rounds of %s measured (after %s of warm-up) per path\n",
		trafficUsage, b.cfg.rounds, b.cfg.window, b.cfg.warmup)
	fmt.Fprintf(&w, "and concurrency, bulk transfers of %s.\n\n", fmtSize(b.cfg.bulk))
	fmt.Fprintf(&w, "**Read the ratios, not the absolute figures.** The load generator, the upstream, the reverse proxy,\n")
	fmt.Fprintf(&w, "edgeplane and the agent all share this machine's cores, and other work (other engineers' tests) may run\n")
	fmt.Fprintf(&w, "at the same time. Each round measures every path one after another in a rotating order; the table shows\n")
	fmt.Fprintf(&w, "the median round, and each ratio is the median of the per-round ratios to the reference measured in the\n")
	fmt.Fprintf(&w, "same round.\n\n")
	fmt.Fprintf(&w, "Paths: the load generator's own keep-alive HTTP/1.1 client (one connection per client, the next request\n")
	fmt.Fprintf(&w, "when the last is answered) sends `GET /` to a plain net/http upstream answering %d bytes:\n", len(upstreamBody))
	fmt.Fprintf(&w, "directly; through net/http's `httputil.ReverseProxy` (idle upstream pool of 1024) over plain HTTP and over\n")
	fmt.Fprintf(&w, "TLS (TLS 1.3, ECDSA P-256, like edgeplane's); through edgeplane's TLS listener to an HTTPS edge (one\n")
	fmt.Fprintf(&w, "`path_prefix /` route, `tunnel_group` backend) and to an `https` endpoint bind, both carried to one ngrok-go\n")
	fmt.Fprintf(&w, "v1 agent (`ListenAndForward`, a new upstream connection per tunnel stream) in a process of its own.\n")
	fmt.Fprintf(&w, "CPU/req is the CPU time (user + system) of the processes between client and upstream, per request.\n\n")
	fmt.Fprintf(&w, "| path | c | req/s | p50 | p99 | CPU/req | req/s vs one-hop HTTPS / HTTP | p99 vs one-hop HTTPS / HTTP | req/s vs frp | errors |\n")
	fmt.Fprintf(&w, "|---|--:|--:|--:|--:|---|--:|--:|--:|--:|\n")
	for _, c := range b.cfg.conc {
		for _, p := range b.paths {
			st := b.stats(p, c)
			cpu := "—"
			switch len(p.middle) {
			case 1:
				cpu = "proxy " + fmtDur(st.cpu[0])
			case 2:
				cpu = fmt.Sprintf("edgeplane %s + agent %s", fmtDur(st.cpu[0]), fmtDur(st.cpu[1]))
				if p.name == pathFrp {
					cpu = fmt.Sprintf("frps %s + frpc %s", fmtDur(st.cpu[0]), fmtDur(st.cpu[1]))
				}
			}
			vsFrp := "—"
			if b.frpSkipped == "" {
				vsFrp = fmt.Sprintf("%.2f×", b.pairedRatio(p.name, pathFrp, c))
			}
			fmt.Fprintf(&w, "| %s | %d | %.0f | %s | %s | %s | %.0f%% / %.0f%% | %.2f× / %.2f× | %s | %d |\n",
				p.name, c, st.rps, secs(st.p50), secs(st.p99), cpu,
				100*st.rateVs[pathProxyTLS], 100*st.rateVs[pathProxy], st.p99Vs[pathProxyTLS], st.p99Vs[pathProxy], vsFrp, st.errors)
		}
	}
	fmt.Fprintln(&w)
	b.writeCounts(&w)
	if len(b.bulk) > 0 {
		fmt.Fprintf(&w, "## Bulk transfer, %s each way (one transfer per path, net/http's client, HTTP/1.1)\n\n", fmtSize(b.cfg.bulk))
		fmt.Fprintf(&w, "| path | direction | MB/s | vs direct | edgeplane RSS before → peak | error |\n|---|---|--:|--:|---|---|\n")
		for _, r := range b.bulk {
			ratio, mem, errText := "", "", ""
			if d := b.bulkOf(pathDirect, r.direction); d != nil && d.t.mbps() > 0 {
				ratio = fmt.Sprintf("%.0f%%", 100*r.t.mbps()/d.t.mbps())
			}
			if r.t.rss > 0 {
				mem = fmt.Sprintf("%d → %d MB", r.t.rss>>20, r.t.peak>>20)
			}
			if r.t.err != nil {
				errText = r.t.err.Error()
			}
			fmt.Fprintf(&w, "| %s | %s | %.0f | %s | %s | %s |\n", r.path, r.direction, r.t.mbps(), ratio, mem, errText)
		}
		fmt.Fprintln(&w)
	}
	if len(b.frpPairs) > 0 {
		fmt.Fprintf(&w, "## 256 MiB downloads, http endpoint against frp (%d back-to-back pairs)\n\n| pair | %s MB/s | %s MB/s | ratio | CPU µs/MB, edgeplane + agent | CPU µs/MB, frps + frpc | system calls / switches per MB, edgeplane + agent | the same, frps + frpc |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n", len(b.frpPairs), pathHTTPEndpoint, pathFrp)
		for i, p := range b.frpPairs {
			ratio := "—"
			if p[0].err == nil && p[1].err == nil && p[1].mbps() > 0 {
				ratio = fmt.Sprintf("%.2f×", p[0].mbps()/p[1].mbps())
			}
			fmt.Fprintf(&w, "| %d | %.0f | %.0f | %s | %.0f | %.0f | %.0f / %.0f | %.0f / %.0f |\n", i+1, p[0].mbps(), p[1].mbps(), ratio, p[0].cpuPerMB(), p[1].cpuPerMB(),
				p[0].perMB(p[0].syscalls), p[0].perMB(p[0].switches), p[1].perMB(p[1].syscalls), p[1].perMB(p[1].switches))
		}
		fmt.Fprintln(&w, "\nCPU µs/MB is the CPU time (user + system) of the two processes between client and upstream during the download, per MB moved;"+
			" system calls are those that read or write (/proc/<pid>/io), switches the context switches of all their threads, both per MB.")
		fmt.Fprintln(&w)
	}
	b.extraReport(&w)
	fmt.Fprintf(&w, "## Targets measured here\n\n| target | reference | measured | met |\n|---|---|---|---|\n")
	all := append(append(b.targets(), b.extraTargets()...), b.inspectorTargets()...)
	for _, t := range append(append(all, b.httpEndpointTargets()...), b.frpTargets()...) {
		met := "yes"
		switch {
		case t.na:
			met = "n/a"
		case !t.met:
			met = "**no**"
		}
		fmt.Fprintf(&w, "| %s | %s | %s | %s |\n", t.name, t.ref, t.measured, met)
	}
	fmt.Fprintln(&w)
	if b.world != nil && b.world.extra != nil {
		fmt.Fprintf(&w, "Extra rows: `%s` is a plain `http` endpoint bind of the same agent on the public HTTP listener;\n", pathHTTPEndpoint)
		fmt.Fprintf(&w, "`%s` a TCP edge on a reserved address whose `tunnel_group` backend is the agent's labeled tunnel\n", pathTCPEdge)
		fmt.Fprintf(&w, "(the client speaks HTTP/1.1 over the raw connection, kept alive); `%s` a second HTTPS\n", pathModules)
		fmt.Fprintf(&w, "edge whose route has `ip_restriction` (a policy allowing 127.0.0.0/8), `request_headers` (adds one header) and\n")
		fmt.Fprintf(&w, "`compression` (enabled; the 64-byte answer is below its 256-byte minimum, so its cost is the negotiation).\n")
		fmt.Fprintf(&w, "Both HTTPS edge rows send `Accept-Encoding: gzip`. The scale scenarios are `edgeplane-bench scale` (bench/scale.md).\n\n")
	}
	if b.noInspector != nil {
		fmt.Fprintf(&w, "The inspector's row: `%s` is a second edgeplane started with `--inspect-entries 0` (the public\n", pathEdgeNoInspector)
		fmt.Fprintf(&w, "listeners record nothing), with its own agent and the same HTTPS edge to the same upstream; `%s`, the run's\n", pathEdge)
		fmt.Fprintf(&w, "edgeplane with the inspector on as deployed (every request recorded, headers cloned and redacted, its ring of\n")
		fmt.Fprintf(&w, "1000 entries full), is measured against it in %d back-to-back pairs per concurrency, then in as many rounds driving\n", b.cfg.pairs)
		fmt.Fprintf(&w, "both at once (each with its own clients), which see the machine's other work alike; the target is judged on those.\n\n")
	}
	writeNotes(&w, append(b.notes, b.frpNote()))
	return w.String()
}

func (b *trafficRunner) bulkOf(path, direction string) *bulkRow {
	for i := range b.bulk {
		if b.bulk[i].path == path && b.bulk[i].direction == direction {
			return &b.bulk[i]
		}
	}
	return nil
}

// trafficTarget is one data-plane target with the reference it is measured against.
type trafficTarget struct {
	name, ref, measured string
	met, na             bool
}

// targets evaluates the data-plane targets that this run measures, against both references: the
// TLS-terminating one-hop proxy (like for like: edgeplane terminates the client's TLS too) and
// the plain-HTTP one. Each row stands on its own; neither is chosen over the other.
func (b *trafficRunner) targets() []trafficTarget {
	var out []trafficTarget
	var edge *trafficPath
	for _, p := range b.paths {
		if p.name == pathEdge {
			edge = p
		}
	}
	if edge == nil {
		return nil
	}
	hasConc := func(c int) bool { return slices.Contains(b.cfg.conc, c) }
	for _, ref := range []string{pathProxyTLS, pathProxy} {
		name := "HTTPS edge at c=16 ≥ 60% of the one-hop rate"
		if !hasConc(16) {
			out = append(out, trafficTarget{name: name, ref: ref, measured: "c=16 not measured", na: true})
		} else {
			st := b.stats(edge, 16)
			v := st.rateVs[ref]
			out = append(out, trafficTarget{name: name, ref: ref, met: v >= 0.6 && st.errors == 0,
				measured: fmt.Sprintf("%.0f%% (%.0f req/s, median of paired rounds)", 100*v, st.rps)})
		}
		name = "HTTPS edge p99 at c=64 ≤ 2× the one-hop p99"
		if !hasConc(64) {
			out = append(out, trafficTarget{name: name, ref: ref, measured: "c=64 not measured", na: true})
		} else {
			st := b.stats(edge, 64)
			v := st.p99Vs[ref]
			out = append(out, trafficTarget{name: name, ref: ref, met: v <= 2 && st.errors == 0,
				measured: fmt.Sprintf("%.2f× (%s)", v, secs(st.p99))})
		}
	}
	for _, dir := range []string{"download", "upload"} {
		name := "bulk " + dir + " through the tunnel ≥ 60% of direct"
		d, e := b.bulkOf(pathDirect, dir), b.bulkOf(pathEdge, dir)
		if d == nil || e == nil || d.t.mbps() == 0 {
			out = append(out, trafficTarget{name: name, ref: pathDirect, measured: "not measured", na: true})
			continue
		}
		v := e.t.mbps() / d.t.mbps()
		out = append(out, trafficTarget{name: name, ref: pathDirect, met: v >= 0.6 && e.t.err == nil,
			measured: fmt.Sprintf("%.0f%% (%.0f vs %.0f MB/s; edgeplane RSS %d → %d MB)", 100*v, e.t.mbps(), d.t.mbps(), e.t.rss>>20, e.t.peak>>20)})
	}
	return out
}

// writeCounts renders the system calls and context switches per request of the middle processes
// of each path, over all its rounds.
func (b *trafficRunner) writeCounts(w *strings.Builder) {
	fmt.Fprintf(w, "System calls and context switches per request, over all rounds, of the processes between client and\n")
	fmt.Fprintf(w, "upstream (reads and writes from `/proc/<pid>/io`, every thread's context switches, voluntary and forced):\n\n")
	fmt.Fprintf(w, "| path | c | reads | writes | context switches |\n|---|--:|---|---|---|\n")
	for _, c := range b.cfg.conc {
		for _, p := range b.paths {
			st := b.stats(p, c)
			if len(p.middle) == 0 || st.n == 0 {
				continue
			}
			per := func(f func(procCounts) int64) string {
				parts := make([]string, len(st.sys))
				for i, pc := range st.sys {
					parts[i] = fmt.Sprintf("%.2f", float64(f(pc))/float64(st.n))
				}
				return strings.Join(parts, " + ")
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", p.name, c,
				per(func(pc procCounts) int64 { return pc.reads }), per(func(pc procCounts) int64 { return pc.writes }),
				per(func(pc procCounts) int64 { return pc.switches }))
		}
	}
	fmt.Fprintln(w)
}
