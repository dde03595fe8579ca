package server_test

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// publishedSchema returns the published schema of the compatible API, kept in the repository
// under testdata/spec.
func publishedSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("../testdata/spec/ngrok-openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var parsed any
	if err := yaml.Unmarshal(data, &parsed); err != nil {
		t.Fatal(err)
	}
	return stringKeys(parsed).(map[string]any)
}

// walkSchemas calls fn with the JSON pointer and the contents of every schema object in the
// document: components, parameters, request and response bodies, and every schema nested in
// them (properties, items, additionalProperties, allOf, anyOf, oneOf, not).
func walkSchemas(doc map[string]any, fn func(at string, s map[string]any)) {
	var schema func(at string, s map[string]any)
	schema = func(at string, s map[string]any) {
		fn(at, s)
		if props, ok := s["properties"].(map[string]any); ok {
			for name, p := range props {
				if ps, ok := p.(map[string]any); ok {
					schema(at+"/properties/"+name, ps)
				}
			}
		}
		for _, key := range []string{"items", "additionalProperties", "not"} {
			if sub, ok := s[key].(map[string]any); ok {
				schema(at+"/"+key, sub)
			}
		}
		for _, key := range []string{"allOf", "anyOf", "oneOf"} {
			list, _ := s[key].([]any)
			for i, e := range list {
				if sub, ok := e.(map[string]any); ok {
					schema(fmt.Sprintf("%s/%s/%d", at, key, i), sub)
				}
			}
		}
	}
	content := func(at string, holder map[string]any) {
		c, _ := holder["content"].(map[string]any)
		for media, m := range c {
			if s, ok := m.(map[string]any)["schema"].(map[string]any); ok {
				schema(at+"/content/"+media+"/schema", s)
			}
		}
	}
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	for name, s := range schemas {
		schema("#/components/schemas/"+name, s.(map[string]any))
	}
	paths, _ := doc["paths"].(map[string]any)
	for path, ops := range paths {
		for method, o := range ops.(map[string]any) {
			op, ok := o.(map[string]any)
			if !ok {
				continue
			}
			at := "#/paths/" + path + "/" + method
			params, _ := op["parameters"].([]any)
			for i, p := range params {
				if s, ok := p.(map[string]any)["schema"].(map[string]any); ok {
					schema(fmt.Sprintf("%s/parameters/%d/schema", at, i), s)
				}
			}
			if rb, ok := op["requestBody"].(map[string]any); ok {
				content(at+"/requestBody", rb)
			}
			responses, _ := op["responses"].(map[string]any)
			for code, r := range responses {
				content(at+"/responses/"+code, r.(map[string]any))
			}
		}
	}
}

// TestOpenAPINullableHasType fails on any schema that says nullable without a type: OpenAPI 3.0
// gives nullable meaning only next to a type, and linters (Redocly, Spectral) reject it.
func TestOpenAPINullableHasType(t *testing.T) {
	doc := fetchOpenAPI(t, newEnv(t))
	var bad []string
	walked := 0
	walkSchemas(doc, func(at string, s map[string]any) {
		walked++
		if _, ok := s["nullable"]; ok && s["type"] == nil {
			bad = append(bad, at)
		}
	})
	sort.Strings(bad)
	for _, at := range bad {
		t.Errorf("nullable without type: %s", at)
	}
	if len(bad) > 0 {
		t.Errorf("%d schemas say nullable without a type", len(bad))
	}
	if walked < 500 {
		t.Fatalf("walked only %d schemas", walked)
	}
}

// TestOpenAPIOperationIDsArePublished compares the operationId of every operation edgeplane
// serves that the published schema also has with the published one, so that a client generated
// from either document has the same method names. Operations only edgeplane has follow the same
// pattern: the collection's name in CamelCase, then the verb.
func TestOpenAPIOperationIDsArePublished(t *testing.T) {
	theirs := publishedSchema(t)
	ours := fetchOpenAPI(t, newEnv(t))
	published := map[string]string{} // operationId → "method path", for the names edgeplane may not take
	for path, ops := range theirs["paths"].(map[string]any) {
		for method, o := range ops.(map[string]any) {
			if id, ok := o.(map[string]any)["operationId"].(string); ok {
				published[id] = method + " " + path
			}
		}
	}
	pattern := regexp.MustCompile(`^([A-Z][a-z0-9]*)+$`)
	compared := 0
	for path, ops := range ours["paths"].(map[string]any) {
		theirOps, _ := theirs["paths"].(map[string]any)[path].(map[string]any)
		for method, o := range ops.(map[string]any) {
			id, _ := o.(map[string]any)["operationId"].(string)
			where := strings.ToUpper(method) + " " + path
			if to, ok := theirOps[method].(map[string]any); ok {
				compared++
				if want := to["operationId"].(string); id != want {
					t.Errorf("%s: operationId %q, published %q", where, id, want)
				}
				continue
			}
			if !pattern.MatchString(id) {
				t.Errorf("%s: operationId %q is not CamelCase like the published ones", where, id)
			}
			if other, taken := published[id]; taken {
				t.Errorf("%s: operationId %q is the published name of %s", where, id, other)
			}
		}
	}
	if compared < 150 {
		t.Fatalf("compared only %d operations with the published schema", compared)
	}
}

// TestOpenAPIDeclaresErrorResponses checks that every API operation declares its error
// statuses with the Error schema, not only a default response, so that a generated client
// knows the shape of a 404 or a 409: all may answer 400, 401, 429, 500 and 503; one with a path
// parameter 404, one with a body 413, and a create, update or delete 409.
func TestOpenAPIDeclaresErrorResponses(t *testing.T) {
	doc := fetchOpenAPI(t, newEnv(t))
	n := 0
	for path, ops := range doc["paths"].(map[string]any) {
		for method, o := range ops.(map[string]any) {
			op := o.(map[string]any)
			if sec, ok := op["security"].([]any); ok && len(sec) == 0 {
				continue // the unauthenticated operational endpoints
			}
			n++
			want := []string{"default", "400", "401", "429", "500", "503"}
			if strings.Contains(path, "{") {
				want = append(want, "404")
			}
			if op["requestBody"] != nil {
				want = append(want, "413")
			}
			id, _ := op["operationId"].(string)
			if method == "patch" || method == "delete" || strings.HasSuffix(id, "Create") || strings.HasSuffix(id, "Replace") {
				want = append(want, "409")
			}
			responses := op["responses"].(map[string]any)
			for _, code := range want {
				r, _ := responses[code].(map[string]any)
				s := bodySchema(doc, r)
				props, _ := s["properties"].(map[string]any)
				if props["error_code"] == nil || props["status_code"] == nil || props["msg"] == nil {
					t.Errorf("%s %s: no %s response with the Error schema", strings.ToUpper(method), path, code)
				}
			}
		}
	}
	if n < 150 {
		t.Fatalf("only %d operations", n)
	}
}
