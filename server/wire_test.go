package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
)

func TestUnknownPathsAndMethods(t *testing.T) {
	e := newEnv(t)
	e.do(e.admin.token, "GET", "/no_such_collection", nil).wantError(t, 404, ep.CodeNotFound)
	e.do(e.admin.token, "GET", "/ip_policies/ipp_x/extra", nil).wantError(t, 404, ep.CodeNotFound)
	// Unknown paths are JSON 404s even without credentials.
	e.doHeaders(nil, "GET", "/nope", nil).wantError(t, 404, ep.CodeNotFound)
	for path, allow := range map[string]string{
		"/ip_policies":       "GET, POST",
		"/ip_policies/ipp_x": "GET, PATCH, DELETE",
	} {
		r := e.do(e.admin.token, "PUT", path, map[string]any{}).wantError(t, 405, ep.CodeMethodNotAllowed)
		if r.header.Get("Allow") != allow {
			t.Fatalf("%s: Allow %q, want %q", path, r.header.Get("Allow"), allow)
		}
	}
	e.do(e.admin.token, "DELETE", "/ip_policies", nil).wantError(t, 405, ep.CodeMethodNotAllowed)
}

func TestBodyLimits(t *testing.T) {
	e := newEnv(t)
	big := `{"description": "` + strings.Repeat("x", 2<<20) + `"}`
	e.do(e.admin.token, "POST", "/ip_policies", big).wantError(t, http.StatusRequestEntityTooLarge, ep.CodeBodyTooLarge)
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	e.do(e.admin.token, "POST", "/ip_policies", `{"description":`+deep+`}`).wantError(t, 400, ep.CodeBadJSON)
	e.do(e.admin.token, "POST", "/ip_policies", `{"description": 1e999}`).wantError(t, 400, ep.CodeInvalid)
	e.do(e.admin.token, "POST", "/bot_users", `{"name": "x", "active": "yes"}`).wantError(t, 400, ep.CodeInvalid)
	if n := len(e.do(e.admin.token, "GET", "/ip_policies", nil).must(t, 200).items(t, "ip_policies")); n != 0 {
		t.Fatalf("rejected bodies created %d policies", n)
	}
}

// Clients that send Content-Type: application/json on GET and DELETE without a body work, and
// a create with no body at all is an empty object.
func TestContentTypeOnBodylessRequests(t *testing.T) {
	e := newEnv(t)
	h := map[string]string{"Authorization": "Bearer " + e.admin.token, "Ngrok-Version": "2", "Content-Type": "application/json"}
	e.doHeaders(h, "GET", "/ip_policies", nil).must(t, 200)
	id := e.doHeaders(h, "POST", "/ip_policies", nil).must(t, 201).str("id")
	e.doHeaders(h, "DELETE", "/ip_policies/"+id, nil).must(t, 204)
}

func TestHealthz(t *testing.T) {
	e := newEnv(t)
	r := e.doHeaders(nil, "GET", "/healthz", nil).must(t, 200)
	if r.body["status"] != "ok" {
		t.Fatalf("healthz: %s", r.raw)
	}
}

// TestRequiredFieldsPresent: optional text fields and tokens are present (empty or null) in
// every response, as clients that read the schema's fields expect.
func TestRequiredFieldsPresent(t *testing.T) {
	e := newEnv(t)
	for path, fields := range map[string][]string{
		"/api_keys":    {"id", "uri", "created_at", "description", "metadata", "token", "owner_id"},
		"/credentials": {"id", "uri", "created_at", "description", "metadata", "token", "acl", "owner_id"},
		"/ip_policies": {"id", "uri", "created_at", "description", "metadata"},
		"/bot_users":   {"id", "uri", "created_at", "name", "active"},
	} {
		body := map[string]any{}
		if path == "/bot_users" {
			body["name"] = "b"
		}
		id := e.do(e.admin.token, "POST", path, body).must(t, 201).str("id")
		got := e.do(e.admin.token, "GET", path+"/"+id, nil).must(t, 200)
		for _, f := range fields {
			if _, ok := got.body[f]; !ok {
				t.Errorf("%s: field %s missing: %s", path, f, got.raw)
			}
		}
		if len(got.body) != len(fields) {
			t.Errorf("%s: unexpected fields: %s", path, got.raw)
		}
	}
}

// TestIDsAndTimes: ids sort in creation order even within one second, and the error body's
// details are an object of strings.
func TestIDsAndTimes(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for range 20 {
		ids = append(ids, e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201).str("id"))
	}
	list := e.do(e.admin.token, "GET", "/ip_policies", nil).must(t, 200).items(t, "ip_policies")
	for i, item := range list {
		if item["id"] != ids[len(ids)-1-i] {
			t.Fatalf("list is not newest first at %d", i)
		}
	}
	var raw map[string]json.RawMessage
	r := e.do(e.admin.token, "GET", "/ip_policies/ipp_missing", nil).wantError(t, 404, ep.CodeNotFound)
	if err := json.Unmarshal(r.raw, &raw); err != nil || raw["details"][0] != '{' {
		t.Fatalf("details: %s", r.raw)
	}
	if r.msg() != "Resource not found" {
		t.Fatalf("404 message %q", r.msg())
	}
}

// An unknown field inside a module is reported as such, not as if the body lacked it.
func TestUnknownNestedField(t *testing.T) {
	e := newEnv(t)
	r := e.do(e.admin.token, "POST", "/edges/tls", map[string]any{"tls_termination": map[string]any{"description": "x"}}).wantError(t, 400, ep.CodeUnknownField)
	if !strings.Contains(r.msg(), `"description" inside one of the body's objects`) {
		t.Fatalf("message: %s", r.msg())
	}
	r = e.do(e.admin.token, "POST", "/edges/tls", map[string]any{"nope": 1}).wantError(t, 400, ep.CodeUnknownField)
	if !strings.Contains(r.msg(), `"nope"; supported fields: `) {
		t.Fatalf("message: %s", r.msg())
	}
}

// TestRepeatedGetsFromTheReadCache: on SQLite, a GET of an unchanged object is answered from a
// body rendered once (store/readcache.go). Every answer must be byte for byte what rendering
// gives, change with the object, and carry the base URL of the server that answers.
func TestRepeatedGetsFromTheReadCache(t *testing.T) {
	e := newEnv(t)
	id := e.do(e.admin.token, "POST", "/ip_policies", map[string]any{"description": "one"}).must(t, 201).str("id")
	first := e.do(e.admin.token, "GET", "/ip_policies/"+id, nil).must(t, 200)
	for range 3 {
		if again := e.do(e.admin.token, "GET", "/ip_policies/"+id, nil).must(t, 200); string(again.raw) != string(first.raw) {
			t.Fatalf("repeated GET differs:\n%s\n%s", first.raw, again.raw)
		}
	}
	e.do(e.admin.token, "PATCH", "/ip_policies/"+id, map[string]any{"description": "two"}).must(t, 200)
	for range 2 {
		if got := e.do(e.admin.token, "GET", "/ip_policies/"+id, nil).must(t, 200); got.str("description") != "two" {
			t.Fatalf("GET after PATCH: %s", got.raw)
		}
	}

	// A second server with another base URL on the same store renders its own uris.
	other := httptest.NewServer(server.New(e.st, server.Config{BaseURL: "https://api.example.com/v2"}))
	defer other.Close()
	for range 2 {
		req, _ := http.NewRequest("GET", other.URL+"/ip_policies/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+e.admin.token)
		req.Header.Set("Ngrok-Version", "2")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), `"uri":"https://api.example.com/v2/ip_policies/`+id+`"`) {
			t.Fatalf("second server: %d %s", res.StatusCode, body)
		}
	}
	if got := e.do(e.admin.token, "GET", "/ip_policies/"+id, nil).must(t, 200); got.str("uri") != e.base+"/ip_policies/"+id {
		t.Fatalf("first server after the second: %s", got.raw)
	}
	if st := e.st.ReadCacheStats(); testdb.Engine() == "sqlite" && st.Hits == 0 {
		t.Fatalf("no GET was answered from the read cache: %+v", st)
	}
}
