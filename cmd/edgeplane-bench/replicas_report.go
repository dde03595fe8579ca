package main

// The replicas benchmark's report: its table of targets, and the figures it is written from.

import (
	"fmt"
	"strings"
	"time"
)

// replicasReport renders the results as Markdown.
func (b *replicasRunner) replicasReport(took time.Duration) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# edgeplane replicas benchmark\n\n")
	fmt.Fprintf(&w, "Run %s on %s. The whole run took %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), took.Round(time.Second))
	fmt.Fprintf(&w, "Command: `%s`; this run: %d rounds of %s measured (after %s of warm-up) per path and concurrency.\n\n",
		replicasUsage, b.cfg.rounds, b.cfg.window, b.cfg.warmup)
	fmt.Fprintf(&w, "Two replicas on one PostgreSQL, an ngrok-go agent on replica A with an https endpoint; requests over HTTPS (HTTP/1.1, keep-alive) to A (local) and to B (forwarded over the link to A). Ratios are paired: each round's forwarded figure against the local one of the same round, median over the rounds.\n\n")
	fmt.Fprintf(&w, "| concurrency | local req/s | forwarded req/s | rate (target ≥ %.0f%%) | local p99 | forwarded p99 | p99 (target ≤ %.1f×) | CPU per request, local (A, agent) | forwarded (B, A, agent) |\n|---|---|---|---|---|---|---|---|---|\n",
		replicasRateTarget*100, replicasP99Target)
	for _, c := range b.cfg.conc {
		local, fwd := b.rounds[resultKey{pathLocal, c}], b.rounds[resultKey{pathForwarded, c}]
		var rate, p99 []float64
		for i := range min(len(local), len(fwd)) {
			if local[i].rps() > 0 && local[i].p99 > 0 {
				rate = append(rate, fwd[i].rps()/local[i].rps())
				p99 = append(p99, float64(fwd[i].p99)/float64(local[i].p99))
			}
		}
		ls, fs := b.stats(b.paths[0], c), b.stats(b.paths[1], c)
		fmt.Fprintf(&w, "| %d | %.0f | %.0f | %.0f%% %s | %s | %s | %.2f× %s | %s | %s |\n", c, ls.rps, fs.rps,
			median(rate)*100, mark(median(rate) >= replicasRateTarget), secs(ls.p99), secs(fs.p99),
			median(p99), mark(median(p99) <= replicasP99Target), cpuList(ls.cpu), cpuList(fs.cpu))
		if ls.errors+fs.errors > 0 {
			fmt.Fprintf(&w, "\nErrors at c=%d: local %d (%s), forwarded %d (%s)\n\n", c, ls.errors, ls.firstErr, fs.errors, fs.firstErr)
		}
	}
	if len(b.bulkCPU) > 0 {
		fmt.Fprintf(&w, "\n| bulk transfer, %s (median of %d) | local MB/s | forwarded MB/s | ratio (target ≥ %.0f%%) | CPU per GB, local (A, agent) | forwarded (B, A, agent) |\n|---|---|---|---|---|---|\n",
			fmtSize(b.cfg.bulk), b.bulkRounds, replicasBulkTarget*100)
		for _, dir := range []string{"download", "upload"} {
			l, f := b.bulkCPU[bulkKey{pathLocal, dir}], b.bulkCPU[bulkKey{pathForwarded, dir}]
			var lm, fm, ratio []float64
			for i := range min(len(l), len(f)) {
				lm, fm = append(lm, l[i].t.mbps()), append(fm, f[i].t.mbps())
				if l[i].t.mbps() > 0 {
					ratio = append(ratio, f[i].t.mbps()/l[i].t.mbps())
				}
			}
			fmt.Fprintf(&w, "| %s | %.0f | %.0f | %.0f%% %s | %s | %s |\n", dir, median(lm), median(fm), median(ratio)*100,
				mark(median(ratio) >= replicasBulkTarget), cpuPerGB(l), cpuPerGB(f))
		}
	}
	if len(b.memory) > 0 {
		fmt.Fprintf(&w, "\n| memory per open stream (Go heap and stacks in use, grown with %d connections held open) | replica A | replica B | per stream |\n|---|---|---|---|\n", b.memory[0].n)
		for _, m := range b.memory {
			fmt.Fprintf(&w, "| %s | %s | %s | %s |\n", m.path, fmtBytes(m.bytes["A"]), fmtBytes(m.bytes["B"]),
				fmtBytes((m.bytes["A"]+m.bytes["B"])/int64(m.n)))
		}
	}
	writeNotes(&w, b.notes)
	return w.String()
}

// cpuPerGB is each middle process's CPU time per GB moved, summed over the samples.
func cpuPerGB(samples []bulkSample) string {
	if len(samples) == 0 {
		return ""
	}
	cpu := make([]time.Duration, len(samples[0].cpu))
	var bytes int64
	for _, s := range samples {
		bytes += s.t.bytes
		for i, c := range s.cpu {
			cpu[i] += c
		}
	}
	for i := range cpu {
		cpu[i] = time.Duration(float64(cpu[i]) / (float64(bytes) / 1e9))
	}
	return cpuList(cpu)
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func cpuList(cpu []time.Duration) string {
	parts := make([]string, len(cpu))
	for i, c := range cpu {
		parts[i] = fmtDur(c)
	}
	return strings.Join(parts, ", ")
}

// fmtBytes renders a byte count in KiB or MiB.
func fmtBytes(n int64) string {
	if n >= 10<<20 || n <= -10<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}
