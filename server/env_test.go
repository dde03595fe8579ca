package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// env is a real edgeplane HTTP server on a real SQLite file, for one test.
type env struct {
	t     *testing.T
	st    *store.Store
	srv   *httptest.Server
	base  string // the configured base URL
	admin account
}

// account is an account of the env with an admin API key.
type account struct {
	caller ep.Caller
	token  string
}

func newEnv(t *testing.T) *env { return newEnvBase(t, "") }

// newEnvBase starts a server whose configured base URL is base, or the server's own address when
// base is "".
func newEnvBase(t *testing.T, base string) *env {
	t.Helper()
	return newEnvConfig(t, server.Config{BaseURL: base})
}

// newEnvConfig starts a server with cfg; an empty cfg.BaseURL is the server's own address.
func newEnvConfig(t *testing.T, cfg server.Config) *env {
	t.Helper()
	return newEnvOn(t, testdb.Engine(), cfg)
}

// newEnvOn is newEnvConfig on a given engine, for the tests that run on every engine of the test
// run (testdb.Engines) whatever EDGEPLANE_TEST_ENGINE says.
func newEnvOn(t *testing.T, engine string, cfg server.Config) *env {
	t.Helper()
	base := cfg.BaseURL
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.Fresh(t, engine))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st}
	h := &lateHandler{}
	e.srv = httptest.NewServer(h)
	e.base = base
	if e.base == "" {
		e.base = e.srv.URL
	}
	cfg.BaseURL = e.base
	if cfg.Metrics != nil && cfg.Metrics == pendingMetrics {
		cfg.Metrics = server.NewMetrics(st)
	}
	h.h = server.New(st, cfg)
	settings := ep.DefaultSettings()
	settings.BaseURL = e.base // as main does: rules that generate URLs (SAML) see the base URL
	st.SetSettings(settings)
	t.Cleanup(func() {
		e.srv.Close()
		st.Close()
	})
	e.admin = e.newAccount("default")
	return e
}

type lateHandler struct{ h http.Handler }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.h.ServeHTTP(w, r) }

// newAccount creates an account with an admin and returns the admin's API key.
func (e *env) newAccount(name string) account {
	e.t.Helper()
	admin, _, err := e.st.EnsureAccount(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return account{caller: admin, token: e.keyFor(admin)}
}

// keyFor creates an API key owned by the caller's principal, through the store as the CLI does.
func (e *env) keyFor(c ep.Caller) string {
	e.t.Helper()
	doc, err := e.st.Create(context.Background(), c, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		e.t.Fatal(err)
	}
	return *doc.(*ep.APIKey).Token
}

// member adds a member user to the account and returns its API key.
func (e *env) member(a account) account {
	e.t.Helper()
	p, err := e.st.AddUser(context.Background(), a.caller.AccountID, ep.RoleMember)
	if err != nil {
		e.t.Fatal(err)
	}
	c := ep.Caller{AccountID: a.caller.AccountID, Principal: p}
	return account{caller: c, token: e.keyFor(c)}
}

// resp is a decoded response.
type resp struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// do sends a request with the standard headers and a token, and decodes the JSON answer.
// body may be nil, a string (sent as is) or any value (sent as JSON).
func (e *env) do(token, method, path string, body any) resp {
	e.t.Helper()
	return e.doHeaders(map[string]string{"Authorization": "Bearer " + token, "Ngrok-Version": "2"}, method, path, body)
}

func (e *env) doHeaders(headers map[string]string, method, path string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	out := resp{status: res.StatusCode, header: res.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			e.t.Fatalf("%s %s: response is not a JSON object: %v: %s", method, path, err, raw)
		}
	}
	return out
}

// must asserts the status of a response and returns it.
func (r resp) must(t *testing.T, status int) resp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	return r
}

// wantError asserts an error response: status, error_code, the exact body shape, and that the
// operation id in the body equals the Ngrok-Operation-Id header.
func (r resp) wantError(t *testing.T, status int, code int) resp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	want := fmt.Sprintf("ERR_NGROK_%d", code)
	if r.body["error_code"] != want {
		t.Fatalf("error_code %v, want %s: %s", r.body["error_code"], want, r.raw)
	}
	if r.body["status_code"] != float64(status) {
		t.Fatalf("status_code %v, want %d", r.body["status_code"], status)
	}
	if msg, _ := r.body["msg"].(string); msg == "" {
		t.Fatalf("empty msg: %s", r.raw)
	}
	details, ok := r.body["details"].(map[string]any)
	if !ok {
		t.Fatalf("details is not an object: %s", r.raw)
	}
	for k, v := range details {
		if _, ok := v.(string); !ok {
			t.Fatalf("details.%s is not a string: %s", k, r.raw)
		}
	}
	opID, _ := details["operation_id"].(string)
	if !ep.ValidID("op", opID) || r.header.Get("Ngrok-Operation-Id") != opID {
		t.Fatalf("operation id %q, header %q", opID, r.header.Get("Ngrok-Operation-Id"))
	}
	if len(r.body) != 4 {
		t.Fatalf("error body has keys other than error_code, status_code, msg, details: %s", r.raw)
	}
	return r
}

func (r resp) str(key string) string {
	s, _ := r.body[key].(string)
	return s
}

func (r resp) msg() string { return r.str("msg") }

// items returns the list array of a list response.
func (r resp) items(t *testing.T, key string) []map[string]any {
	t.Helper()
	arr, ok := r.body[key].([]any)
	if !ok {
		t.Fatalf("no array %q in %s", key, r.raw)
	}
	out := make([]map[string]any, len(arr))
	for i, v := range arr {
		out[i] = v.(map[string]any)
	}
	return out
}

// concurrently runs fn(0) … fn(n-1), each in its own goroutine, released together so they race as
// closely as they can, and returns when all have finished.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}
