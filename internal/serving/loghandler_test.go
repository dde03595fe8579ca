package serving

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// slogLine is the line slog's own handler writes for r, configured as NewLogger configures it.
func slogLine(t testing.TB, format string, r slog.Record) string {
	t.Helper()
	var b bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	var h slog.Handler
	if format == "json" {
		opts.ReplaceAttr = readableDuration
		h = slog.NewJSONHandler(&b, opts)
	} else {
		h = slog.NewTextHandler(&b, opts)
	}
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// ourLine is the line NewLogger's handler writes for r, and whether its fast path wrote it.
func ourLine(t testing.TB, format string, r slog.Record) (string, bool) {
	t.Helper()
	var b lockedBuffer
	w := NewLogWriter(&b)
	h, err := newLogHandler(w, format, slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	_, fast := h.appendRecord(nil, r)
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out, _ := b.snapshot()
	return out, fast
}

func record(tm time.Time, msg string, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(tm, slog.LevelInfo, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

// requestLine is a request record as server.observe writes it.
func requestLine(tm time.Time, method, route string, status int, ms float64, account string) slog.Record {
	return record(tm, "request", slog.String("operation_id", "op_3MjJAC1fCTi5BLJNgSmr6FUvWNZ"),
		slog.String("method", method), slog.String("route", route), slog.Int("status", status),
		slog.Float64("duration_ms", ms), slog.String("account_id", account))
}

// The request line, in both formats, is written by the fast path, byte for byte as slog writes
// it.
func TestRequestLineIsSlogs(t *testing.T) {
	tm := time.Date(2026, 11, 28, 9, 24, 57, 724_123_000, time.UTC)
	for _, format := range []string{"text", "json"} {
		for _, r := range []slog.Record{
			requestLine(tm, "GET", "GET /ip_policy_rules/{id}", 200, 0.075, "acct_3MjJAC1fCTi5BLJNgSmr6FUvWNZ"),
			requestLine(tm, "POST", "unmatched", 404, 12.5, ""),
			requestLine(tm.Add(-tm.Sub(tm.Truncate(time.Second))), "DELETE", "", 500, 0, ""),
		} {
			got, fast := ourLine(t, format, r)
			if want := slogLine(t, format, r); got != want {
				t.Errorf("%s:\n got %q\nwant %q", format, got, want)
			}
			if !fast {
				t.Errorf("%s: the request line %q was not written by the fast path", format, got)
			}
		}
	}
}

// LogRequest writes the request line as Handle writes its record, which is slog's line, and
// writes nothing, leaving it to Handle, when a value is one the fast path does not take.
func TestLogRequestIsSlogs(t *testing.T) {
	tm := time.Date(2026, 11, 28, 9, 24, 57, 724_123_000, time.UTC)
	lines := []RequestLine{
		{tm, "request", "op_3MjJAC1fCTi5BLJNgSmr6FUvWNZ", "GET", "GET /ip_policy_rules/{id}", 200, 0.075, "acct_3MjJAC1fCTi5BLJNgSmr6FUvWNZ"},
		{tm, "request", "op_x", "POST", "unmatched", 404, 12.5, ""},
		{tm.Truncate(time.Second), "request", "", "DELETE", "", 500, 0, ""},
		{tm, "request", "op_x", "GET", `a "quoted\ route`, 200, 1e-7, "a=b"},
		{tm, "request", "op_x", "GET", "ü", 200, 1, ""},          // not ASCII: left to slog
		{tm, "request", "op_x", "GET", "/", 200, math.NaN(), ""}, // NaN: left to slog's JSON handler
		{time.Time{}, "request", "op_x", "GET", "/", 200, 1, ""}, // no time: left to slog
	}
	for _, format := range []string{"text", "json"} {
		for _, l := range lines {
			var b lockedBuffer
			w := NewLogWriter(&b)
			h, err := newLogHandler(w, format, slog.LevelDebug)
			if err != nil {
				t.Fatal(err)
			}
			wrote := h.LogRequest(&l)
			if !wrote {
				if err := h.Handle(context.Background(), l.Record()); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			got, _ := b.snapshot()
			if want := slogLine(t, format, l.Record()); got != want {
				t.Errorf("%s, %+v (written by LogRequest: %v):\n got %q\nwant %q", format, l, wrote, got, want)
			}
			if _, fast := h.appendRecord(nil, l.Record()); wrote != fast {
				t.Errorf("%s, %+v: LogRequest wrote it %v, the record's fast path %v", format, l, wrote, fast)
			}
		}
	}
}

// Every string of one or two ASCII characters, as a key, a message and a value, in both
// formats: the fast path writes what slog writes, or leaves the record to slog.
func TestStringsAsSlogWritesThem(t *testing.T) {
	tm := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	var strs []string
	for c := 0; c < 0x80; c++ {
		strs = append(strs, string(rune(c)), "a"+string(rune(c))+"b", string(rune(c))+" ")
	}
	strs = append(strs, "", " ", "a b", `a\b`, `a"b`, `"`, `\`, "a=b", "ü", "é x", "\u2028", "\xff", "GET /x/{id}")
	fastSeen := 0
	for _, format := range []string{"text", "json"} {
		for _, s := range strs {
			for _, r := range []slog.Record{
				record(tm, s),
				record(tm, "m", slog.String(s, "v")),
				record(tm, "m", slog.String("k", s)),
			} {
				got, fast := ourLine(t, format, r)
				if want := slogLine(t, format, r); got != want {
					t.Errorf("%s, string %q:\n got %q\nwant %q", format, s, got, want)
				}
				if fast {
					fastSeen++
				}
			}
		}
	}
	if fastSeen < len(strs) {
		t.Errorf("the fast path wrote only %d of the records", fastSeen)
	}
}

// Numbers, bools and the kinds the fast path leaves to slog (durations, times, errors, groups,
// values that resolve themselves, empty attributes) come out as slog writes them.
func TestValuesAsSlogWritesThem(t *testing.T) {
	tm := time.Date(2026, 6, 30, 23, 59, 59, 999_999_999, time.UTC)
	attrs := []slog.Attr{
		slog.Int("i", 0), slog.Int("i", -42), slog.Int64("i", math.MinInt64), slog.Uint64("u", math.MaxUint64),
		slog.Bool("b", true), slog.Bool("b", false),
		slog.Duration("d", 1500*time.Millisecond), slog.Time("t", tm), slog.Any("err", io.EOF),
		slog.Group("g", slog.Int("a", 1)), slog.Group("", slog.Int("a", 1)), slog.Any("", nil), slog.Int("", 3),
		slog.Any("lv", slog.LevelWarn), slog.Any("bytes", []byte("x y")),
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.075, 0.001, 1e-6, 1e-7, 123456.789, 1e20, 1e21, 1e300,
		math.SmallestNonzeroFloat64, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN()} {
		attrs = append(attrs, slog.Float64("f", f))
	}
	for _, format := range []string{"text", "json"} {
		for _, a := range attrs {
			r := record(tm, "m", a)
			got, _ := ourLine(t, format, r)
			if want := slogLine(t, format, r); got != want {
				t.Errorf("%s, %v:\n got %q\nwant %q", format, a, got, want)
			}
		}
	}
}

// Times in other locations and years, levels other than INFO, and a record without a time.
func TestTimesAndLevelsAsSlogWritesThem(t *testing.T) {
	locs := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+30*60), time.FixedZone("west", -7*3600), time.FixedZone("zero", 0)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		locs = append(locs, ny)
	}
	var times []time.Time
	for _, loc := range locs {
		for _, ns := range []int{0, 1, 999, 1_000_000, 120_000_000, 999_999_999} {
			for _, y := range []int{1, 999, 1000, 2026, 9999, 10000} {
				times = append(times, time.Date(y, 3, 8, 7, 0, 0, ns, loc))
			}
		}
	}
	times = append(times, time.Now(), time.Time{})
	for _, format := range []string{"text", "json"} {
		for _, tm := range times {
			for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelInfo + 2} {
				r := slog.NewRecord(tm, lv, "m", 0)
				got, _ := ourLine(t, format, r)
				if want := slogLine(t, format, r); got != want {
					t.Errorf("%s, %v %v:\n got %q\nwant %q", format, tm, lv, got, want)
				}
			}
		}
	}
}

// The second a handler formatted last is not taken for another one, nor for the same second in
// another location.
func TestFormattedSecondFollowsTheClock(t *testing.T) {
	var b lockedBuffer
	w := NewLogWriter(&b)
	h, err := newLogHandler(w, "text", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	east := time.FixedZone("east", 3600)
	times := []time.Time{base, base.Add(500 * time.Millisecond), base.Add(time.Second), base.In(east), base.Add(time.Hour)}
	var want strings.Builder
	for _, tm := range times {
		r := slog.NewRecord(tm, slog.LevelInfo, "m", 0)
		want.WriteString(slogLine(t, "text", r))
		if err := h.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if got, _ := b.snapshot(); got != want.String() {
		t.Errorf("got\n%s\nwant\n%s", got, want.String())
	}
}

// Loggers derived with With and WithGroup write through slog's handler, into the same writer,
// and levels below the logger's are not written.
func TestDerivedLoggersAndLevels(t *testing.T) {
	var b lockedBuffer
	w := NewLogWriter(&b)
	log, err := NewLogger(w, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.With("component", "x").Info("with")
	log.WithGroup("g").Info("grouped", "k", 1)
	log.Info("plain", "k", "v")
	w.Close()
	got, _ := b.snapshot()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || strings.Contains(got, "hidden") || !strings.Contains(lines[0], `"component":"x","msg"`) &&
		!strings.Contains(lines[0], `"msg":"with","component":"x"`) || !strings.Contains(lines[1], `"g":{"k":1}`) ||
		!strings.HasSuffix(lines[2], `"msg":"plain","k":"v"}`) {
		t.Errorf("log:\n%s", got)
	}
	if _, err := NewLogger(w, "xml", slog.LevelInfo); err == nil {
		t.Error("format xml accepted")
	}
}

// BenchmarkRequestLine formats and writes one request line: slog's text handler against
// NewLogger's, both into a LogWriter that discards.
func BenchmarkRequestLine(b *testing.B) {
	r := requestLine(time.Now(), "GET", "GET /ip_policy_rules/{id}", 200, 0.075, "acct_3MjJAC1fCTi5BLJNgSmr6FUvWNZ")
	for _, format := range []string{"text", "json"} {
		b.Run("slog-"+format, func(b *testing.B) {
			w := NewLogWriter(io.Discard)
			defer w.Close()
			var h slog.Handler = slog.NewTextHandler(w, nil)
			if format == "json" {
				h = slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: readableDuration})
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Handle(context.Background(), r)
			}
		})
		b.Run("ours-"+format, func(b *testing.B) {
			w := NewLogWriter(io.Discard)
			defer w.Close()
			h, _ := newLogHandler(w, format, slog.LevelInfo)
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Handle(context.Background(), r)
			}
		})
	}
}
