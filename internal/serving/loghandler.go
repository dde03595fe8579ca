package serving

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// NewLogger makes the process logger of a server: log/slog's text handler (format "text",
// logfmt-like) or JSON handler ("json") writing to w, at level and above. Durations are written
// as Go durations ("15s") in both formats; slog's JSON handler would write nanoseconds.
//
// Its records are written exactly as slog's own handler writes them, but the records a busy
// server writes most, a request line for every request, are written without it: formatting a
// request line through slog was about a tenth of the CPU of an API GET (measured with callgrind,
// docs/performance.md), most of it spent asking of every character whether it needs quoting
// and formatting the time. Records with anything else in them (an error, a group, a string
// outside printable ASCII, attributes added with With) go through slog's handler.
func NewLogger(w *LogWriter, format string, level slog.Leveler) (*slog.Logger, error) {
	h, err := newLogHandler(w, format, level)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

func newLogHandler(w *LogWriter, format string, level slog.Leveler) (*logHandler, error) {
	opts := &slog.HandlerOptions{Level: level}
	h := &logHandler{w: w}
	switch format {
	case "text":
		h.Handler = slog.NewTextHandler(w, opts)
	case "json":
		opts.ReplaceAttr = readableDuration
		h.Handler, h.json = slog.NewJSONHandler(w, opts), true
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
	return h, nil
}

// readableDuration is a slog ReplaceAttr that writes a duration as its String form. It changes
// nothing else, which the fast path of logHandler relies on: it takes no durations.
func readableDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// logHandler is slog's handler with a fast path for records whose every value is a plain
// string, a number or a bool (see NewLogger). WithAttrs and WithGroup return slog's own
// handler, so derived loggers write through it. Both write to the same LogWriter, whose writes
// are whole lines, each in one call, so lines of the two never interleave.
type logHandler struct {
	slog.Handler
	w    *LogWriter
	json bool
	// second is the last second a record was written in, formatted: every record of that second
	// starts with it.
	second atomic.Pointer[formattedSecond]
	// bufs holds the buffers lines are formatted in.
	bufs sync.Pool
}

// formattedSecond is the formatted date and time of one second, and the zone suffix, in one
// location: "2006-01-02T15:04:05" and "Z" or "+07:00".
type formattedSecond struct {
	unix         int64
	loc          *time.Location
	prefix, zone []byte
}

// Handle writes r, on the fast path when it can.
func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	bp, _ := h.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	line, ok := h.appendRecord((*bp)[:0], r)
	var err error
	if ok {
		_, err = h.w.Write(line)
	} else {
		err = h.Handler.Handle(ctx, r)
	}
	if cap(line) <= 16<<10 { // a huge line's buffer is left to the collector
		*bp = line
		h.bufs.Put(bp)
	}
	return err
}

// appendRecord appends the line slog's handler would write for r; ok is false, with dst in any
// state, when r is not one the fast path takes.
func (h *logHandler) appendRecord(dst []byte, r slog.Record) (_ []byte, ok bool) {
	if dst, ok = h.appendHead(dst, r.Time, r.Level, r.Message); !ok {
		return dst, false
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "" {
			ok = false
			return false
		}
		if h.json {
			dst = append(dst, ',')
		} else {
			dst = append(dst, ' ')
		}
		if dst, ok = h.appendString(dst, a.Key); !ok {
			return false
		}
		if h.json {
			dst = append(dst, ':')
		} else {
			dst = append(dst, '=')
		}
		dst, ok = h.appendValue(dst, a.Value)
		return ok
	})
	if !ok {
		return dst, false
	}
	return h.appendEnd(dst), true
}

// appendHead appends what slog's handler writes of a record before its attributes: the time,
// the level and the message.
func (h *logHandler) appendHead(dst []byte, t time.Time, level slog.Level, msg string) (_ []byte, ok bool) {
	if t.IsZero() {
		return dst, false // slog leaves the time out; rare enough to leave to it
	}
	if h.json {
		dst = append(dst, `{"time":"`...)
	} else {
		dst = append(dst, "time="...)
	}
	if dst, ok = h.appendTime(dst, t); !ok {
		return dst, false
	}
	if h.json {
		dst = append(dst, `","level":"`...)
		dst = append(dst, level.String()...)
		dst = append(dst, `","msg":`...)
	} else {
		dst = append(dst, " level="...)
		dst = append(dst, level.String()...)
		dst = append(dst, " msg="...)
	}
	return h.appendString(dst, msg)
}

// appendEnd ends a line.
func (h *logHandler) appendEnd(dst []byte) []byte {
	if h.json {
		dst = append(dst, '}')
	}
	return append(dst, '\n')
}

// RequestLine is the line a server writes for every request it answers, at level Info: the
// record with these attributes, in this order, with these keys.
type RequestLine struct {
	Time        time.Time
	Msg         string
	OperationID string  // "operation_id"
	Method      string  // "method"
	Route       string  // "route"
	Status      int     // "status"
	DurationMS  float64 // "duration_ms"
	AccountID   string  // "account_id"
}

// Record is the line as a slog record, for a handler that cannot write it directly.
func (l *RequestLine) Record() slog.Record {
	r := slog.NewRecord(l.Time, slog.LevelInfo, l.Msg, 0)
	r.AddAttrs(slog.String("operation_id", l.OperationID), slog.String("method", l.Method), slog.String("route", l.Route),
		slog.Int("status", l.Status), slog.Float64("duration_ms", l.DurationMS), slog.String("account_id", l.AccountID))
	return r
}

// requestKeys are the request line's keys as the fast path writes them before each value, in
// the text and the JSON format.
var requestKeys = [2][6]string{
	{" operation_id=", " method=", " route=", " status=", " duration_ms=", " account_id="},
	{`,"operation_id":`, `,"method":`, `,"route":`, `,"status":`, `,"duration_ms":`, `,"account_id":`},
}

// LogRequest writes l exactly as Handle writes l.Record(), without making the record: a record
// holds five attributes in place and the request line has six, so the record allocated, and
// visiting its attributes one by one, keys and all, was most of what the fast path cost. It
// reports false, having written nothing, when a value is not one the fast path takes; the
// caller then hands l.Record() to Handle. Whether level Info is enabled is the caller's to ask.
func (h *logHandler) LogRequest(l *RequestLine) bool {
	bp, _ := h.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	line, ok := h.appendRequest((*bp)[:0], l)
	if ok {
		_, _ = h.w.Write(line)
	}
	if cap(line) <= 16<<10 {
		*bp = line
		h.bufs.Put(bp)
	}
	return ok
}

// appendRequest appends the line of l; ok is false when the fast path does not take it.
func (h *logHandler) appendRequest(dst []byte, l *RequestLine) (_ []byte, ok bool) {
	keys := &requestKeys[0]
	if h.json {
		keys = &requestKeys[1]
	}
	if dst, ok = h.appendHead(dst, l.Time, slog.LevelInfo, l.Msg); !ok {
		return dst, false
	}
	for i, v := range [...]string{l.OperationID, l.Method, l.Route} {
		dst = append(dst, keys[i]...)
		if dst, ok = h.appendString(dst, v); !ok {
			return dst, false
		}
	}
	dst = append(dst, keys[3]...)
	dst = strconv.AppendInt(dst, int64(l.Status), 10)
	dst = append(dst, keys[4]...)
	if dst, ok = h.appendValue(dst, slog.Float64Value(l.DurationMS)); !ok {
		return dst, false
	}
	dst = append(dst, keys[5]...)
	if dst, ok = h.appendString(dst, l.AccountID); !ok {
		return dst, false
	}
	return h.appendEnd(dst), true
}

// appendValue appends a value of the kinds the fast path takes, as slog's handler does.
func (h *logHandler) appendValue(dst []byte, v slog.Value) ([]byte, bool) {
	switch v.Kind() {
	case slog.KindString:
		return h.appendString(dst, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(dst, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(dst, v.Uint64(), 10), true
	case slog.KindBool:
		return strconv.AppendBool(dst, v.Bool()), true
	case slog.KindFloat64:
		f := v.Float64()
		if !h.json {
			return strconv.AppendFloat(dst, f, 'g', -1, 64), true
		}
		// slog's JSON handler writes a float as encoding/json does: in 'f' form between 1e-6
		// and 1e21 (and for zero); the rest, and NaN and infinities, are left to it.
		if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21 || math.IsNaN(a)) {
			return dst, false
		}
		return strconv.AppendFloat(dst, f, 'f', -1, 64), true
	}
	return dst, false
}

// appendString appends s as slog's handler writes a string (a key, the message or a value)
// when every byte of it is printable ASCII; ok is false otherwise.
func (h *logHandler) appendString(dst []byte, s string) ([]byte, bool) {
	var class byte
	if h.json {
		for i := 0; i < len(s); i++ {
			class |= jsonClass[s[i]]
		}
		if class != 0 {
			return dst, false
		}
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"'), true
	}
	for i := 0; i < len(s); i++ {
		class |= textClass[s[i]]
	}
	switch {
	case class&other != 0:
		return dst, false
	case len(s) > 0 && class&quoted == 0:
		return append(dst, s...), true
	case class&escaped != 0:
		return strconv.AppendQuote(dst, s), true
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), true
}

// What a byte asks of a string slog writes: to be left to slog (outside printable ASCII), to be
// quoted, to be escaped inside quotes.
const (
	other byte = 1 << iota
	quoted
	escaped
)

// textClass and jsonClass say what each byte asks of a string in the text and JSON formats. In
// text a string is quoted when it is empty or holds a space, '=' or '"'; quoting escapes '"'
// and '\'. In JSON every printable ASCII byte stands for itself but '"' and '\'.
var textClass, jsonClass = func() (text, json [256]byte) {
	for c := range 256 {
		if c < 0x20 || c > 0x7e {
			text[c], json[c] = other, other
		}
	}
	text[' '], text['='], text['"'], text['\\'] = quoted, quoted, quoted|escaped, escaped
	json['"'], json['\\'] = other, other
	return
}()

// appendTime appends t as slog's handler writes a record's time: RFC 3339 in t's location, with
// milliseconds in text and nanoseconds (trailing zeros dropped) in JSON. Years slog writes
// otherwise (or refuses, in JSON) are left to it.
func (h *logHandler) appendTime(dst []byte, t time.Time) ([]byte, bool) {
	unix, loc := t.Unix(), t.Location()
	fs := h.second.Load()
	if fs == nil || fs.unix != unix || fs.loc != loc {
		if y := t.Year(); y < 1000 || y > 9999 {
			return dst, false
		}
		sec := t.Truncate(time.Second)
		fs = &formattedSecond{unix: unix, loc: loc,
			prefix: sec.AppendFormat(nil, "2006-01-02T15:04:05"), zone: sec.AppendFormat(nil, "Z07:00")}
		h.second.Store(fs)
	}
	dst = append(dst, fs.prefix...)
	ns := t.Nanosecond()
	if !h.json {
		dst = append(dst, '.')
		dst = appendDigits(dst, ns/1e6, 3)
	} else if ns != 0 {
		// RFC3339Nano: nine digits, trailing zeros dropped.
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		dst = append(dst, '.')
		dst = appendDigits(dst, ns, digits)
	}
	return append(dst, fs.zone...), true
}

// appendDigits appends v in exactly n decimal digits, with leading zeros.
func appendDigits(dst []byte, v, n int) []byte {
	var b [9]byte
	for i := n - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[:n]...)
}
