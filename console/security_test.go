package console

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/testdb"
)

// concrete fills a route's wildcards.
func concrete(path string) string {
	return strings.NewReplacer("{$}", "", "{replica}", replica, "{id}", "1", "{command}", "stop").Replace(path)
}

// Without a session, every page redirects to the sign-in page, every data call is 401, and
// every form is refused or sent to sign in; a forged cookie is no session.
func TestWithoutASessionNothingIsShown(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	e.record(a.id, inspect.Entry{Method: "GET", Path: "/private"})
	for _, cookie := range []string{"", "forged-session-id"} {
		for _, rt := range e.h.routes {
			b := e.browser()
			hd := map[string]string{}
			if cookie != "" {
				hd["Cookie"] = cookieName + "=" + cookie
			}
			path := concrete(rt.path)
			switch rt.kind {
			case kindPage:
				r := b.do("GET", path, nil, hd)
				if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), Prefix+"signin") {
					t.Errorf("GET %s without a session (cookie %q): %d %q, want a redirect to the sign-in page", path, cookie, r.StatusCode, r.Header.Get("Location"))
				}
			case kindData:
				r := b.do("GET", path, nil, hd)
				if r.StatusCode != http.StatusUnauthorized || !strings.Contains(r.Header.Get("Content-Type"), "json") || strings.Contains(r.body, "private") {
					t.Errorf("GET %s without a session (cookie %q): %d %q %s, want 401 JSON", path, cookie, r.StatusCode, r.Header.Get("Content-Type"), r.body)
				}
			case kindForm:
				hd["Origin"] = e.url
				r := b.do("POST", path, url.Values{"csrf": {"x"}, "on": {"true"}}, hd)
				if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), Prefix+"signin") {
					t.Errorf("POST %s without a session (cookie %q): %d %q, want a redirect to the sign-in page", path, cookie, r.StatusCode, r.Header.Get("Location"))
				}
			}
		}
	}
	if e.rec.Bodies(a.id) {
		t.Fatal("a form without a session changed the account's setting")
	}
}

func TestSignin(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	b := e.browser()
	page := b.get(Prefix + "signin?next=" + url.QueryEscape(Prefix+"traffic"))
	if page.StatusCode != http.StatusOK || !strings.Contains(page.body, `value="/console/traffic"`) {
		t.Fatalf("sign-in page: %d", page.StatusCode)
	}
	csrf := csrfOf(t, page.body)
	same := map[string]string{"Origin": e.url}
	for _, c := range []struct {
		name, token string
		status      int
		text        string
	}{
		{"empty", "", 401, "Enter an API key"},
		{"malformed", "not-a-token", 401, "not in the format of an API key token"},
		{"unknown", strings.Repeat("A", 27) + "_" + strings.Repeat("B", 52), 401, "not valid"},
	} {
		r := b.do("POST", Prefix+"signin", url.Values{"csrf": {csrf}, "token": {c.token}}, same)
		if r.StatusCode != c.status || !strings.Contains(r.body, c.text) {
			t.Errorf("%s token: %d, want %d with %q:\n%.600s", c.name, r.StatusCode, c.status, c.text, r.body)
		}
		csrf = csrfOf(t, r.body) // each form comes with a new token
	}
	// The form's token must match its cookie, and come from this origin.
	for name, hd := range map[string]map[string]string{
		"another origin":     {"Origin": "https://evil.example"},
		"a cross-site fetch": {"Sec-Fetch-Site": "cross-site"},
	} {
		r := b.do("POST", Prefix+"signin", url.Values{"csrf": {csrf}, "token": {a.token}}, hd)
		if r.StatusCode != http.StatusForbidden {
			t.Errorf("sign-in from %s: %d, want 403", name, r.StatusCode)
		}
	}
	if r := b.do("POST", Prefix+"signin", url.Values{"csrf": {"wrong"}, "token": {a.token}}, same); r.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in with another form's token: %d, want 403", r.StatusCode)
	}
	if r := e.browser().do("POST", Prefix+"signin", url.Values{"csrf": {csrf}, "token": {a.token}}, same); r.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in without the form's cookie: %d, want 403", r.StatusCode)
	}
	r := b.do("POST", Prefix+"signin", url.Values{"csrf": {csrf}, "token": {a.token}, "next": {Prefix + "traffic"}}, same)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != Prefix+"traffic" {
		t.Fatalf("sign-in: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range r.Cookies() {
		if c.Name == cookieName {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != Prefix || session.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/console/, not Secure over http", session)
	}
	if strings.Contains(session.Value, a.token) {
		t.Fatal("the session cookie holds the API key")
	}
	// Signing out ends the session on the server: the old cookie opens nothing.
	home := b.get(Prefix)
	if home.StatusCode != http.StatusOK || !strings.Contains(home.body, a.id) {
		t.Fatalf("overview: %d", home.StatusCode)
	}
	b.csrf = csrfOf(t, home.body)
	if r := b.post(Prefix+"signout", nil); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", r.StatusCode)
	}
	replayed := e.browser().do("GET", Prefix, nil, map[string]string{"Cookie": cookieName + "=" + session.Value})
	if replayed.StatusCode != http.StatusSeeOther {
		t.Fatalf("the signed-out session's cookie still opens the overview: %d", replayed.StatusCode)
	}
}

func TestSigninNextStaysInTheConsole(t *testing.T) {
	for next, want := range map[string]string{
		"/console/traffic?host=a": "/console/traffic?host=a", "//evil.example/": Prefix, "https://evil.example/": Prefix,
		"/api_keys": Prefix, "/console/\\evil": Prefix, "": Prefix,
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestSecureCookieOverHTTPS(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Secure = true })
	w := &bufferWriter{header: http.Header{}}
	e.h.setCookie(w, e.h.cookieName(), "v", time.Hour)
	c, err := http.ParseSetCookie(w.header.Get("Set-Cookie"))
	if err != nil || c.Name != secureCookieName || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie over https: %+v %v", c, err)
	}
}

// A form posted from another origin, or without the session's token, is refused and changes
// nothing; the same form from the console's page is accepted.
func TestFormsFromAnotherOriginAreRefused(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	b := e.browser()
	b.signin(a.token)
	for name, c := range map[string]struct {
		form   url.Values
		header map[string]string
	}{
		"another origin":     {url.Values{"csrf": {b.csrf}, "on": {"true"}}, map[string]string{"Origin": "https://evil.example"}},
		"a cross-site fetch": {url.Values{"csrf": {b.csrf}, "on": {"true"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"a same-site fetch":  {url.Values{"csrf": {b.csrf}, "on": {"true"}}, map[string]string{"Sec-Fetch-Site": "same-site"}},
		"no token":           {url.Values{"on": {"true"}}, map[string]string{"Origin": e.url}},
		"a wrong token":      {url.Values{"csrf": {"guess"}, "on": {"true"}}, map[string]string{"Origin": e.url}},
	} {
		r := b.do("POST", Prefix+"traffic/bodies", c.form, c.header)
		if r.StatusCode != http.StatusForbidden {
			t.Errorf("form from %s: %d, want 403", name, r.StatusCode)
		}
		if e.rec.Bodies(a.id) {
			t.Fatalf("form from %s changed the setting", name)
		}
	}
	if r := b.do("POST", Prefix+"signout", url.Values{"csrf": {b.csrf}}, map[string]string{"Origin": "https://evil.example"}); r.StatusCode != http.StatusForbidden {
		t.Errorf("sign-out from another origin: %d, want 403", r.StatusCode)
	}
	if r := b.post(Prefix+"traffic/bodies", url.Values{"on": {"true"}}); r.StatusCode != http.StatusSeeOther || !e.rec.Bodies(a.id) {
		t.Fatalf("the console's own form: %d, bodies %v", r.StatusCode, e.rec.Bodies(a.id))
	}
	// Another browser's session token does not pass for this one's.
	other := e.browser()
	other.signin(a.token)
	if r := b.post(Prefix+"traffic/bodies", url.Values{"csrf": {other.csrf}, "on": {"false"}}); r.StatusCode != http.StatusForbidden {
		t.Fatalf("another session's token: %d, want 403", r.StatusCode)
	}
}

// Account B never sees account A's objects or traffic, on any page or data call, nor changes
// them; A sees its own.
func TestAccountsSeeOnlyTheirOwn(t *testing.T) {
	e := newEnv(t)
	a, bAcct := e.account("a"), e.account("b")
	e.must(a.token, "POST", "/reserved_domains", map[string]any{"domain": "a-secret.example.com"}, 201)
	group := e.must(a.token, "POST", "/backends/tunnel_group", map[string]any{"labels": map[string]string{"team": "team-of-a"}}, 201)
	edge := e.must(a.token, "POST", "/edges/https", map[string]any{"hostports": []string{"a-secret.example.com:443"}, "description": "edge-of-a"}, 201)
	e.must(a.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}, "compression": map[string]any{"enabled": true}}, 201)
	e.must(a.token, "POST", "/credentials", map[string]any{"description": "cred-of-a"}, 201)
	entryA := e.record(a.id, inspect.Entry{Method: "GET", Path: "/a-only-path", Host: "a-secret.example.com", Status: 200})
	entryB := e.record(bAcct.id, inspect.Entry{Method: "GET", Path: "/b-path", Status: 200})

	secretsOfA := []string{"a-secret", edge, group, "edge-of-a", "cred-of-a", "team-of-a", "/a-only-path", a.id}
	bb := e.browser()
	bb.signin(bAcct.token)
	for _, page := range []string{"", "agents", "edges", "domains", "traffic", "api/traffic", "traffic?host=a-secret"} {
		r := bb.get(Prefix + page)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("B's %s: %d", page, r.StatusCode)
		}
		for _, s := range secretsOfA {
			if strings.Contains(page, "host=") && s == "a-secret" {
				continue // B's own filter, shown back in its form
			}
			if strings.Contains(r.body, s) {
				t.Errorf("B's page %q shows A's %q", page, s)
			}
		}
	}
	for _, path := range []string{"traffic/", "api/traffic/"} {
		r := bb.get(Prefix + path + replica + "/" + strconv.FormatUint(entryA.ID, 10))
		if r.StatusCode != http.StatusNotFound || strings.Contains(r.body, "a-only") {
			t.Errorf("B's %s of A's entry: %d", path, r.StatusCode)
		}
	}
	// B's forms on A's objects are refused by the API and change nothing.
	r := bb.post(Prefix+"modules", url.Values{"parent": {"https_edge"}, "edge": {edge}, "module": {"mutual_tls"}, "on": {"false"}})
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("B's module form on A's edge: %d, want 404", r.StatusCode)
	}
	if r := bb.post(Prefix+"traffic/"+replica+"/"+strconv.FormatUint(entryA.ID, 10)+"/replay", url.Values{"mode": {"recorded"}}); r.StatusCode != http.StatusNotFound {
		t.Errorf("B's replay of A's entry: %d, want 404", r.StatusCode)
	}
	// B's live view carries B's traffic only.
	events := bb.stream(t)
	e.record(a.id, inspect.Entry{Method: "GET", Path: "/a-live-path"})
	e.record(bAcct.id, inspect.Entry{Method: "GET", Path: "/b-live-path"})
	if got := <-events; !strings.Contains(got, "/b-live-path") || strings.Contains(got, "a-live") {
		t.Fatalf("B's live view's first entry: %s", got)
	}
	// A sees its own.
	ab := e.browser()
	ab.signin(a.token)
	for page, want := range map[string]string{"edges": "edge-of-a", "domains": "a-secret.example.com", "": "cred-of-a",
		"traffic": "/a-only-path", "traffic/" + replica + "/" + strconv.FormatUint(entryA.ID, 10): "/a-only-path"} {
		if r := ab.get(Prefix + page); r.StatusCode != 200 || !strings.Contains(r.body, want) {
			t.Errorf("A's %q: %d, want it to show %q", page, r.StatusCode, want)
		}
	}
	if r := ab.get(Prefix + "traffic/" + replica + "/" + strconv.FormatUint(entryB.ID, 10)); r.StatusCode != http.StatusNotFound {
		t.Errorf("A's detail of B's entry: %d", r.StatusCode)
	}
}

// stream opens the live view and returns the data lines of its entry events.
func (b *browser) stream(t *testing.T) <-chan string {
	t.Helper()
	req, _ := http.NewRequest("GET", b.e.url+Prefix+"api/traffic/stream", nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := b.c.Do(req.WithContext(ctx))
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live view: %v %v", err, resp)
	}
	out := make(chan string, 16)
	ready := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "ready":
				close(ready)
			case strings.HasPrefix(line, "data: ") && event == "entry":
				out <- strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("the live view never said it was ready")
	}
	return out
}

// Paths, header values and descriptions holding markup and quotes are shown as text.
func TestUntrustedTextIsShownAsText(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	const evil = `<script>alert("x")</script>'"><img src=x onerror=alert(1)>`
	e.must(a.token, "POST", "/reserved_domains", map[string]any{"domain": "evil.example.com", "description": evil}, 201)
	edge := e.must(a.token, "POST", "/edges/https", map[string]any{"hostports": []string{"evil.example.com:443"}, "description": evil}, 201)
	e.must(a.token, "POST", "/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "description": evil,
		"request_headers": map[string]any{"add": map[string]string{"X-Evil": evil}}}, 201)
	entry := e.record(a.id, inspect.Entry{Method: "POST", Path: "/" + url.PathEscape(evil) + "?q=" + evil, Host: "evil.example.com", Status: 500,
		Bodies: true, RequestHeader: inspect.Header{{Name: "X-Evil", Value: evil}}, ResponseHeader: inspect.Header{{Name: "X-Answer", Value: evil}},
		RequestBody: []byte(evil), ResponseBody: []byte(evil), BytesIn: int64(len(evil)), BytesOut: int64(len(evil))})
	b := e.browser()
	b.signin(a.token)
	id := strconv.FormatUint(entry.ID, 10)
	for _, page := range []string{"", "edges", "domains", "traffic", "traffic/" + replica + "/" + id} {
		r := b.get(Prefix + page)
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d", page, r.StatusCode)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", `"><img`} {
			if strings.Contains(r.body, raw) {
				t.Errorf("page %q holds the markup %q unescaped", page, raw)
			}
		}
		if page != "" && !strings.Contains(r.body, "&lt;script&gt;alert(") && !strings.Contains(r.body, "%3Cscript%3E") {
			t.Errorf("page %q does not show the text at all", page)
		}
	}
	for _, path := range []string{"api/traffic", "api/traffic/" + replica + "/" + id} {
		if r := b.get(Prefix + path); strings.Contains(r.body, "<script>") {
			t.Errorf("data call %s holds raw markup", path)
		}
	}
}

// A deleted key ends its sessions at once: the next page goes to the sign-in form, the next
// data call is 401.
func TestDeletedKeyEndsTheSession(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	second := e.key(a.caller)
	b := e.browser()
	b.signin(second)
	var keys struct {
		Keys []struct{ ID string } `json:"keys"`
	}
	e.api(a.token, "GET", "/api_keys", nil, &keys)
	signedIn := b.keyID(t)
	for _, k := range keys.Keys {
		if k.ID != signedIn {
			continue
		}
		if st := e.api(a.token, "DELETE", "/api_keys/"+k.ID, nil, nil); st != 204 {
			t.Fatalf("delete key: %d", st)
		}
	}
	if r := b.get(Prefix + "api/traffic"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("data call after the key was deleted: %d", r.StatusCode)
	}
	if r := b.get(Prefix + "edges"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("page after the key was deleted: %d", r.StatusCode)
	}
}

func (b *browser) keyID(t *testing.T) string {
	r := b.get(Prefix)
	i := strings.Index(r.body, "signed in with key <code>")
	if i < 0 {
		t.Fatal("the page names no key")
	}
	rest := r.body[i+len("signed in with key <code>"):]
	return rest[:strings.Index(rest, "<")]
}

func TestCommandsAreTheAPIs(t *testing.T) {
	e := newEnv(t)
	a := e.account("a")
	b := e.browser()
	b.signin(a.token)
	if r := b.post(Prefix+"agents/ts_3MQ0000000000000000000000000/stop", nil); r.StatusCode != http.StatusNotFound {
		t.Errorf("stop of an unknown session: %d, want the API's 404", r.StatusCode)
	}
	for _, path := range []string{"agents/ts_1/update", "agents/ts_1/delete", "agents/..%2Fapi_keys/stop"} {
		if r := b.post(Prefix+path, nil); r.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, r.StatusCode)
		}
	}
}

func TestReplayRefusesMalformedRequests(t *testing.T) {
	e := newEnv(t) // no public listener: a replay that is sent fails, and says so
	a := e.account("a")
	entry := e.record(a.id, inspect.Entry{Kind: inspect.KindHTTP, Method: "GET", Path: "/x", Status: 200})
	conn := e.record(a.id, inspect.Entry{Kind: inspect.KindTCP, Host: "tcp.example.com:20000"})
	b := e.browser()
	b.signin(a.token)
	path := func(x *inspect.Entry) string { return fmt.Sprintf("%straffic/%s/%d/replay", Prefix, replica, x.ID) }
	for name, form := range map[string]url.Values{
		"a method with a space":      {"mode": {"edited"}, "method": {"GE T"}, "path": {"/"}},
		"no method":                  {"mode": {"edited"}, "method": {""}, "path": {"/"}},
		"a relative path":            {"mode": {"edited"}, "method": {"GET"}, "path": {"x"}},
		"a path with a newline":      {"mode": {"edited"}, "method": {"GET"}, "path": {"/a\r\nX: y"}},
		"a malformed header":         {"mode": {"edited"}, "method": {"GET"}, "path": {"/"}, "headers": {"no colon here"}},
		"a header name with a space": {"mode": {"edited"}, "method": {"GET"}, "path": {"/"}, "headers": {"Bad Name: v"}},
		"a body over 16 KiB":         {"mode": {"edited"}, "method": {"POST"}, "path": {"/"}, "body": {strings.Repeat("b", 16<<10+1)}},
		"101 headers":                {"mode": {"edited"}, "method": {"GET"}, "path": {"/"}, "headers": {strings.Repeat("X-A: 1\n", 101)}},
	} {
		if r := b.post(path(entry), form); r.StatusCode != http.StatusBadRequest {
			t.Errorf("replay with %s: %d, want 400", name, r.StatusCode)
		}
	}
	if r := b.post(path(conn), url.Values{"mode": {"recorded"}}); r.StatusCode != http.StatusBadRequest {
		t.Errorf("replay of a connection: %d, want 400", r.StatusCode)
	}
	r := b.post(path(entry), url.Values{"mode": {"recorded"}})
	if r.StatusCode != http.StatusOK || !strings.Contains(r.body, "public listener this request came through is off") {
		t.Errorf("replay with the listener off: %d\n%.2000s", r.StatusCode, r.body)
	}
}

// A key that cannot be checked (the database unreachable) is neither accepted nor refused: pages
// and data calls answer 503 and the session survives, so it works again once the database is
// back. PostgreSQL behind a TCP proxy that goes down, as the API's outage tests do.
func TestUnreachableDatabaseIs503(t *testing.T) {
	dsn := testdb.Postgres(t)
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	e := newEnvOn(t, proxy.Redirect(dsn))
	a := e.account("a")
	b := e.browser()
	b.signin(a.token)
	proxy.Down()
	if r := b.get(Prefix + "traffic"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("page: %d, want 503", r.StatusCode)
	}
	if r := b.get(Prefix + "api/traffic"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("data call: %d, want 503\n%s", r.StatusCode, r.body)
	}
	other := e.browser()
	page := other.get(Prefix + "signin")
	r := other.do("POST", Prefix+"signin", url.Values{"csrf": {csrfOf(t, page.body)}, "token": {a.token}}, nil)
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("sign-in while the database is down: %d, want 503", r.StatusCode)
	}
	proxy.Up()
	eventuallyOK(t, func() bool { return b.get(Prefix+"traffic").StatusCode == http.StatusOK })
}

// eventuallyOK polls cond until it holds, failing after 20 s.
func eventuallyOK(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the condition never held")
		}
	}
}
