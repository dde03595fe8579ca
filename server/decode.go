package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	ep "github.com/edgeplane/edgeplane"
)

// decode reads a JSON object body into dst strictly: malformed JSON is 400 ERR_NGROK_213, a
// field dst does not have is 400 ERR_NGROK_214 naming it and the supported ones, a value of the
// wrong type is 400 ERR_NGROK_215 naming the field, and a body over the limit is 413. An empty
// body is an empty object. The id and edge_id that clients echo must equal the path's.
func (s *Server) decode(r *http.Request, dst any, pathID, pathEdgeID string) error {
	data, err := s.readBody(r)
	if err != nil {
		return err
	}
	if err := decodeStrict(data, dst); err != nil {
		return err
	}
	if e, ok := dst.(ep.Echoer); ok {
		id, edgeID := e.Echoed()
		if err := checkEcho("id", id, pathID); err != nil {
			return err
		}
		return checkEcho("edge_id", edgeID, pathEdgeID)
	}
	return nil
}

// readBody reads the request body up to the limit; an empty body is an empty object.
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, ep.Errorf(http.StatusRequestEntityTooLarge, ep.CodeBodyTooLarge,
				"The request body is larger than the limit of %d bytes.", tooBig.Limit)
		}
		return nil, ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body could not be read.")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	return data, nil
}

// decodeStrict decodes one JSON object into dst, refusing what strict JSON refuses: a body of
// null, unknown fields (also names that differ from a field's only in case), duplicate keys,
// trailing data, invalid UTF-8 and control characters in strings (see checkStrict).
func decodeStrict(data []byte, dst any) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body must be a JSON object, not null.")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, dst)
	}
	if _, err := dec.Token(); err != io.EOF {
		return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body has data after the JSON object.")
	}
	return checkStrict(data, shapeOf(reflect.TypeOf(dst)))
}

func checkEcho(field string, got *string, want string) error {
	if got == nil || *got == "" || *got == want {
		return nil
	}
	if want == "" {
		return ep.Invalid(ep.CodeInvalid, field, "must not be set here; it is assigned by the server")
	}
	return ep.Invalid(ep.CodeInvalid, field, "%q does not match %q in the request path", *got, want)
}

func decodeError(err error, dst any) error {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body is not valid JSON: %s (at byte %d).", syntax.Error(), syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body is not valid JSON: it ends too early.")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body must be a JSON object, not %s.", typ.Value)
		}
		field := jsonPath(typ.Field, reflect.TypeOf(dst))
		return ep.Invalid(ep.CodeInvalid, field, "must be %s, not %s", jsonKind(typ.Type), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		top := fieldsOf(reflect.TypeOf(dst))
		where := "; supported fields: "
		if slices.Contains(top, name) {
			// The decoder does not say where it met the field; one of the body's own names can
			// only be unknown inside one of its objects (a module, a provider, a setting).
			where = " inside one of the body's objects; the body's own fields are: "
		}
		return &ep.Error{Status: http.StatusBadRequest, Code: ep.CodeUnknownField, Field: name,
			Msg: "Unknown field " + quote(name) + where + strings.Join(top, ", ") + "."}
	}
	return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body is not valid JSON.")
}

// jsonKind names a Go type the way a JSON user thinks of it.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer in range"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a different type"
}

// jsonPath drops from a decoder's field path the Go names of embedded structs, which the JSON
// user never sees ("AnnotationFields.description" is "description").
func jsonPath(path string, t reflect.Type) string {
	embedded := embeddedNames(t)
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if !embedded[p] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

var embeddedCache sync.Map

// embeddedNames lists the type names of the anonymous struct fields anywhere inside t.
func embeddedNames(t reflect.Type) map[string]bool {
	if v, ok := embeddedCache.Load(t); ok {
		return v.(map[string]bool)
	}
	names := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				names[f.Name] = true
			}
			walk(f.Type)
		}
	}
	walk(t)
	embeddedCache.Store(t, names)
	return names
}

var fieldCache sync.Map

// fieldsOf lists the JSON field names a request type accepts, without the echoed id and edge_id.
func fieldsOf(t reflect.Type) []string {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]string)
	}
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := range t.NumField() {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("json"), ",")[0]
			switch {
			case f.Anonymous && tag == "":
				walk(f.Type)
			case tag == "-" || !f.IsExported() || tag == "id" || tag == "edge_id":
			case tag != "":
				names = append(names, tag)
			default:
				names = append(names, f.Name)
			}
		}
	}
	walk(t)
	sort.Strings(names)
	fieldCache.Store(t, names)
	return names
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
