package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// env is the console mounted on the real API over a real store, with a real recorder, served
// on a real socket. Traffic entries are recorded into the recorder as the public listeners
// record them; the data plane's own recording is tested end to end in e2e/agents.
type env struct {
	t   *testing.T
	st  *store.Store
	rec *inspect.Recorder
	h   *Handler
	url string
}

const replica = "rep_test"

func newEnv(t *testing.T, configure ...func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, testdb.Fresh(t, testdb.Engine()), configure...)
}

// newEnvOn is newEnv on the database dsn.
func newEnvOn(t *testing.T, dsn string, configure ...func(*Config)) *env {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	late := &lateHandler{}
	srv := httptest.NewServer(late)
	t.Cleanup(srv.Close)
	api := server.New(st, server.Config{BaseURL: srv.URL})
	rec := inspect.NewRecorder(inspect.Config{Replica: replica})
	cfg := Config{API: api, Auth: api, Traffic: rec, Entries: inspect.DefaultEntries, AccountBytes: inspect.DefaultAccountBytes, Replica: replica}
	for _, f := range configure {
		f(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	late.h = Mount(api, h)
	return &env{t: t, st: st, rec: rec, h: h, url: srv.URL}
}

type lateHandler struct{ h http.Handler }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.h.ServeHTTP(w, r) }

// account is an account with an admin and its API key.
type account struct {
	id, token string
	caller    ep.Caller
}

func (e *env) account(name string) account {
	e.t.Helper()
	admin, _, err := e.st.EnsureAccount(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return account{id: admin.AccountID, token: e.key(admin), caller: admin}
}

// key makes another API key of the caller, as `edgeplane apikey create` does.
func (e *env) key(c ep.Caller) string {
	e.t.Helper()
	doc, err := e.st.Create(context.Background(), c, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		e.t.Fatal(err)
	}
	return *doc.(*ep.APIKey).Token
}

// api calls the API with a token and decodes the answer into out; it returns the status.
func (e *env) api(token, method, path string, body, out any) int {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode
}

// must is api that fails the test on a status other than want, returning the object's id.
func (e *env) must(token, method, path string, body any, want int) string {
	e.t.Helper()
	var out map[string]any
	if st := e.api(token, method, path, body, &out); st != want {
		e.t.Fatalf("%s %s: status %d, want %d: %v", method, path, st, want, out)
	}
	id, _ := out["id"].(string)
	return id
}

// browser is a client with cookies that does not follow redirects, as the tests look at them.
type browser struct {
	t    *testing.T
	e    *env
	c    *http.Client
	csrf string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// response is an answer with its body read.
type response struct {
	*http.Response
	body string
}

func (b *browser) do(method, path string, form url.Values, header map[string]string) response {
	b.t.Helper()
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.e.url+path, rd)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{resp, string(data)}
}

func (b *browser) get(path string) response { return b.do("GET", path, nil, nil) }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf returns the CSRF token of a page's forms.
func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%.2000s", body)
	}
	return m[1]
}

// signin signs in with a token through the sign-in form and keeps the session's CSRF token.
func (b *browser) signin(token string) {
	b.t.Helper()
	page := b.get(Prefix + "signin")
	r := b.do("POST", Prefix+"signin", url.Values{"csrf": {csrfOf(b.t, page.body)}, "token": {token}, "next": {Prefix}}, nil)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != Prefix {
		b.t.Fatalf("sign-in: %d %s\n%.1000s", r.StatusCode, r.Header.Get("Location"), r.body)
	}
	home := b.get(Prefix)
	if home.StatusCode != http.StatusOK {
		b.t.Fatalf("overview after sign-in: %d", home.StatusCode)
	}
	b.csrf = csrfOf(b.t, home.body)
}

// post sends a console form with the session's CSRF token, as the console's own page does.
func (b *browser) post(path string, form url.Values) response {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if form.Get("csrf") == "" {
		form.Set("csrf", b.csrf)
	}
	return b.do("POST", path, form, map[string]string{"Origin": b.e.url, "Sec-Fetch-Site": "same-origin"})
}

// record keeps a traffic entry of the account, as the public listeners would.
func (e *env) record(account string, entry inspect.Entry) *inspect.Entry {
	entry.Account = account
	if entry.Time.IsZero() {
		entry.Time = time.Now()
	}
	if entry.Kind == "" {
		entry.Kind = inspect.KindHTTPS
	}
	if entry.Host == "" {
		entry.Host = "app.example.com"
	}
	if entry.Client == "" {
		entry.Client = "203.0.113.9:50000"
	}
	x := entry
	e.rec.Record(&x)
	return &x
}
