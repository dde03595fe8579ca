package enforce

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// MaxEventMessage bounds one message of a server-sent event stream that
// on_event_stream_message rules rewrite: messages are rewritten one by one as they pass (the
// stream is never held whole), and one message is held until its blank line arrives. A message
// past the bound cannot be rewritten, and passing it on unchanged would carry what the policy
// meant to replace, so the stream is cut there (the connection's stream is reset).
const MaxEventMessage = 256 << 10

// eventRule is an on_event_stream_message rule made ready: its sse-find-replace actions'
// replacements, run on each message of the stream its expressions admit.
type eventRule struct {
	rule    *trafficpolicy.Rule
	actions [][]replacement
}

// buildEvents makes the on_event_stream_message rules ready: sse-find-replace is the phase's
// action; any other fails the build, naming it.
func (tp *TrafficPolicy) buildEvents(rules []*trafficpolicy.Rule) error {
	for _, r := range rules {
		er := eventRule{rule: r}
		for _, a := range r.Actions {
			if a.Type != "sse-find-replace" || !trafficpolicy.Implemented(a.Type) {
				return notApplied(a, trafficpolicy.OnEventStreamMessage)
			}
			cfg, err := a.Decode()
			if err != nil {
				return err
			}
			rps, err := compileReplacements(a, cfg.(*trafficpolicy.FindReplaceConfig))
			if err != nil {
				return err
			}
			er.actions = append(er.actions, rps)
		}
		tp.events = append(tp.events, er)
	}
	return nil
}

// isEventStream reports whether a response is a server-sent event stream.
func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// eventRewriter rewrites an event stream message by message: bytes are held until a message's
// blank line, then the message goes out rewritten and flushed.
type eventRewriter struct {
	w      *policyWriter
	vars   map[string]any
	buf    []byte
	failed bool
}

// errEventRewrite answers writes after a stream was cut.
var errEventRewrite = errors.New("an event stream message could not be rewritten")

// Write takes the stream's bytes; a message that cannot be rewritten cuts the stream: the
// handler is aborted, so the client sees the connection's stream end without a complete
// message (whatever the upstream's copy loop makes of a write error).
func (e *eventRewriter) Write(p []byte) (int, error) {
	if e.failed {
		return 0, errEventRewrite
	}
	e.buf = append(e.buf, p...)
	for {
		end, next := messageEnd(e.buf)
		if end < 0 {
			break
		}
		if end > MaxEventMessage {
			e.cut()
		}
		out, err := e.rewrite(e.buf[:end])
		if err != nil {
			e.cut()
		}
		if _, err := e.w.out(out); err != nil {
			return 0, err
		}
		e.buf = append(e.buf[:0], e.buf[next:]...)
	}
	if len(e.buf) > MaxEventMessage {
		e.cut()
	}
	return len(p), nil
}

// cut ends the stream unfinished.
func (e *eventRewriter) cut() {
	e.failed = true
	e.buf = nil
	panic(http.ErrAbortHandler)
}

// finish passes on an unterminated last message rewritten (the stream ended without its blank
// line).
func (e *eventRewriter) finish() {
	if e.failed || len(e.buf) == 0 {
		return
	}
	if out, err := e.rewrite(e.buf); err == nil {
		_, _ = e.w.out(out)
	}
	e.buf = nil
}

// messageEnd finds the end of the first message in b (the index where its blank line starts)
// and where the next one begins; -1 when no message is complete.
func messageEnd(b []byte) (end, next int) {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' && b[i] != '\r' {
			continue
		}
		// A line ends at i; a message ends when the next line is empty.
		j := i + 1
		if b[i] == '\r' && j < len(b) && b[j] == '\n' {
			j++
		} else if b[i] == '\r' && j == len(b) {
			return -1, -1 // a \r that may yet be followed by \n
		}
		if j < len(b) && (b[j] == '\n' || b[j] == '\r') {
			k := j + 1
			if b[j] == '\r' {
				if k == len(b) {
					return -1, -1
				}
				if b[k] == '\n' {
					k++
				}
			}
			return i, k
		}
		if j == len(b) {
			return -1, -1
		}
		i = j - 1
	}
	return -1, -1
}

// rewrite applies the rules to one message (its lines, without the blank line) and returns it
// with its blank line. The data field is the message's data lines joined with newlines, as the
// event stream standard defines it; it is rewritten whole and written back one line per line of
// the result. The retry field is each retry line's value.
func (e *eventRewriter) rewrite(msg []byte) ([]byte, error) {
	lines := bytes.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' })
	var data [][]byte
	for _, l := range lines {
		if f, v := field(l); f == "data" {
			data = append(data, v)
		}
	}
	dataValue := bytes.Join(data, []byte("\n"))
	retry := map[int][]byte{}
	for _, er := range e.w.tp.events {
		ok, err := er.rule.Match(e.vars)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, rps := range er.actions {
			for i := range rps {
				f, err := rps[i].field.Render(e.vars)
				if err != nil {
					return nil, err
				}
				switch f {
				case "", "data":
					if data == nil {
						continue
					}
					if dataValue, err = rps[i].apply(e.vars, dataValue); err != nil {
						return nil, err
					}
				case "retry":
					for n, l := range lines {
						if name, v := field(l); name == "retry" {
							if old, ok := retry[n]; ok {
								v = old
							}
							if retry[n], err = rps[i].apply(e.vars, v); err != nil {
								return nil, err
							}
						}
					}
				default:
					return nil, fmt.Errorf("sse-find-replace: the field is %q, not data or retry", f)
				}
			}
		}
	}
	var out bytes.Buffer
	wroteData := false
	for n, l := range lines {
		name, _ := field(l)
		switch {
		case name == "data" && !wroteData:
			wroteData = true
			for d := range bytes.SplitSeq(dataValue, []byte("\n")) {
				out.WriteString("data: ")
				out.Write(d)
				out.WriteByte('\n')
			}
		case name == "data":
		case name == "retry" && retry[n] != nil:
			out.WriteString("retry: ")
			out.Write(retry[n])
			out.WriteByte('\n')
		default:
			out.Write(l)
			out.WriteByte('\n')
		}
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// field splits an event stream line into its field name and value (one leading space of the
// value dropped); a comment line has no name.
func field(l []byte) (string, []byte) {
	if len(l) > 0 && l[0] == ':' {
		return "", nil
	}
	name, v, found := bytes.Cut(l, []byte(":"))
	if !found {
		return string(l), nil
	}
	return string(name), bytes.TrimPrefix(v, []byte(" "))
}
