package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// ms is n milliseconds.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestPercentile: nearest rank of sorted values, clamped to the ends; pct sorts a copy and is
// 0 for no values.
func TestPercentile(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, ms(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, ms(1)}, {0.01, ms(1)}, {0.5, ms(50)}, {0.99, ms(99)}, {0.999, ms(100)}, {1, ms(100)}} {
		if got := percentile(hundred, c.p); got != c.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile([]time.Duration{ms(7)}, 0.99); got != ms(7) {
		t.Errorf("one value: %v", got)
	}
	shuffled := []time.Duration{ms(5), ms(1), ms(4), ms(2), ms(3)}
	before := slices.Clone(shuffled)
	if got := pct(shuffled, 0.5); got != ms(3) {
		t.Errorf("pct(…, 0.5) = %v, want 3ms", got)
	}
	if !slices.Equal(shuffled, before) {
		t.Error("pct sorted its argument")
	}
	if pct(nil, 0.99) != 0 || maxDur(nil) != 0 || maxDur(shuffled) != ms(5) {
		t.Error("pct or maxDur of no values")
	}
}

// TestMedian: the middle value, or the mean of the two middle ones; 0 for none; the argument is
// left as it was.
func TestMedian(t *testing.T) {
	odd := []float64{3, 1, 2}
	if got := median(odd); got != 2 {
		t.Errorf("median(3,1,2) = %v", got)
	}
	if !slices.Equal(odd, []float64{3, 1, 2}) {
		t.Error("median sorted its argument")
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2) = %v, want 2.5", got)
	}
	if median(nil) != 0 {
		t.Error("median of nothing")
	}
}

// TestRatios: a round's rate; paired ratios are the medians of the per-round ratios, skipping a
// round whose reference measured nothing; statsOf gives the medians of rounds and the CPU per
// request over all of them.
func TestRatios(t *testing.T) {
	r := func(n int, elapsed, p99 time.Duration, cpu ...time.Duration) round {
		return round{n: n, elapsed: elapsed, p99: p99, p50: p99 / 2, cpu: cpu}
	}
	if got := r(500, time.Second, ms(1)).rps(); got != 500 {
		t.Errorf("rps = %v", got)
	}
	if got := (round{n: 5}).rps(); got != 0 {
		t.Errorf("rps without time = %v", got)
	}
	rs := []round{r(100, time.Second, ms(4)), r(300, time.Second, ms(2)), r(90, time.Second, ms(9))}
	refs := []round{r(200, time.Second, ms(2)), r(300, time.Second, ms(1)), {}}
	rate, p99 := pairedRatios(rs, refs)
	if rate != 0.75 || p99 != 2 { // (0.5, 1) and (2, 2); the third round has no reference
		t.Errorf("pairedRatios = %v, %v; want 0.75, 2", rate, p99)
	}
	st := statsOf([]round{r(100, time.Second, ms(4), ms(100)), r(300, time.Second, ms(2), ms(300)), r(200, time.Second, ms(6), ms(200))})
	if st.rps != 200 || st.p99 != ms(4).Seconds() || st.cpu != ms(1) {
		t.Errorf("statsOf = %+v; want 200 req/s, p99 4ms, 1ms of CPU per request", st)
	}
	if got := cpuPerRequest(r(4, time.Second, 0, ms(8))); got != ms(2) {
		t.Errorf("cpuPerRequest = %v", got)
	}
	if cpuPerRequest(round{}) != 0 {
		t.Error("cpuPerRequest of an empty round")
	}
}

// TestSampleAdd: rounds of a scenario merge into one sample whose percentiles are those of all
// their latencies, with its rate and CPU per request over the whole.
func TestSampleAdd(t *testing.T) {
	var s sample
	s.add(sample{n: 2, elapsed: time.Second, cpu: ms(4), peakRSS: 10, lat: []time.Duration{ms(3), ms(1)}, firstErr: "first"})
	s.add(sample{n: 2, elapsed: time.Second, cpu: ms(4), peakRSS: 30, errors: 1, lat: []time.Duration{ms(4), ms(2)}, firstErr: "second"})
	if s.n != 4 || s.errors != 1 || s.firstErr != "first" || s.peakRSS != 30 {
		t.Errorf("merged: %+v", s)
	}
	if s.p50 != ms(2) || s.p99 != ms(4) {
		t.Errorf("p50 %v p99 %v, want 2ms 4ms", s.p50, s.p99)
	}
	if s.rps() != 2 || s.cpuPerReq() != ms(2) {
		t.Errorf("rps %v CPU/req %v", s.rps(), s.cpuPerReq())
	}
}

// TestFormats: durations, sizes and byte counts render in the units the reports use, and a
// size the report writes reads back as the same size.
func TestFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{ms(12): "12.0ms", 1500 * time.Microsecond: "1.50ms", 250 * time.Microsecond: "250µs"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{2 << 30: "2 GiB", 3 << 20: "3 MiB", 1000: "1000 bytes"} {
		if got := fmtSize(n); got != want {
			t.Errorf("fmtSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := parseSize(fmtSize(n)); err != nil || back != n {
			t.Errorf("parseSize(%q) = %d, %v; want %d", fmtSize(n), back, err, n)
		}
	}
	if _, err := parseSize("65GiB"); err == nil {
		t.Error("a size over 64 GiB was read")
	}
	for n, want := range map[int64]string{1536: "1.5 KiB", 20 << 20: "20.0 MiB", -(20 << 20): "-20.0 MiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := cpuList([]time.Duration{ms(1), ms(20)}); got != "1.00ms, 20.0ms" {
		t.Errorf("cpuList = %q", got)
	}
}

// TestReportTable: a scenario's row shows its rate and p99 against its paired baseline (50%
// of the rate, twice the p99), and a baseline row shows none.
func TestReportTable(t *testing.T) {
	base := sample{n: 1000, elapsed: time.Second, p50: ms(1), p99: ms(2), cpu: ms(100), peakRSS: 64 << 20}
	b := &runner{cfg: config{window: time.Second, warmup: time.Second, rounds: 3}, rows: []row{
		{engine: "sqlite", server: "baseline", scenario: "get", family: "get", conc: 8, s: base},
		{engine: "sqlite", server: "edgeplane", scenario: "get", family: "get", conc: 8,
			s: sample{n: 500, elapsed: time.Second, p50: ms(2), p99: ms(4), cpu: ms(100), peakRSS: 32 << 20}, base: &base},
	}}
	out := b.report(time.Minute)
	for _, want := range []string{
		"## SQLite\n",
		"| baseline | get | 8 | 1000 | 1.00ms | 2.00ms | 100µs | 64 MB |  |  | 0 |\n",
		"| edgeplane | get | 8 | 500 | 2.00ms | 4.00ms | 200µs | 32 MB | 50% | 2.00× | 0 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PostgreSQL") {
		t.Error("a PostgreSQL table without PostgreSQL rows")
	}
}
