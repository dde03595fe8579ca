package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func fetchOpenAPI(t *testing.T, e *env) map[string]any {
	t.Helper()
	r := e.doHeaders(nil, "GET", "/openapi.json", nil).must(t, 200)
	return r.body
}

var pathParamRE = regexp.MustCompile(`\{([a-z_]+)\}`)

// TestOpenAPIDocumentIsValid checks the structure an OpenAPI 3 consumer relies on.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	e := newEnv(t)
	doc := fetchOpenAPI(t, e)
	if doc["openapi"] != "3.0.3" {
		t.Fatalf("openapi %v", doc["openapi"])
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	raw, _ := json.Marshal(doc)
	for _, m := range regexp.MustCompile(`"\$ref":"#/components/schemas/([^"]+)"`).FindAllStringSubmatch(string(raw), -1) {
		if schemas[m[1]] == nil {
			t.Errorf("$ref to missing schema %s", m[1])
		}
	}
	ids := map[string]string{}
	for path, ops := range doc["paths"].(map[string]any) {
		want := pathParamRE.FindAllStringSubmatch(path, -1)
		for method, o := range ops.(map[string]any) {
			op := o.(map[string]any)
			if id, _ := op["operationId"].(string); id != "" {
				if prev, dup := ids[id]; dup {
					t.Errorf("operationId %s on %s and %s %s", id, prev, method, path)
				}
				ids[id] = method + " " + path
			}
			declared := map[string]bool{}
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				pm := p.(map[string]any)
				if pm["in"] == "path" {
					declared[pm["name"].(string)] = true
				}
			}
			for _, w := range want {
				if !declared[w[1]] {
					t.Errorf("%s %s: path parameter %s not declared", method, path, w[1])
				}
			}
			if len(declared) != len(want) {
				t.Errorf("%s %s: declares path parameters the path lacks", method, path)
			}
			if op["responses"] == nil {
				t.Errorf("%s %s: no responses", method, path)
			}
		}
	}
}

// TestOpenAPIListsExactlyWhatIsServed probes the server: every documented operation is routed
// (an unknown id is "Resource not found", never "no API path"), and every other method on a
// documented path is 405.
func TestOpenAPIListsExactlyWhatIsServed(t *testing.T) {
	e := newEnv(t)
	doc := fetchOpenAPI(t, e)
	methods := []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
	n := 0
	for path, ops := range doc["paths"].(map[string]any) {
		concrete := pathParamRE.ReplaceAllString(path, "x_missing")
		for _, m := range methods {
			_, documented := ops.(map[string]any)[strings.ToLower(m)]
			r := e.do(e.admin.token, m, concrete, map[string]any{})
			switch {
			case documented && (r.status == 405 || strings.Contains(r.msg(), "no API path")):
				t.Errorf("%s %s is documented but not served: %d %s", m, path, r.status, r.raw)
			case !documented && r.status != 405:
				t.Errorf("%s %s is served (%d) but not documented", m, path, r.status)
			}
			n++
		}
	}
	if n < 5*50 {
		t.Fatalf("only %d probes: the document lists too few paths", n)
	}
}

// TestOpenAPIMatchesPublishedSchema compares, operation by operation, our request and response
// schemas with the published schema of the compatible API: every property it documents must be
// in ours with a compatible type, except the deviations listed (and explained in docs/api.md).
func TestOpenAPIMatchesPublishedSchema(t *testing.T) {
	data, err := os.ReadFile("../testdata/spec/ngrok-openapi.yaml")
	if err != nil {
		t.Fatalf("the published schema is kept in the repository: %v", err)
	}
	var parsed any
	if err := yaml.Unmarshal(data, &parsed); err != nil {
		t.Fatal(err)
	}
	theirs := stringKeys(parsed).(map[string]any)
	e := newEnv(t)
	ours := fetchOpenAPI(t, e)
	// Documented deviations: "<method> <path> <request|response>.<property>".
	deviations := map[string]string{}
	compared := 0
	var problems []string
	for path, theirOps := range theirs["paths"].(map[string]any) {
		ourOps, ok := ours["paths"].(map[string]any)[path].(map[string]any)
		if !ok {
			continue
		}
		for method, to := range theirOps.(map[string]any) {
			oo, ok := ourOps[method].(map[string]any)
			if !ok {
				problems = append(problems, "missing operation "+method+" "+path)
				continue
			}
			top := to.(map[string]any)
			if rb, ok := top["requestBody"].(map[string]any); ok {
				ourRB, _ := oo["requestBody"].(map[string]any)
				problems = append(problems, compareSchemas(method+" "+path+" request", bodySchema(theirs, rb), bodySchema(ours, ourRB), theirs, ours, deviations)...)
				compared++
			}
			for code, resp := range top["responses"].(map[string]any) {
				rm, _ := resp.(map[string]any)
				if _, has := rm["content"]; !has {
					continue
				}
				ourResp, _ := oo["responses"].(map[string]any)[codeKey(code)].(map[string]any)
				if ourResp == nil {
					problems = append(problems, method+" "+path+": no "+codeKey(code)+" response")
					continue
				}
				problems = append(problems, compareSchemas(method+" "+path+" response", bodySchema(theirs, rm), bodySchema(ours, ourResp), theirs, ours, deviations)...)
				compared++
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	if compared < 100 {
		t.Fatalf("compared only %d schemas", compared)
	}
}

func codeKey(code string) string { return code }

// stringKeys turns the maps YAML decodes with non-string keys (response codes) into JSON's shape.
func stringKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = stringKeys(e)
		}
		return x
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = stringKeys(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = stringKeys(e)
		}
	}
	return v
}

func bodySchema(doc, body map[string]any) map[string]any {
	if body == nil {
		return nil
	}
	c, _ := body["content"].(map[string]any)
	j, _ := c["application/json"].(map[string]any)
	s, _ := j["schema"].(map[string]any)
	return resolve(doc, s)
}

// resolve follows $ref and allOf wrappers to the schema itself.
func resolve(doc, s map[string]any) map[string]any {
	for s != nil {
		if ref, ok := s["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			s, _ = doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
			continue
		}
		if all, ok := s["allOf"].([]any); ok && len(all) == 1 {
			s, _ = all[0].(map[string]any)
			continue
		}
		return s
	}
	return nil
}

func compareSchemas(where string, theirs, ours, theirDoc, ourDoc map[string]any, deviations map[string]string) []string {
	if theirs == nil {
		return nil
	}
	if ours == nil {
		return []string{where + ": no schema"}
	}
	var problems []string
	tp, _ := theirs["properties"].(map[string]any)
	op, _ := ours["properties"].(map[string]any)
	for name, ts := range tp {
		key := where + "." + name
		if _, ok := deviations[key]; ok {
			continue
		}
		os, ok := op[name].(map[string]any)
		if !ok {
			problems = append(problems, key+": missing")
			continue
		}
		tt, ot := resolve(theirDoc, ts.(map[string]any)), resolve(ourDoc, os)
		if kindOf(tt) != kindOf(ot) {
			problems = append(problems, key+": type "+kindOf(ot)+", published "+kindOf(tt))
			continue
		}
		if kindOf(tt) == "object" && tt["properties"] != nil {
			problems = append(problems, compareSchemas(key, tt, ot, theirDoc, ourDoc, deviations)...)
		}
		if kindOf(tt) == "array" {
			ti, _ := tt["items"].(map[string]any)
			oi, _ := ot["items"].(map[string]any)
			ti, oi = resolve(theirDoc, ti), resolve(ourDoc, oi)
			if kindOf(ti) != kindOf(oi) {
				problems = append(problems, key+"[]: type "+kindOf(oi)+", published "+kindOf(ti))
			} else if kindOf(ti) == "object" && ti["properties"] != nil {
				problems = append(problems, compareSchemas(key+"[]", ti, oi, theirDoc, ourDoc, deviations)...)
			}
		}
	}
	return problems
}

func kindOf(s map[string]any) string {
	if s == nil {
		return "none"
	}
	if t, ok := s["type"].(string); ok {
		return t
	}
	if s["properties"] != nil {
		return "object"
	}
	return "any"
}
