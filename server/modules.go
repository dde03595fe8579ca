package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"sort"

	ep "github.com/edgeplane/edgeplane"
)

// registerModules serves PUT, GET and DELETE on <parent>/{id}/<module> for every entry of the
// module table.
func (s *Server) registerModules(collections map[*ep.Resource]*collection) {
	for _, m := range ep.Modules {
		c := collections[m.Parent]
		path := m.Parent.Path + "/{id}/" + m.Name
		if m.Ops.Has(ep.OpUpdate) {
			s.api(route{"PUT", path, ep.OpUpdate, c, m, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.putModule(w, r, c, m) })
		}
		if m.Ops.Has(ep.OpGet) {
			s.api(route{"GET", path, ep.OpGet, c, m, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.getModule(w, r, c, m) })
		}
		if m.Ops.Has(ep.OpDelete) {
			s.api(route{"DELETE", path, ep.OpDelete, c, m, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.deleteModule(w, r, c, m) })
		}
	}
}

func (s *Server) putModule(w http.ResponseWriter, r *http.Request, c *collection, m *ep.Module) error {
	parent, id := c.parentID(r), r.PathValue("id")
	req := m.NewRequest()
	if err := s.decodeModule(r, req, id, parent); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	var out any
	_, err := s.store.Update(r.Context(), callerOf(r), c.res, parent, id, func(op *ep.Op, doc ep.Document) error {
		v, err := ep.SetModule(op, m, doc, req)
		out = v
		return err
	})
	if err != nil {
		return err
	}
	c.sizes.forget(callerOf(r).AccountID) // the object grew or shrank by the module
	fillRefs(reflect.ValueOf(out), s.base)
	s.writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getModule(w http.ResponseWriter, r *http.Request, c *collection, m *ep.Module) error {
	doc, err := s.store.Get(r.Context(), callerOf(r).AccountID, c.res, c.parentID(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	out := m.Get(doc)
	if out == nil {
		return &ep.Error{Status: http.StatusNotFound, Code: ep.CodeNotFound,
			Msg: "Resource not found: no " + m.Name + " module is configured on " + r.PathValue("id") + "."}
	}
	fillRefs(reflect.ValueOf(out), s.base)
	s.writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteModule(w http.ResponseWriter, r *http.Request, c *collection, m *ep.Module) error {
	_, err := s.store.Update(r.Context(), callerOf(r), c.res, c.parentID(r), r.PathValue("id"), func(_ *ep.Op, doc ep.Document) error {
		return ep.ClearModule(m, doc)
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeModule accepts the three shapes clients send a module in: the bare module,
// {"module": {...}}, and {"id": ..., "edge_id": ..., "module": {...}}. The echoed ids must equal
// the path's; anything else beside "module" is an unknown field.
func (s *Server) decodeModule(r *http.Request, dst ep.ModuleRequest, pathID, pathEdgeID string) error {
	data, err := s.readBody(r)
	if err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return decodeError(err, dst)
	}
	if top == nil {
		return ep.Errorf(http.StatusBadRequest, ep.CodeBadJSON, "The request body must be a JSON object, not null.")
	}
	if err := checkStrict(data, moduleBodyShape(reflect.TypeOf(dst))); err != nil {
		return err
	}
	echo := func(field, want string) error {
		raw, ok := top[field]
		if !ok {
			return nil
		}
		delete(top, field)
		var got *string
		if err := json.Unmarshal(raw, &got); err != nil {
			return ep.Invalid(ep.CodeInvalid, field, "must be a string")
		}
		return checkEcho(field, got, want)
	}
	if err := echo("id", pathID); err != nil {
		return err
	}
	if err := echo("edge_id", pathEdgeID); err != nil {
		return err
	}
	if inner, wrapped := top["module"]; wrapped {
		delete(top, "module")
		if len(top) > 0 {
			extra := make([]string, 0, len(top))
			for k := range top {
				extra = append(extra, k)
			}
			sort.Strings(extra)
			return &ep.Error{Status: http.StatusBadRequest, Code: ep.CodeUnknownField, Field: extra[0],
				Msg: "Unknown field " + quote(extra[0]) + " beside \"module\"; a wrapped module body has only module, id and edge_id."}
		}
		data = inner
		if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			data = []byte("{}")
		}
	} else {
		data, _ = json.Marshal(top)
	}
	if err := decodeStrict(data, dst); err != nil {
		return err
	}
	return nil
}
