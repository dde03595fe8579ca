package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"

	ep "github.com/edgeplane/edgeplane"
)

// errorBody is the wire shape of every error.
type errorBody struct {
	ErrorCode  string            `json:"error_code"`
	StatusCode int               `json:"status_code"`
	Msg        string            `json:"msg"`
	Details    map[string]string `json:"details"`
}

func internalError() *ep.Error {
	return &ep.Error{Status: http.StatusInternalServerError, Code: ep.CodeInternal,
		Msg: "An internal error occurred; it has been logged with the operation id."}
}

// fail renders err. An *ep.Error is shown as it is; anything else is logged and becomes a 500
// that reveals nothing but the operation id.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *ep.Error
	if !errors.As(err, &e) {
		s.log.Error("internal error", "operation_id", opOf(r).id, "err", err)
		e = internalError()
	}
	details := map[string]string{"operation_id": opOf(r).id}
	if e.Field != "" {
		details["field"] = e.Field
	}
	s.writeJSON(w, e.Status, errorBody{ErrorCode: e.ErrorCode(), StatusCode: e.Status, Msg: e.Msg, Details: details})
}

// writeJSON renders v and sends it with the status; it returns the body's size.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) int {
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() { buf.Reset(); bufPool.Put(buf) }()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		s.log.Error("encode response", "err", err)
		status, buf = http.StatusInternalServerError, bytes.NewBufferString(`{"error_code":"ERR_NGROK_10000","status_code":500,"msg":"An internal error occurred.","details":{}}`)
	}
	s.writeBody(w, status, buf.Bytes())
	return buf.Len()
}

// encode renders v as writeJSON does, into a body of its own.
func (s *Server) encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeBody sends a rendered JSON body.
func (s *Server) writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = contentLength(len(body))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// contentLengths holds the Content-Length header values of bodies shorter than its length, each
// made on first use and shared by every response of that length after (headers are replaced,
// never changed in place, as with jsonContentType): a value and its slice were two allocations
// of every response.
var contentLengths [8 << 10]atomic.Pointer[[]string]

// contentLength is the Content-Length header value of a body of n bytes.
func contentLength(n int) []string {
	if n < 0 || n >= len(contentLengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := contentLengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	contentLengths[n].Store(&v)
	return v
}

// jsonContentType is the Content-Type of every JSON response, one slice for all: headers are
// replaced, never changed in place, and net/http copies them before it writes.
var jsonContentType = []string{"application/json"}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// resolve fills in the uri of a document and of every Ref inside it, from the base URL. Nothing
// of the kind is stored, so moving the server behind another address changes every uri at once.
func (s *Server) resolve(c *collection, parentID string, doc ep.Document) {
	m := doc.Base()
	m.URI = s.base + c.objectPath(parentID, m.ID)
	fillRefs(reflect.ValueOf(doc), s.base)
	if e, ok := doc.(ep.Embedder); ok && c.embeds != nil {
		for _, child := range e.Children() {
			s.resolve(c.embeds, m.ID, child)
		}
	}
}

var refType = reflect.TypeFor[ep.Ref]()

// hasRef caches, per type, whether a value of it can contain a Ref, so documents without any
// are not walked.
var hasRefCache sync.Map

func hasRef(t reflect.Type) bool {
	if v, ok := hasRefCache.Load(t); ok {
		return v.(bool)
	}
	hasRefCache.Store(t, false) // breaks cycles of recursive types
	found := false
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		found = hasRef(t.Elem())
	case reflect.Struct:
		if t == refType {
			found = true
			break
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && hasRef(f.Type) {
				found = true
				break
			}
		}
	}
	hasRefCache.Store(t, found)
	return found
}

func fillRefs(v reflect.Value, base string) {
	if !hasRef(v.Type()) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			fillRefs(v.Elem(), base)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			fillRefs(v.Index(i), base)
		}
	case reflect.Struct:
		if v.Type() == refType {
			if ref := v.Addr().Interface().(*ep.Ref); ref.ID != "" {
				if p := ep.PathOf(ref.ID); p != "" {
					ref.URI = base + p
				}
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillRefs(v.Field(i), base)
			}
		}
	}
}
