package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// The OpenAPI 3 document is generated from the routes the server registered, which come from the
// resource and module tables, and from the Go types of documents and request bodies: it cannot
// drift from what is served. It is built once at startup.

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(s.openAPI)))
	_, _ = w.Write(s.openAPI)
}

// schemaGen turns Go types into OpenAPI schemas, collecting named structs as components.
type schemaGen struct {
	components map[string]any
}

func (g *schemaGen) ref(name string) map[string]any {
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// schema returns the schema of t; named structs become components referenced by name.
func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		// OpenAPI 3.0 gives nullable a meaning only next to a type, and linters reject it
		// alone: a reference (always to a struct's object schema) is wrapped in allOf with
		// type object, and a schema without a type (any value, null included) stays as it is.
		inner := g.schema(t.Elem())
		if _, isRef := inner["$ref"]; isRef {
			return map[string]any{"type": "object", "allOf": []any{inner}, "nullable": true}
		}
		if inner["type"] == nil {
			return inner
		}
		out := map[string]any{"nullable": true}
		for k, v := range inner {
			out[k] = v
		}
		return out
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295}
	case reflect.Uint, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number", "format": "double"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		name := t.Name()
		if _, done := g.components[name]; !done {
			g.components[name] = nil // placeholder against recursion
			g.components[name] = g.object(t)
		}
		return g.ref(name)
	}
	return map[string]any{}
}

// object is the schema of a struct's JSON fields, embedded structs flattened as encoding/json does.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
	}
	return map[string]any{"type": "object", "properties": props}
}

func typeOf(v any) reflect.Type {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func jsonBody(schema map[string]any) map[string]any {
	return map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": schema}}}
}

// buildOpenAPI renders the document of every registered route.
func (s *Server) buildOpenAPI(metricsOnMain bool) []byte {
	g := &schemaGen{components: map[string]any{}}
	g.components["Error"] = map[string]any{"type": "object", "properties": map[string]any{
		"error_code":  map[string]any{"type": "string"},
		"status_code": map[string]any{"type": "integer"},
		"msg":         map[string]any{"type": "string"},
		"details":     map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
	}}
	errorResponse := map[string]any{"description": "An error; error_code says which.", "content": map[string]any{
		"application/json": map[string]any{"schema": g.ref("Error")}}}
	versionParam := map[string]any{"name": "Ngrok-Version", "in": "header", "required": true,
		"schema": map[string]any{"type": "integer", "enum": []any{2}}}

	paths := map[string]map[string]any{}
	add := func(path, method string, op map[string]any) {
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	for _, rt := range s.routes {
		res := rt.c.res
		params := []any{versionParam}
		if rt.c.parentParam != "" {
			params = append(params, pathParam(rt.c.parentParam))
		}
		if strings.Contains(rt.path, "{id}") {
			params = append(params, pathParam("id"))
		}
		op := map[string]any{"tags": []any{res.Kind}, "parameters": params, "operationId": operationID(rt),
			"responses": errorResponses(rt, errorResponse)}
		responses := op["responses"].(map[string]any)
		doc := g.schema(typeOf(res.New()))
		switch {
		case rt.action != "":
			op["summary"] = "Send the " + rt.action + " command to the agent"
			op["requestBody"] = jsonBody(map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}})
			responses["204"] = map[string]any{"description": "The agent acknowledged the command."}
		case rt.m != nil:
			op["tags"] = []any{res.Kind + " modules"}
			switch rt.op {
			case ep.OpUpdate:
				op["summary"] = "Replace the " + rt.m.Name + " module"
				op["requestBody"] = moduleBody(g, rt)
				responses["200"] = mergeDesc(jsonBody(g.schema(rt.m.Response)), "The module as configured.")
			case ep.OpGet:
				op["summary"] = "Get the " + rt.m.Name + " module"
				responses["200"] = mergeDesc(jsonBody(g.schema(rt.m.Response)), "The module.")
			case ep.OpDelete:
				op["summary"] = "Remove the " + rt.m.Name
				responses["204"] = map[string]any{"description": "Removed."}
			}
		case rt.op == ep.OpCreate:
			op["summary"] = "Create"
			op["requestBody"] = jsonBody(g.schema(typeOf(res.NewCreate())))
			responses["201"] = mergeDesc(jsonBody(doc), "Created.")
		case rt.op == ep.OpList:
			op["summary"] = "List, newest first"
			op["parameters"] = append(params,
				map[string]any{"name": "before_id", "in": "query", "schema": map[string]any{"type": "string"}},
				map[string]any{"name": "limit", "in": "query", "schema": map[string]any{"type": "string"}})
			responses["200"] = mergeDesc(jsonBody(map[string]any{"type": "object", "properties": map[string]any{
				res.ListKey:     map[string]any{"type": "array", "items": doc},
				"uri":           map[string]any{"type": "string"},
				"next_page_uri": map[string]any{"type": "string", "nullable": true},
			}}), "A page.")
		case rt.op == ep.OpGet:
			op["summary"] = "Get"
			responses["200"] = mergeDesc(jsonBody(doc), "The object.")
		case rt.op == ep.OpUpdate:
			op["summary"] = "Update what the body names"
			op["requestBody"] = jsonBody(g.schema(typeOf(res.NewUpdate())))
			responses["200"] = mergeDesc(jsonBody(doc), "The updated object.")
		case rt.op == ep.OpDelete:
			op["summary"] = "Delete"
			responses["204"] = map[string]any{"description": "Deleted."}
		}
		add(rt.path, rt.method, op)
	}
	plain := func(id, summary string) map[string]any {
		return map[string]any{"operationId": id, "summary": summary, "security": []any{}, "tags": []any{"operations"},
			"responses": map[string]any{"200": map[string]any{"description": "OK"}}}
	}
	add("/healthz", "GET", plain("HealthzGet", "Liveness: the process serves HTTP"))
	add("/readyz", "GET", plain("ReadyzGet", "Readiness: the database answers (503 when not)"))
	add("/openapi.json", "GET", plain("OpenapiGet", "This document"))
	if metricsOnMain {
		add("/metrics", "GET", plain("MetricsGet", "Prometheus metrics"))
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{"title": "edgeplane: Edge Ingress Management API", "version": "2",
			"description": "Generated from edgeplane's resource and module tables: exactly the operations this server serves."},
		"servers":  []any{map[string]any{"url": s.base}},
		"security": []any{map[string]any{"bearer": []any{}}},
		"paths":    paths,
		"components": map[string]any{
			"schemas":         g.components,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("edgeplane: OpenAPI document does not encode: " + err.Error())
	}
	return out
}

// moduleBody documents a module PUT body in the wrapped form the published schema uses; the
// description says the bare module and {"module": …} are accepted too.
func moduleBody(g *schemaGen, rt route) map[string]any {
	props := map[string]any{
		"id":     map[string]any{"type": "string", "description": "the parent's id, as in the path"},
		"module": g.schema(typeOf(rt.m.NewRequest())),
	}
	if rt.c.parentParam != "" {
		props["edge_id"] = map[string]any{"type": "string", "description": "the edge's id, as in the path"}
	}
	body := jsonBody(map[string]any{"type": "object", "properties": props})
	body["description"] = "The module, wrapped as shown, or the bare module object, or {\"module\": …}; id and edge_id are optional and must equal the path's."
	return body
}

func pathParam(name string) map[string]any {
	return map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}}
}

func mergeDesc(body map[string]any, desc string) map[string]any {
	body["description"] = desc
	return body
}

// operationID names an operation as ngrok's published schema does, so that a client generated
// from this document has the method names of the official clients: the collection, then the
// verb ("ApiKeysCreate", "EdgesHttpsRoutesGet", "TunnelSessionsRestart"); an edge's or a
// route's module is the owner, the module and "Module", then the verb
// ("EdgeRouteOAuthModuleReplace", "TlsEdgeBackendModuleGet"); a delete-only module of another
// collection is the collection, "Delete" and the module ("ReservedDomainsDeleteCertificate").
// Operations the published schema lacks follow the same rules ("EdgesHttpsRoutesList").
func operationID(rt route) string {
	verb := map[ep.Ops]string{ep.OpCreate: "Create", ep.OpList: "List", ep.OpGet: "Get",
		ep.OpUpdate: "Update", ep.OpDelete: "Delete"}[rt.op]
	switch {
	case rt.action != "":
		return collectionName(rt.c.res.Path) + camel(rt.action)
	case rt.m != nil:
		owner, module := moduleOwner(rt.m.Parent.Path), camel(rt.m.Name)
		if owner == "" {
			return collectionName(rt.m.Parent.Path) + verb + module
		}
		if rt.op == ep.OpUpdate {
			verb = "Replace" // a module's PUT replaces it whole
		}
		return owner + module + "Module" + verb
	}
	return collectionName(rt.c.res.Path) + verb
}

// collectionName is a collection's path in CamelCase, its parameters left out
// ("/edges/https/{edge_id}/routes" is "EdgesHttpsRoutes"), except that backends are named type
// first ("/backends/static" is "StaticBackends").
func collectionName(path string) string {
	var b strings.Builder
	for seg := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		if !strings.HasPrefix(seg, "{") {
			b.WriteString(camel(seg))
		}
	}
	if kind, ok := strings.CutPrefix(path, "/backends/"); ok {
		return camel(kind) + "Backends"
	}
	return b.String()
}

// moduleOwner is the name an edge's modules start with ("/edges/tls" is "TlsEdge", the routes
// of HTTPS edges "EdgeRoute"), or "" for a collection that is not an edge.
func moduleOwner(parentPath string) string {
	if strings.HasSuffix(parentPath, "/routes") {
		return "EdgeRoute"
	}
	if kind, ok := strings.CutPrefix(parentPath, "/edges/"); ok {
		return camel(kind) + "Edge"
	}
	return ""
}

// camel turns a snake_case path segment into CamelCase, spelling words as ngrok's operation ids
// do ("oauth" is "OAuth", "ip" is "Ip").
func camel(snake string) string {
	var b strings.Builder
	for word := range strings.SplitSeq(snake, "_") {
		if word == "oauth" {
			b.WriteString("OAuth")
			continue
		}
		if word != "" {
			b.WriteString(strings.ToUpper(word[:1]) + word[1:])
		}
	}
	return b.String()
}

// errorResponses are the error statuses an operation declares, each with the Error schema,
// beside the default: every operation may answer 400 (a bad version header or request), 401,
// 429 (the key's rate limit), 500 and 503 (the database unreachable); one with a path parameter
// 404; one with a body 413 (over the size limit); a create or update 403 (another owner set by a
// non-admin); and one that writes 409 (a name taken, an object in use).
func errorResponses(rt route, errorResponse map[string]any) map[string]any {
	codes := []string{"400", "401", "429", "500", "503"}
	if strings.Contains(rt.path, "{") {
		codes = append(codes, "404")
	}
	body := rt.action != "" || rt.op == ep.OpCreate || rt.op == ep.OpUpdate
	if body {
		codes = append(codes, "413")
	}
	if rt.m == nil && (rt.op == ep.OpCreate || rt.op == ep.OpUpdate) {
		codes = append(codes, "403")
	}
	if rt.action == "" && (rt.op == ep.OpCreate || rt.op == ep.OpUpdate || rt.op == ep.OpDelete) {
		codes = append(codes, "409")
	}
	out := map[string]any{"default": errorResponse}
	for _, c := range codes {
		out[c] = errorResponse
	}
	return out
}
