package server

import (
	"bytes"
	"errors"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// Fuzz targets of everything the server reads from a request before the store sees it: every
// create, update and module body, decoded exactly as the handlers decode them (s.decode,
// s.decodeModule) and then validated, and the paging parameters. `go test` runs them on their
// seed corpora (testdata/fuzz/<name>); `go test -run=^$ -fuzz=^FuzzRequestBodies$ ./server`
// explores further.

// bodyTarget is one body decoder of the API: a create or update of a collection, or a module PUT.
type bodyTarget struct {
	name string // "create ip_policy_rule", "update tls_edge", "module https_edge_route/oauth"
	run  func(s *Server, data []byte) error
}

// fuzzParentID and fuzzID stand for the ids of the request path; bodies may echo them.
const fuzzKSUID = "3MPvW0lhhsKGYY3Wa2DA32KAzhn"

func fuzzPathIDs(res *ep.Resource) (id, parent string) {
	if res.Parent != nil {
		parent = res.Parent.Prefix + "_" + fuzzKSUID
	}
	return res.Prefix + "_" + fuzzKSUID, parent
}

func fuzzRequest(method string, data []byte) *http.Request {
	return httptest.NewRequest(method, "/fuzz", bytes.NewReader(data))
}

// bodyTargets walks the resource and module tables, so a new collection or module is fuzzed
// without a change here.
func bodyTargets() []bodyTarget {
	var out []bodyTarget
	for _, res := range ep.Resources {
		id, parent := fuzzPathIDs(res)
		if res.Ops.Has(ep.OpCreate) {
			out = append(out, bodyTarget{"create " + res.Kind, func(s *Server, data []byte) error {
				body := res.NewCreate()
				if err := s.decode(fuzzRequest("POST", data), body, "", parent); err != nil {
					return err
				}
				if slowToValidate(body) {
					return nil
				}
				return body.Validate()
			}})
		}
		if res.Ops.Has(ep.OpUpdate) {
			out = append(out, bodyTarget{"update " + res.Kind, func(s *Server, data []byte) error {
				body := res.NewUpdate()
				if err := s.decode(fuzzRequest("PATCH", data), body, id, parent); err != nil {
					return err
				}
				return body.Validate()
			}})
		}
	}
	for _, m := range ep.Modules {
		if !m.Ops.Has(ep.OpUpdate) {
			continue
		}
		id, parent := fuzzPathIDs(m.Parent)
		out = append(out, bodyTarget{"module " + m.Parent.Kind + "/" + m.Name, func(s *Server, data []byte) error {
			req := m.NewRequest()
			if err := s.decodeModule(fuzzRequest("PUT", data), req, id, parent); err != nil {
				return err
			}
			return req.Validate()
		}})
	}
	return out
}

// slowToValidate is true for an SSH CA body whose Validate would generate an RSA key (up to a
// second for 4096 bits): correct, but it would stall the fuzzer. Every other branch of that
// Validate, the refusals included, is fuzzed.
func slowToValidate(body ep.Creator) bool {
	c, ok := body.(*ep.SSHCertificateAuthorityCreate)
	if !ok || c.PrivateKeyType == nil || !strings.EqualFold(*c.PrivateKeyType, "rsa") {
		return false
	}
	size := 0
	if c.KeySize != nil {
		size = *c.KeySize
	}
	return (size == 0 || size == 2048 || size == 4096) && (c.EllipticCurve == nil || *c.EllipticCurve == "")
}

// pickTarget finds the target by name; an unknown name (the fuzzer mutates names too) picks one
// by its hash, so every input exercises some decoder.
func pickTarget(targets []bodyTarget, name string) bodyTarget {
	for _, t := range targets {
		if t.name == name {
			return t
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return targets[int(h.Sum32()%uint32(len(targets)))]
}

// checkClientError asserts what every refusal of a request must be: an *ep.Error (anything else
// is rendered as a 500) with a 4xx status, a code and a message.
func checkClientError(t *testing.T, what string, err error) {
	t.Helper()
	var e *ep.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: returned a %T, not an *ep.Error, which the server answers with a 500: %v", what, err, err)
	}
	if e.Status < 400 || e.Status > 499 || e.Code <= 0 || e.Msg == "" {
		t.Fatalf("%s: error status %d code %d msg %q, want a 4xx with a code and a message", what, e.Status, e.Code, e.Msg)
	}
}

// FuzzRequestBodies decodes arbitrary bytes as the body of every create, update and module PUT of
// the API, strictly as the handlers do, and validates what decodes. It must never panic, and
// every refusal must be a 4xx *ep.Error.
func FuzzRequestBodies(f *testing.F) {
	targets := bodyTargets()
	for _, t := range targets {
		f.Add(t.name, []byte(`{}`))
		f.Add(t.name, []byte(``))
		f.Add(t.name, []byte(`{"description": null, "metadata": "m", "id": null}`))
	}
	f.Add("module tls_edge/backend", []byte(`{"module": {"enabled": true, "backend_id": "bkdsa_x"}}`))
	s := &Server{maxBody: DefaultMaxBody}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		target := pickTarget(targets, name)
		if err := target.run(s, data); err != nil {
			checkClientError(t, target.name+" "+strconv.Quote(string(data)), err)
		}
	})
}

// TestFuzzTargetsCoverTheTables: the body fuzzer has a target for every create, update and
// module PUT the server routes, and the seed corpus names only targets that exist.
func TestFuzzTargetsCoverTheTables(t *testing.T) {
	names := map[string]bool{}
	for _, b := range bodyTargets() {
		names[b.name] = true
	}
	s := New(nil, Config{BaseURL: "http://fuzz.test"})
	for _, rt := range s.routes {
		var name string
		switch {
		case rt.m != nil && rt.method == "PUT":
			name = "module " + rt.m.Parent.Kind + "/" + rt.m.Name
		case rt.action != "":
			continue // a command's body is {} or {"id": ...}: decoded into ep.Echo alone
		case rt.m == nil && rt.method == "POST":
			name = "create " + rt.c.res.Kind
		case rt.m == nil && rt.method == "PATCH":
			name = "update " + rt.c.res.Kind
		default:
			continue
		}
		if !names[name] {
			t.Errorf("%s %s reads a body that FuzzRequestBodies does not fuzz (%s)", rt.method, rt.path, name)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzRequestBodies", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed corpus for FuzzRequestBodies: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		if len(lines) < 3 {
			t.Fatalf("%s: not a seed of FuzzRequestBodies(string, []byte)", f)
		}
		quoted, ok := strings.CutPrefix(lines[1], "string(")
		name, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
		if !ok || err != nil {
			t.Fatalf("%s: not a seed of FuzzRequestBodies(string, []byte)", f)
		}
		if !names[name] {
			t.Errorf("%s: seed for %q, which is no body of the API", f, name)
		}
	}
}

// FuzzPaging: the paging parameters of every list never panic; a refusal is 400 ERR_NGROK_233
// naming limit; an accepted limit is 1..100, explicit exactly when the query sets one, and the
// cursor is before_id, or beforeId when before_id is empty, and is refused (400 ERR_NGROK_215
// naming the parameter) unless it is an id of the collection.
func FuzzPaging(f *testing.F) {
	for _, q := range []string{"", "limit=1", "limit=100", "limit=0", "limit=101", "limit=-1", "limit=1e2", "limit=+5",
		"limit=%35", "before_id=ipp_3MPvW0lhhsKGYY3Wa2DA32KAzhn&limit=2", "beforeId=x", "before_id=&beforeId=y",
		"beforeId=ipp_3MPvW0lhhsKGYY3Wa2DA32KAzhn", "before_id=ipr_3MPvW0lhhsKGYY3Wa2DA32KAzhn", "before_id=ipp_3MPvW0lhhsKGYY3Wa2DA32KAzh",
		"limit=2&limit=200", "limit", "%zz", "limit=99999999999999999999"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := httptest.NewRequest("GET", "/ip_policies", nil)
		r.URL.RawQuery = rawQuery
		limit, before, explicit, err := paging(r, ep.IPPolicies)
		q := r.URL.Query()
		if err != nil {
			checkClientError(t, "paging "+strconv.Quote(rawQuery), err)
			var e *ep.Error
			errors.As(err, &e)
			if e.Field == "before_id" || e.Field == "beforeId" {
				cursor, param := q.Get("before_id"), "before_id"
				if cursor == "" {
					cursor, param = q.Get("beforeId"), "beforeId"
				}
				if e.Status != http.StatusBadRequest || e.Code != ep.CodeInvalid || e.Field != param ||
					cursor == "" || ep.ValidID(ep.IPPolicies.Prefix, cursor) {
					t.Fatalf("paging(%q): refused the cursor %q: %v", rawQuery, cursor, err)
				}
				return
			}
			if e.Status != http.StatusBadRequest || e.Code != ep.CodeBadLimit || e.Field != "limit" {
				t.Fatalf("paging(%q): status %d code %d field %q", rawQuery, e.Status, e.Code, e.Field)
			}
			if q.Get("limit") == "" {
				t.Fatalf("paging(%q) refused a query without a limit: %v", rawQuery, err)
			}
			return
		}
		if limit < 1 || limit > MaxLimit {
			t.Fatalf("paging(%q): limit %d", rawQuery, limit)
		}
		if explicit != (q.Get("limit") != "") || (!explicit && limit != DefaultLimit) {
			t.Fatalf("paging(%q): limit %d explicit %v", rawQuery, limit, explicit)
		}
		if explicit && strconv.Itoa(limit) != strings.TrimLeft(q.Get("limit"), "+0") {
			t.Fatalf("paging(%q): limit %d from %q", rawQuery, limit, q.Get("limit"))
		}
		want := q.Get("before_id")
		if want == "" {
			want = q.Get("beforeId")
		}
		if before != want {
			t.Fatalf("paging(%q): cursor %q, want %q", rawQuery, before, want)
		}
	})
}
