package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// The edges page: every HTTPS, TLS and TCP edge with its routes, backends and modules, and the
// forms that turn a module on and off. Modules are found through the API's module table, so a
// module added there shows here without a change.

// backendRow is a backend in words.
type backendRow struct {
	ID, Kind, Summary string
}

// moduleRow is one module configured on an edge or route.
type moduleRow struct {
	Name    string
	Enabled bool
	Detail  string
	// Parent, EdgeID and RouteID name the module's owner for its toggle form.
	Parent, EdgeID, RouteID string
}

type routeRow struct {
	ID, MatchType, Match, Description string
	Backend                           *backendRow
	BackendOff                        bool
	Modules                           []moduleRow
}

type edgeRow struct {
	Kind, ID, Description string
	Hostports             []string
	Backend               *backendRow
	BackendOff            bool
	Modules               []moduleRow
	Routes                []routeRow
}

// edgeDoc is the part of an edge or route document the page reads by name; the modules are read
// from the whole document.
type edgeDoc struct {
	ID          string            `json:"id"`
	Description string            `json:"description"`
	Hostports   []string          `json:"hostports"`
	MatchType   string            `json:"match_type"`
	Match       string            `json:"match"`
	Routes      []json.RawMessage `json:"routes"`
}

func (h *Handler) edges(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	backends, more, err := h.backendIndex(ctx, s)
	if err != nil {
		return err
	}
	var rows []edgeRow
	for _, res := range []*ep.Resource{ep.HTTPSEdges, ep.TLSEdges, ep.TCPEdges} {
		docs, moreEdges, err := listAll[json.RawMessage](ctx, h, s, res)
		if err != nil {
			return err
		}
		more = more || moreEdges
		for _, raw := range docs {
			var d edgeDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			row := edgeRow{Kind: strings.ToUpper(strings.TrimSuffix(res.Kind, "_edge")), ID: d.ID, Description: d.Description, Hostports: d.Hostports}
			row.Backend, row.BackendOff, row.Modules = modulesOf(res, raw, backends, d.ID, "")
			for _, rr := range d.Routes {
				var rd edgeDoc
				if err := json.Unmarshal(rr, &rd); err != nil {
					return err
				}
				route := routeRow{ID: rd.ID, MatchType: rd.MatchType, Match: rd.Match, Description: rd.Description}
				route.Backend, route.BackendOff, route.Modules = modulesOf(ep.HTTPSEdgeRoutes, rr, backends, d.ID, rd.ID)
				row.Routes = append(row.Routes, route)
			}
			rows = append(rows, row)
		}
	}
	h.render(w, r, s, "edges", http.StatusOK, struct {
		Edges []edgeRow
		More  bool
	}{rows, more})
	return nil
}

// modulesOf reads the modules configured in an edge or route document: its backend, resolved
// to the backend's summary, and the others as rows with their settings.
func modulesOf(res *ep.Resource, raw json.RawMessage, backends map[string]backendRow, edgeID, routeID string) (*backendRow, bool, []moduleRow) {
	var doc map[string]json.RawMessage
	_ = json.Unmarshal(raw, &doc)
	var backend *backendRow
	var backendOff bool
	var rows []moduleRow
	for _, m := range ep.ModulesOf(res) {
		if m.NewRequest == nil || len(doc[m.Name]) == 0 || string(doc[m.Name]) == "null" {
			continue
		}
		var mod map[string]any
		if json.Unmarshal(doc[m.Name], &mod) != nil {
			continue
		}
		enabled, _ := mod["enabled"].(bool)
		if m.Name == "backend" {
			ref, _ := mod["backend"].(map[string]any)
			id, _ := ref["id"].(string)
			b, ok := backends[id]
			if !ok {
				b = backendRow{ID: id, Kind: "missing", Summary: "the backend no longer exists"}
			}
			backend, backendOff = &b, !enabled
		}
		rows = append(rows, moduleRow{Name: m.Name, Enabled: enabled, Detail: moduleDetail(mod),
			Parent: res.Kind, EdgeID: edgeID, RouteID: routeID})
	}
	return backend, backendOff, rows
}

// moduleDetail is a module's settings in one line: its JSON without "enabled", secrets hidden,
// cut at 300 bytes.
func moduleDetail(mod map[string]any) string {
	clean := hideSecrets(mod).(map[string]any)
	delete(clean, "enabled")
	if len(clean) == 0 {
		return ""
	}
	b, _ := json.Marshal(clean)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// hideSecrets replaces the value of every field whose name holds "secret" (webhook secrets,
// client secrets), at any depth, and leaves out references' uris (their ids say enough).
func hideSecrets(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if k == "uri" {
				continue
			}
			if strings.Contains(k, "secret") && x != nil {
				out[k] = "[hidden]"
				continue
			}
			out[k] = hideSecrets(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = hideSecrets(x)
		}
		return out
	}
	return v
}

// backendSummary says what a backend does, in words.
func backendSummary(b map[string]any) string {
	switch {
	case b["labels"] != nil:
		labels, _ := b["labels"].(map[string]any)
		var parts []string
		for k, v := range labels {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
		sort.Strings(parts)
		return "tunnels labeled " + strings.Join(parts, ", ")
	case b["address"] != nil:
		s := fmt.Sprintf("%v", b["address"])
		if tls, _ := b["tls"].(map[string]any); tls != nil && tls["enabled"] == true {
			s += " over TLS"
		}
		return s
	case b["status_code"] != nil:
		body := fmt.Sprintf("%v", b["body"])
		if len(body) > 60 {
			body = body[:60] + "…"
		}
		return fmt.Sprintf("answers %v %q", b["status_code"], body)
	case b["backends"] != nil:
		switch list := b["backends"].(type) {
		case []any:
			ids := make([]string, len(list))
			for i, x := range list {
				ids[i] = fmt.Sprint(x)
			}
			return "first available of " + strings.Join(ids, ", ")
		case map[string]any:
			var parts []string
			for id, weight := range list {
				parts = append(parts, fmt.Sprintf("%s (weight %v)", id, weight))
			}
			sort.Strings(parts)
			return "weighted among " + strings.Join(parts, ", ")
		}
	}
	return ""
}

// toggleModule turns a module on or off through the API: it reads the module, turns its answer
// back into the request the API takes (references become ids), sets enabled, and puts it.
// Secrets the API hides are sent back as null, which keeps the stored ones.
func (h *Handler) toggleModule(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	parent, edgeID, routeID, name := f.Get("parent"), f.Get("edge"), f.Get("route"), f.Get("module")
	on := f.Get("on") == "true"
	var res *ep.Resource
	for _, c := range []*ep.Resource{ep.HTTPSEdges, ep.TLSEdges, ep.TCPEdges, ep.HTTPSEdgeRoutes} {
		if c.Kind == parent {
			res = c
		}
	}
	if res == nil || !plainID(edgeID) || (res == ep.HTTPSEdgeRoutes) != (routeID != "") || (routeID != "" && !plainID(routeID)) {
		return badRequest("The form does not name an edge or route.")
	}
	var mod *ep.Module
	for _, m := range ep.ModulesOf(res) {
		if m.Name == name && m.NewRequest != nil {
			mod = m
		}
	}
	if mod == nil {
		return badRequest("The form does not name a module of this edge or route.")
	}
	path := res.Path + "/" + edgeID
	if routeID != "" {
		path = strings.Replace(res.Path, "{edge_id}", edgeID, 1) + "/" + routeID
	}
	path += "/" + mod.Name
	var current map[string]json.RawMessage
	if err := h.call(r.Context(), s, "GET", path, nil, &current); err != nil {
		return err
	}
	if err := h.call(r.Context(), s, "PUT", path, moduleRequest(mod, current, on), nil); err != nil {
		return err
	}
	done := "module-off"
	if on {
		done = "module-on"
	}
	http.Redirect(w, r, Prefix+"edges?done="+done, http.StatusSeeOther)
	return nil
}

// moduleRequest turns a module as the API shows it into the body of its PUT, with enabled set:
// each field of the request type is copied from the answer, and a reference field's id
// (backend_id, ip_policy_ids) is taken from the Ref (backend) or list of Refs (ip_policies)
// the answer shows instead.
func moduleRequest(m *ep.Module, current map[string]json.RawMessage, on bool) map[string]any {
	out := map[string]any{}
	for _, name := range jsonFields(reflect.TypeOf(m.NewRequest())) {
		switch {
		case current[name] != nil:
			out[name] = current[name]
		case strings.HasSuffix(name, "_ids"):
			base := strings.TrimSuffix(name, "_ids")
			for _, plural := range []string{base + "s", strings.TrimSuffix(base, "y") + "ies"} {
				var refs []ep.Ref
				if json.Unmarshal(current[plural], &refs) == nil && current[plural] != nil {
					ids := make([]string, len(refs))
					for i, ref := range refs {
						ids[i] = ref.ID
					}
					out[name] = ids
					break
				}
			}
		case strings.HasSuffix(name, "_id"):
			var ref *ep.Ref
			if json.Unmarshal(current[strings.TrimSuffix(name, "_id")], &ref) == nil && ref != nil {
				out[name] = ref.ID
			}
		}
	}
	out["enabled"] = on
	return out
}

// jsonFields are the JSON names of a struct type's fields, embedded structs' included.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			out = append(out, jsonFields(f.Type)...)
		case f.IsExported() && name != "" && name != "-" && !slices.Contains(out, name):
			out = append(out, name)
		}
	}
	return out
}
