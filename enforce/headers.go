package enforce

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Headers is the request_headers or response_headers module (and an agent bind's
// RequestHeaders or ResponseHeaders option): it removes the headers of its remove list, then
// sets those of its add list, replacing any value the message had. Names are matched without
// regard to case. A name added more than once (possible in a bind's option, not in the API's
// map) gets each value, in order.
//
// Request headers are edited before the request goes upstream, and edited again on the
// outgoing request after the proxy added its X-Forwarded-For, -Proto and -Host headers, so those
// can be removed or replaced too. Response headers are edited when the response's status is
// written (informational 1xx responses, such as a websocket's 101, pass untouched).
//
// Which headers may be named is the caller's rule (the API's validation and the bind option
// share edgeplane.FixedHeader); the constructors refuse only what would corrupt the message:
// empty names and names or values with control characters.
type Headers struct {
	response bool
	remove   []string
	set      []headerValues
}

// headerValues is one header the module sets: its canonical name and its values.
type headerValues struct {
	name   string
	values []string
}

// HeaderValue is one header to add: a name and its value.
type HeaderValue struct{ Name, Value string }

// NewRequestHeaders builds the request_headers stage.
func NewRequestHeaders(add []HeaderValue, remove []string) (*Headers, error) {
	return newHeaders(false, add, remove)
}

// NewResponseHeaders builds the response_headers stage.
func NewResponseHeaders(add []HeaderValue, remove []string) (*Headers, error) {
	return newHeaders(true, add, remove)
}

func newHeaders(response bool, add []HeaderValue, remove []string) (*Headers, error) {
	h := &Headers{response: response}
	for _, name := range remove {
		if err := checkHeaderText(name, true); err != nil {
			return nil, fmt.Errorf("remove %q: %w", name, err)
		}
		h.remove = append(h.remove, http.CanonicalHeaderKey(name))
	}
	at := map[string]int{}
	for _, a := range add {
		if err := checkHeaderText(a.Name, true); err != nil {
			return nil, fmt.Errorf("add %q: %w", a.Name, err)
		}
		if err := checkHeaderText(a.Value, false); err != nil {
			return nil, fmt.Errorf("add %q: the value: %w", a.Name, err)
		}
		name := http.CanonicalHeaderKey(a.Name)
		if i, ok := at[name]; ok {
			h.set[i].values = append(h.set[i].values, a.Value)
			continue
		}
		at[name] = len(h.set)
		h.set = append(h.set, headerValues{name: name, values: []string{a.Value}})
	}
	return h, nil
}

// checkHeaderText refuses an empty name and any control character but a value's tab, which
// would let a configuration split or forge header lines.
func checkHeaderText(s string, name bool) error {
	if name && s == "" {
		return errors.New("a header name cannot be empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < ' ' && !(c == '\t' && !name)) || c == 0x7f || (name && (c == ' ' || c == ':')) {
			return errors.New("it has characters not allowed there in an HTTP header")
		}
	}
	return nil
}

// Name is the module's name.
func (h *Headers) Name() string {
	if h.response {
		return "response_headers"
	}
	return "request_headers"
}

// apply edits a header map: removals first, then the additions.
func (h *Headers) apply(hdr http.Header) {
	for _, name := range h.remove {
		delete(hdr, name)
		for k := range hdr { // a map built by hand may hold a name in another case
			if strings.EqualFold(k, name) {
				delete(hdr, k)
			}
		}
	}
	for _, s := range h.set {
		for k := range hdr {
			if k != s.name && strings.EqualFold(k, s.name) {
				delete(hdr, k)
			}
		}
		hdr[s.name] = append([]string(nil), s.values...) // a copy: later stages may append to it
	}
}

// Wrap edits the request or the response.
func (h *Headers) Wrap(next http.Handler) http.Handler {
	if h.response {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&headerWriter{ResponseWriter: w, h: h}, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prev, _ := r.Context().Value(outboundKey{}).(func(http.Header))
		edit := h.apply
		if prev != nil {
			edit = func(hdr http.Header) { prev(hdr); h.apply(hdr) }
		}
		r = r.WithContext(context.WithValue(r.Context(), outboundKey{}, edit))
		r.Header = r.Header.Clone() // WithContext shares the map with the caller's request
		if r.Header == nil {
			r.Header = http.Header{}
		}
		h.apply(r.Header)
		next.ServeHTTP(w, r)
	})
}

type outboundKey struct{}

// EditOutbound applies the request header edits of the stages a request passed (kept in its
// context) to the header of the request as it leaves for the upstream, after the proxy added
// its own headers. A removed User-Agent stays absent rather than deleted: Go's transport would
// otherwise send its own.
func EditOutbound(ctx context.Context, hdr http.Header) {
	edit, _ := ctx.Value(outboundKey{}).(func(http.Header))
	if edit == nil {
		return
	}
	_, hadUA := hdr["User-Agent"]
	edit(hdr)
	if _, ok := hdr["User-Agent"]; hadUA && !ok {
		hdr["User-Agent"] = nil
	}
}

// headerWriter applies a response_headers stage when the final status is written.
type headerWriter struct {
	http.ResponseWriter
	h    *Headers
	done bool
}

func (w *headerWriter) WriteHeader(code int) {
	if !w.done && code >= 200 {
		w.done = true
		w.h.apply(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// FlushError sends what was written so far (the status and headers first), for streaming
// responses; http.ResponseController finds it.
func (w *headerWriter) FlushError() error {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for callers that use http.Flusher.
func (w *headerWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the writer underneath (hijacking for upgrades, deadlines).
func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
