package server

import (
	"encoding"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	ep "github.com/edgeplane/edgeplane"
)

// The strict pass. encoding/json is lax where ngrok's API is not: it matches field names without
// regard to case ("DESCRIPTION" sets description), keeps the last of duplicate keys, decodes
// escaped NULs and other control characters into strings, and replaces invalid UTF-8 and lone
// surrogates with U+FFFD. checkStrict walks a body the standard decoder has already accepted (so
// it is valid JSON) once more and refuses each of those:
//
//   - a key that is not exactly a field name of the request type: 400 ERR_NGROK_214, naming it;
//   - a key twice in one object: 400 ERR_NGROK_213, naming it;
//   - invalid UTF-8 or a lone surrogate in a string or key: 400 ERR_NGROK_213;
//   - a control character in a string or key: 400 ERR_NGROK_215, naming the field. Tab, line
//     feed and carriage return are allowed, since PEM blocks, traffic policies and metadata are
//     multi-line text; fields that must be one line (description) refuse them in Validate.
//
// The pass allocates nothing for a body it accepts: keys are compared as bytes, and the path of a
// field is only built, from the innermost object outwards, on the way out with an error.

// shape is what the strict pass needs to know of a Go type: which keys its objects may have.
type shape struct {
	kind   shapeKind
	fields map[string]*shape // struct: exact JSON name → the field's shape
	names  []string          // struct: the JSON names, sorted (for messages)
	elem   *shape            // map values, slice and array elements
}

type shapeKind uint8

const (
	opaque   shapeKind = iota // anything: keys are not checked against names
	object                    // a struct: keys must be its JSON field names, exactly
	dict                      // a map: any keys
	sequence                  // a slice or an array
)

var (
	shapeCache      sync.Map // reflect.Type → *shape
	shapeMu         sync.Mutex
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeOf returns the shape of t, built once per type.
func shapeOf(t reflect.Type) *shape {
	if v, ok := shapeCache.Load(t); ok {
		return v.(*shape)
	}
	shapeMu.Lock()
	defer shapeMu.Unlock()
	building := map[reflect.Type]*shape{}
	s := buildShape(t, building)
	for bt, bs := range building {
		shapeCache.Store(bt, bs)
	}
	return s
}

func buildShape(t reflect.Type, building map[reflect.Type]*shape) *shape {
	if v, ok := shapeCache.Load(t); ok {
		return v.(*shape)
	}
	if s, ok := building[t]; ok {
		return s // a recursive type: its shape is being filled in
	}
	if t.Kind() == reflect.Pointer && !t.Implements(jsonUnmarshaler) && !t.Implements(textUnmarshaler) {
		return buildShape(t.Elem(), building)
	}
	s := &shape{}
	building[t] = s
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return s // decodes itself: opaque
	}
	switch t.Kind() {
	case reflect.Map:
		s.kind, s.elem = dict, buildShape(t.Elem(), building)
	case reflect.Slice, reflect.Array:
		s.kind, s.elem = sequence, buildShape(t.Elem(), building)
	case reflect.Struct:
		s.kind, s.fields = object, map[string]*shape{}
		for _, f := range jsonFields(t) {
			if _, taken := s.fields[f.name]; !taken {
				s.fields[f.name] = buildShape(f.typ, building)
				s.names = append(s.names, f.name)
			}
		}
		slices.Sort(s.names)
	}
	return s
}

type jsonField struct {
	name  string
	typ   reflect.Type
	depth int
}

// jsonFields lists the fields encoding/json decodes into a struct, shallowest first, with the
// fields of untagged embedded structs promoted as encoding/json promotes them.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Tag.Get("json") == "-" {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
				walk(ft, depth+1)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if tag == "" {
				tag = f.Name
			}
			out = append(out, jsonField{name: tag, typ: f.Type, depth: depth})
		}
	}
	walk(t, 0)
	slices.SortStableFunc(out, func(a, b jsonField) int { return a.depth - b.depth })
	return out
}

// strictError is a refusal of the strict pass while the path of the field is completed on the
// way out: path holds the keys from the innermost outwards.
type strictError struct {
	code int
	// path holds the names of the struct fields around the fault, innermost first: the field
	// is named as the request types name it ("request_headers.add"), without map keys or list
	// indexes, like the other validation errors.
	path []string
	what string // the refusal, after the field's name
	// names are the supported fields of the object of an unknown key.
	names []string
}

func (e *strictError) in(key []byte) *strictError {
	e.path = append(e.path, string(key))
	return e
}

// toError renders the refusal as the API's error.
func (e *strictError) toError() *ep.Error {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.path[i])
	}
	field := b.String()
	switch e.code {
	case ep.CodeUnknownField:
		name := e.path[0]
		msg := "Unknown field " + quote(field) + "; field names are case-sensitive"
		for _, n := range e.names {
			if strings.EqualFold(n, name) {
				msg += ": did you mean " + quote(n) + "?"
				break
			}
		}
		msg += " Supported fields here: " + strings.Join(e.names, ", ") + "."
		return &ep.Error{Status: http.StatusBadRequest, Code: e.code, Field: field, Msg: msg}
	case ep.CodeInvalid:
		return ep.Invalid(e.code, field, "%s", e.what)
	}
	msg := "The request body is not valid JSON: " + e.what
	if field != "" {
		msg += " (in " + quote(field) + ")"
	}
	return &ep.Error{Status: http.StatusBadRequest, Code: e.code, Field: field, Msg: msg + "."}
}

// checkStrict runs the strict pass over data, a valid JSON value, against the shape of the type
// it was decoded into.
func checkStrict(data []byte, s *shape) error {
	sc := scanner{data: data}
	if e := sc.value(s); e != nil {
		return e.toError()
	}
	return nil
}

// scanner walks valid JSON.
type scanner struct {
	data []byte
	pos  int
}

func (sc *scanner) skipSpace() {
	for sc.pos < len(sc.data) {
		switch sc.data[sc.pos] {
		case ' ', '\t', '\n', '\r':
			sc.pos++
		default:
			return
		}
	}
}

func (sc *scanner) value(s *shape) *strictError {
	sc.skipSpace()
	switch sc.data[sc.pos] {
	case '{':
		return sc.object(s)
	case '[':
		return sc.array(s)
	case '"':
		_, e := sc.str(false)
		return e
	}
	// A number, true, false or null: up to the next delimiter.
	for sc.pos < len(sc.data) {
		switch sc.data[sc.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return nil
		}
		sc.pos++
	}
	return nil
}

// object walks an object. Keys seen are kept as slices of the body (or, when escaped, their
// decoded text), compared linearly while there are few of them and through a map beyond that.
func (sc *scanner) object(s *shape) *strictError {
	sc.pos++ // {
	var (
		small [16][]byte
		seen  = small[:0]
		many  map[string]bool
	)
	for {
		sc.skipSpace()
		if sc.data[sc.pos] == '}' {
			sc.pos++
			return nil
		}
		key, e := sc.str(true)
		if e != nil {
			return e
		}
		if many != nil {
			if many[string(key)] {
				return duplicate(key)
			}
			many[string(key)] = true
		} else {
			for _, k := range seen {
				if string(k) == string(key) {
					return duplicate(key)
				}
			}
			if seen = append(seen, key); len(seen) > len(small) {
				many = make(map[string]bool, 2*len(seen))
				for _, k := range seen {
					many[string(k)] = true
				}
			}
		}
		var fs *shape
		switch {
		case s == nil:
		case s.kind == object:
			var ok bool
			if fs, ok = s.fields[string(key)]; !ok {
				return &strictError{code: ep.CodeUnknownField, path: []string{string(key)}, names: s.names}
			}
		case s.kind == dict:
			fs = s.elem
		}
		sc.skipSpace()
		sc.pos++ // :
		if e := sc.value(fs); e != nil {
			if s != nil && s.kind == object {
				return e.in(key)
			}
			return e
		}
		sc.skipSpace()
		if sc.data[sc.pos] == ',' {
			sc.pos++
		}
	}
}

func duplicate(key []byte) *strictError {
	return &strictError{code: ep.CodeBadJSON, what: "the key " + quote(string(key)) + " appears more than once in one object"}
}

func (sc *scanner) array(s *shape) *strictError {
	sc.pos++ // [
	var elem *shape
	if s != nil && s.kind == sequence {
		elem = s.elem
	}
	for {
		sc.skipSpace()
		if sc.data[sc.pos] == ']' {
			sc.pos++
			return nil
		}
		if e := sc.value(elem); e != nil {
			return e
		}
		sc.skipSpace()
		if sc.data[sc.pos] == ',' {
			sc.pos++
		}
	}
}

// str reads a string and, when text is set (for keys), returns its text: a slice of the body
// when it has no escapes, decoded otherwise (rare).
func (sc *scanner) str(text bool) ([]byte, *strictError) {
	sc.pos++ // "
	start, escaped := sc.pos, false
	for {
		c := sc.data[sc.pos]
		switch {
		case c == '"':
			raw := sc.data[start:sc.pos]
			sc.pos++
			if !escaped || !text {
				return raw, nil
			}
			var key string
			_ = json.Unmarshal(sc.data[start-1:sc.pos], &key)
			return []byte(key), nil
		case c == '\\':
			escaped = true
			if e := sc.escape(); e != nil {
				return nil, e
			}
		case c < utf8.RuneSelf:
			if c == 0x7f {
				return nil, control(rune(c))
			}
			sc.pos++ // raw C0 controls are not valid JSON: the decoder refused them already
		default:
			r, n := utf8.DecodeRune(sc.data[sc.pos:])
			if r == utf8.RuneError && n == 1 {
				return nil, &strictError{code: ep.CodeBadJSON, what: "it is not valid UTF-8"}
			}
			if r <= 0x9f { // C1 controls, U+0080–U+009F
				return nil, control(r)
			}
			sc.pos += n
		}
	}
}

// escape checks the escape sequence at pos and moves past it.
func (sc *scanner) escape() *strictError {
	switch sc.data[sc.pos+1] {
	case 'b':
		return control('\b')
	case 'f':
		return control('\f')
	case 'u':
	default: // \" \\ \/ \n \r \t
		sc.pos += 2
		return nil
	}
	r := hex4(sc.data[sc.pos+2 : sc.pos+6])
	sc.pos += 6
	switch {
	case utf16.IsSurrogate(r):
		if r < 0xdc00 && sc.pos+6 <= len(sc.data) && sc.data[sc.pos] == '\\' && sc.data[sc.pos+1] == 'u' {
			if low := hex4(sc.data[sc.pos+2 : sc.pos+6]); low >= 0xdc00 && low <= 0xdfff {
				sc.pos += 6
				return nil
			}
		}
		return &strictError{code: ep.CodeBadJSON, what: "it has a lone UTF-16 surrogate (\\u" + strconv.FormatInt(int64(r), 16) + ")"}
	case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r >= 0x7f && r <= 0x9f:
		return control(r)
	}
	return nil
}

// hex4 is the value of the four hexadecimal digits of a \u escape (valid: the decoder checked).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= 'a':
			c -= 'a' - 10
		case c >= 'A':
			c -= 'A' - 10
		default:
			c -= '0'
		}
		r = r<<4 | rune(c)
	}
	return r
}

func control(r rune) *strictError {
	return &strictError{code: ep.CodeInvalid, what: "must not contain control characters (found U+" + strings.ToUpper(strconv.FormatInt(int64(r)|0x10000, 16)[1:]) + ")"}
}

var moduleShapes sync.Map // reflect.Type → *shape

// moduleBodyShape is the shape of a module PUT body of module type t in any of its three forms:
// the module's own fields, the echoed id and edge_id, and the module wrapped in "module".
func moduleBodyShape(t reflect.Type) *shape {
	if v, ok := moduleShapes.Load(t); ok {
		return v.(*shape)
	}
	m := shapeOf(t)
	s := &shape{kind: object, fields: map[string]*shape{"id": {}, "edge_id": {}, "module": m}}
	for name, f := range m.fields {
		s.fields[name] = f
	}
	for name := range s.fields {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	moduleShapes.Store(t, s)
	return s
}
