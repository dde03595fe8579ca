package server_test

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestStrictJSON: what encoding/json lets through and strict JSON does not is refused with a 400
// naming the problem: a body of null, a field name in the wrong case, a duplicate key,
// invalid UTF-8, a lone surrogate, a control character. Nothing refused is stored.
func TestStrictJSON(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	policy := e.do(tok, "POST", "/ip_policies", map[string]any{"description": "kept"}).must(t, 201).str("id")
	edge := k.httpsEdge()
	route := "/edges/https/" + edge + "/routes/" + k.route(edge)
	module := route + "/request_headers"
	for _, c := range []struct {
		method, path, body string
		status, code       int
		field, msg         string
	}{
		{"POST", "/ip_policies", `null`, 400, ep.CodeBadJSON, "", "not null"},
		{"PATCH", "/ip_policies/" + policy, ` null `, 400, ep.CodeBadJSON, "", "not null"},
		{"PUT", module, `null`, 400, ep.CodeBadJSON, "", "not null"},
		{"PATCH", "/ip_policies/" + policy, `{"DESCRIPTION": "x"}`, 400, ep.CodeUnknownField, "DESCRIPTION", `did you mean "description"?`},
		{"PATCH", "/ip_policies/" + policy, `{"Description": "x"}`, 400, ep.CodeUnknownField, "Description", "case-sensitive"},
		{"PATCH", "/ip_policies/" + policy, `{"ID": "` + policy + `"}`, 400, ep.CodeUnknownField, "ID", `did you mean "id"?`},
		{"PATCH", route, `{"backend": {"Enabled": true}}`, 400, ep.CodeUnknownField, "backend.Enabled", `did you mean "enabled"?`},
		{"PATCH", route, `{"OAuth": null}`, 400, ep.CodeUnknownField, "OAuth", `did you mean "oauth"?`},
		{"PUT", module, `{"ADD": {}}`, 400, ep.CodeUnknownField, "ADD", `did you mean "add"?`},
		{"PUT", module, `{"module": {"Remove": []}}`, 400, ep.CodeUnknownField, "module.Remove", `did you mean "remove"?`},
		{"PATCH", "/ip_policies/" + policy, `{"description": "a", "description": "b"}`, 400, ep.CodeBadJSON, "", `the key "description" appears more than once`},
		{"PATCH", route, `{"request_headers": {"add": {"x-a": "1", "x-a": "2"}}}`, 400, ep.CodeBadJSON, "request_headers.add", `the key "x-a" appears more than once`},
		{"PUT", module, `{"add": {}, "add": {"x-a": "1"}}`, 400, ep.CodeBadJSON, "", `the key "add" appears more than once`},
		{"PATCH", "/ip_policies/" + policy, "{\"description\": \"caf\xe9\"}", 400, ep.CodeBadJSON, "description", "not valid UTF-8"},
		{"PATCH", "/ip_policies/" + policy, `{"description": "\ud800x"}`, 400, ep.CodeBadJSON, "description", "lone UTF-16 surrogate"},
		{"PATCH", "/ip_policies/" + policy, `{"description": "a\u0000b"}`, 400, ep.CodeInvalid, "description", "control characters (found U+0000)"},
		{"PATCH", "/ip_policies/" + policy, `{"metadata": "a\u001bb"}`, 400, ep.CodeInvalid, "metadata", "control characters (found U+001B)"},
		{"PATCH", "/ip_policies/" + policy, `{"metadata": "a\bb"}`, 400, ep.CodeInvalid, "metadata", "control characters (found U+0008)"},
		{"PATCH", "/ip_policies/" + policy, "{\"metadata\": \"a\x7fb\"}", 400, ep.CodeInvalid, "metadata", "control characters (found U+007F)"},
		{"PATCH", "/ip_policies/" + policy, `{"metadata": "a\u0085b"}`, 400, ep.CodeInvalid, "metadata", "control characters (found U+0085)"},
		{"PATCH", "/ip_policies/" + policy, "{\"metadata\": \"a\u0085b\"}", 400, ep.CodeInvalid, "metadata", "control characters (found U+0085)"},
		{"PATCH", "/ip_policies/" + policy, `{"description": "two\nlines"}`, 400, ep.CodeInvalid, "description", "one line"},
		{"PATCH", "/ip_policies/" + policy, `{"description": "tab\there"}`, 400, ep.CodeInvalid, "description", "one line"},
		{"PATCH", route, `{"request_headers": {"add": {"x-a": "\u0000"}}}`, 400, ep.CodeInvalid, "request_headers.add", "control characters"},
		{"PATCH", route, `{"request_headers": {"remove": ["x\u0001"]}}`, 400, ep.CodeInvalid, "request_headers.remove", "control characters"},
		{"PATCH", route, `{"request_headers": {"add": {"x\u0000": "1"}}}`, 400, ep.CodeInvalid, "request_headers.add", "control characters"},
		{"PUT", module, `{"module": {"add": {"x-a": "\u0007"}}}`, 400, ep.CodeInvalid, "module.add", "control characters"},
	} {
		r := e.do(tok, c.method, c.path, c.body).wantError(t, c.status, c.code)
		field, _ := r.body["details"].(map[string]any)["field"].(string)
		if c.field != "" && field != c.field {
			t.Errorf("%s %s %s: field %q, want %q", c.method, c.path, c.body, field, c.field)
		}
		if !strings.Contains(r.msg(), c.msg) {
			t.Errorf("%s %s %s: msg %q lacks %q", c.method, c.path, c.body, r.msg(), c.msg)
		}
	}
	if got := e.do(tok, "GET", "/ip_policies/"+policy, nil).must(t, 200).str("description"); got != "kept" {
		t.Fatalf("a refused body changed the policy: description %q", got)
	}
	if got := e.do(tok, "GET", route, nil).must(t, 200).body["request_headers"]; got != nil {
		t.Fatalf("a refused body configured a module: %v", got)
	}
}

// TestStrictJSONKeepsClientHabits: what existing clients send keeps working under the strict
// decoder: explicit nulls for unset fields, "enabled": null inside modules,
// id and edge_id echoed, an empty body, the three module shapes, multi-line metadata and PEM-like
// text, and escaped characters that are not control characters.
func TestStrictJSONKeepsClientHabits(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	edge := k.httpsEdge()
	routeID := k.route(edge)
	route := "/edges/https/" + edge + "/routes/" + routeID
	policy := e.do(tok, "POST", "/ip_policies", "").must(t, 201).str("id")
	e.do(tok, "PATCH", "/ip_policies/"+policy, `{"id": "`+policy+`", "description": null, "metadata": null}`).must(t, 200)
	r := e.do(tok, "PATCH", "/ip_policies/"+policy, `{"description": "caf\u00e9 \ud83d\ude00 \"q\" \\ \/", "metadata": "{\n\t\"a\": 1\r\n}"}`).must(t, 200)
	if r.str("description") != `café 😀 "q" \ /` || r.str("metadata") != "{\n\t\"a\": 1\r\n}" {
		t.Fatalf("escapes decoded wrongly: %s", r.raw)
	}
	e.do(tok, "PATCH", route, `{"id": "`+routeID+`", "edge_id": "`+edge+`", "description": null, "match": null,`+
		` "backend": null, "compression": {"enabled": null}, "request_headers": {"enabled": null, "add": {"X-Edge": "a"}, "remove": null}, "oauth": null}`).must(t, 200)
	for _, body := range []string{`{"enabled": null, "add": {"x-a": "1"}}`, `{"module": {"enabled": null}}`,
		`{"id": "` + routeID + `", "edge_id": "` + edge + `", "module": {"enabled": true, "remove": ["x-b"]}}`, `{"module": null}`, ``} {
		e.do(tok, "PUT", route+"/response_headers", body).must(t, 200)
	}
	// Many keys in one map take the map path of the duplicate check.
	var add strings.Builder
	for i := range 40 {
		if i > 0 {
			add.WriteString(",")
		}
		add.WriteString(`"x-h` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `": "v"`)
	}
	e.do(tok, "PUT", route+"/request_headers", `{"add": {`+add.String()+`}}`).must(t, 200)
	e.do(tok, "PUT", route+"/request_headers", `{"add": {`+add.String()+`, "x-hab": "again"}}`).wantError(t, 400, ep.CodeBadJSON)
}
