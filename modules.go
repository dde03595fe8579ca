package edgeplane

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Module is one entry of the module table: a configuration block stored as a field of its parent
// document (an edge or a route). PUT on its path replaces the field inside an update of the
// parent, GET reads it, DELETE sets it to null; create and PATCH bodies of the parent carry the
// same blocks. Adding a module is one entry plus its request and response types.
type Module struct {
	// Parent is the collection whose documents hold the module.
	Parent *Resource
	// Name is the JSON field in the parent and the last segment of the module's path.
	Name string
	// NewRequest returns an empty request body (the "mutate" shape) for PUT.
	NewRequest func() ModuleRequest
	// Ops are the operations served on the module's path: OpUpdate (PUT), OpGet and OpDelete.
	Ops Ops
	// Response is the module's response type, for the generated OpenAPI document; nil for
	// delete-only entries.
	Response reflect.Type
	// get returns the configured module (a pointer to its response shape) or nil.
	get func(Document) any
	// set stores a built module, or clears the field when v is nil.
	set func(doc Document, v any)
}

// Get returns the module configured on doc, or nil.
func (m *Module) Get(doc Document) any { return m.get(doc) }

// Set replaces the module on doc; nil removes it.
func (m *Module) Set(doc Document, v any) { m.set(doc, v) }

// ModuleRequest is the request shape of a module. Validate checks the body alone; Build resolves
// references through op (each must exist in the caller's account) and returns the response shape
// that is stored in the parent.
type ModuleRequest interface {
	Validate() error
	Build(op *Op) (any, error)
}

// ModuleChecker is implemented by parent documents with rules across their modules (only one of
// OAuth, SAML and OIDC on a route; no edge-only modules when TLS passes through). It runs after
// every change of a module, whichever way the change came.
type ModuleChecker interface {
	CheckModules() error
}

// moduleOn declares a module stored in the field of the parent's documents that field points at.
// P is the parent document type and R the module's response type.
func moduleOn[P any, R any](parent *Resource, newReq func() ModuleRequest, field func(*P) **R) *Module {
	name := jsonNameOf(field)
	return &Module{
		Parent: parent, Name: name, NewRequest: newReq, Ops: OpUpdate | OpGet | OpDelete,
		Response: reflect.TypeFor[R](),
		get: func(d Document) any {
			if v := *field(any(d).(*P)); v != nil {
				return v
			}
			return nil
		},
		set: func(d Document, v any) {
			if v == nil {
				*field(any(d).(*P)) = nil
				return
			}
			*field(any(d).(*P)) = v.(*R)
		},
	}
}

// jsonNameOf returns the JSON name of the document field that field points to: a module is named
// by its field, so the table line, the document and the create/PATCH bodies (whose module fields
// are found by the same JSON name) cannot disagree on a string. It panics at start-up when the
// accessor does not return a field of P.
func jsonNameOf[P any, R any](field func(*P) **R) string {
	var p P
	want := reflect.ValueOf(field(&p)).Pointer()
	v := reflect.ValueOf(&p).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		if f.IsExported() && !f.Anonymous && v.FieldByIndex(f.Index).Addr().Pointer() == want && f.Type == reflect.TypeFor[*R]() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				return name
			}
		}
	}
	panic(fmt.Sprintf("edgeplane: the module accessor of %v does not return a JSON field of it", v.Type()))
}

// deleteOnly declares a part of a parent that can only be detached with DELETE on its path, like
// the certificate of a reserved domain.
func deleteOnly[P any](parent *Resource, name string, present func(*P) bool, clear func(*P)) *Module {
	return &Module{
		Parent: parent, Name: name, Ops: OpDelete,
		get: func(d Document) any {
			if present(any(d).(*P)) {
				return true
			}
			return nil
		},
		set: func(d Document, v any) {
			if v != nil {
				panic("edgeplane: " + name + " can only be detached")
			}
			clear(any(d).(*P))
		},
	}
}

// ModulesOf returns the module table entries of a parent collection, in table order; the
// slice is shared and must not be changed.
func ModulesOf(parent *Resource) []*Module {
	modulesByParent.once.Do(func() {
		modulesByParent.m = map[*Resource][]*Module{}
		for _, m := range Modules {
			modulesByParent.m[m.Parent] = append(modulesByParent.m[m.Parent], m)
		}
	})
	return modulesByParent.m[parent]
}

// modulesByParent indexes the module table by parent once: the data plane asks for a route's
// modules for every route of every rebuild (10% of a rebuild's time at 100,000 routes when
// each call filtered the whole table). The slices are shared and must not be changed.
var modulesByParent struct {
	once sync.Once
	m    map[*Resource][]*Module
}

func moduleNamed(parent *Resource, name string) *Module {
	for _, m := range Modules {
		if m.Parent == parent && m.Name == name {
			return m
		}
	}
	return nil
}

// SetModule validates and builds req, stores it as module m of doc and checks the parent's rules
// across modules. It is what a module PUT runs inside the update of the parent.
func SetModule(op *Op, m *Module, doc Document, req ModuleRequest) (any, error) {
	v, err := req.Build(op)
	if err != nil {
		return nil, err // the body is the module: its fields are named as they are
	}
	if err := keepSecrets(m, doc, v); err != nil {
		return nil, err
	}
	m.Set(doc, v)
	return v, checkModules(doc)
}

// ClearModule removes module m from doc; it is not found when it is not configured.
func ClearModule(m *Module, doc Document) error {
	if m.Get(doc) == nil {
		return NotFound()
	}
	m.Set(doc, nil)
	return checkModules(doc)
}

// keepSecrets lets a newly built module keep the hidden secrets of the one it replaces on doc
// (see SecretKeeper).
func keepSecrets(m *Module, doc Document, built any) error {
	if k, ok := built.(SecretKeeper); ok {
		return k.KeepSecrets(m.Get(doc))
	}
	return nil
}

func checkModules(doc Document) error {
	if c, ok := doc.(ModuleChecker); ok {
		return c.CheckModules()
	}
	return nil
}

// applyModules sets every module given in a create or PATCH body of the parent: fields of body
// whose type is a ModuleRequest are modules, named by their JSON tag. Modules not given are left
// as they are; PATCH never removes one.
func applyModules(op *Op, parent *Resource, doc Document, body any) error {
	for _, f := range moduleFields(reflect.TypeOf(body)) {
		v := reflect.ValueOf(body).Elem().FieldByIndex(f.index)
		if v.IsNil() {
			continue
		}
		m := moduleNamed(parent, f.name)
		if m == nil {
			panic("edgeplane: no module " + f.name + " on " + parent.Kind + " in the module table")
		}
		built, err := v.Interface().(ModuleRequest).Build(op)
		if err == nil {
			err = keepSecrets(m, doc, built)
		}
		if err != nil {
			return prefixField(err, f.name)
		}
		m.Set(doc, built)
	}
	return checkModules(doc)
}

// validateModules runs Validate of every module given in a create or PATCH body.
func validateModules(body any) error {
	for _, f := range moduleFields(reflect.TypeOf(body)) {
		v := reflect.ValueOf(body).Elem().FieldByIndex(f.index)
		if v.IsNil() {
			continue
		}
		if err := v.Interface().(ModuleRequest).Validate(); err != nil {
			return prefixField(err, f.name)
		}
	}
	return nil
}

// prefixField puts the module's name in front of the field an error names, so a rule failing
// inside "backend" in an edge body says "backend.backend_id".
func prefixField(err error, module string) error {
	e, ok := err.(*Error)
	if !ok || e.Field == "" || strings.HasPrefix(e.Field, module+".") {
		return err
	}
	c := *e
	c.Msg = module + "." + e.Msg
	c.Field = module + "." + e.Field
	return &c
}

type moduleField struct {
	name  string
	index []int
}

var (
	moduleFieldCache sync.Map
	moduleRequestT   = reflect.TypeFor[ModuleRequest]()
)

// moduleFields lists, once per type, the fields of a request struct that hold module requests,
// also inside embedded structs (a route body embeds its authentication modules, routeAuthBody),
// whose fields JSON flattens into the body.
func moduleFields(t reflect.Type) []moduleField {
	if v, ok := moduleFieldCache.Load(t); ok {
		return v.([]moduleField)
	}
	var out []moduleField
	var walk func(st reflect.Type, index []int)
	walk = func(st reflect.Type, index []int) {
		for i := range st.NumField() {
			f := st.Field(i)
			idx := append(slices.Clip(index), i)
			switch {
			case f.Type.Kind() == reflect.Pointer && f.Type.Implements(moduleRequestT):
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				out = append(out, moduleField{name: name, index: idx})
			case f.Anonymous && f.Type.Kind() == reflect.Struct:
				walk(f.Type, idx)
			}
		}
	}
	walk(t.Elem(), nil)
	moduleFieldCache.Store(t, out)
	return out
}

// enabled is the value of an optional "enabled": absent or null means true.
func enabled(b *bool) bool { return b == nil || *b }
