package enforce

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// TestRequestHeaders: remove deletes in any case, add replaces an existing value, a name added
// twice gets both values, and the edits reach the outgoing request after the proxy's own
// headers (EditOutbound), a removed User-Agent staying absent.
func TestRequestHeaders(t *testing.T) {
	h, err := NewRequestHeaders([]HeaderValue{{"x-env", "prod"}, {"X-Multi", "a"}, {"x-multi", "b"}, {"x-forwarded-host", "public.example"}},
		[]string{"X-SECRET", "user-agent", "X-Forwarded-For"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Name() != "request_headers" {
		t.Errorf("name %q", h.Name())
	}
	var seen, out http.Header
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		// What the proxy does next: add its headers to the outgoing request, then the edits.
		out = r.Header.Clone()
		out.Set("X-Forwarded-For", "192.0.2.1")
		out.Set("X-Forwarded-Host", "shop.example.com")
		out["User-Agent"] = nil
		EditOutbound(r.Context(), out)
	})
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Env", "dev")
	r.Header["x-secret"] = []string{"hand-built lower case"}
	r.Header.Set("X-Secret", "s")
	r.Header.Set("User-Agent", "curl/8")
	r.Header.Set("X-Keep", "k")
	h.Wrap(final).ServeHTTP(httptest.NewRecorder(), r)

	want := http.Header{"X-Env": {"prod"}, "X-Multi": {"a", "b"}, "X-Keep": {"k"}, "X-Forwarded-Host": {"public.example"}}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("upstream saw %v, want %v", seen, want)
	}
	if r.Header.Get("X-Env") != "dev" || r.Header.Get("X-Secret") != "s" {
		t.Errorf("the caller's request was modified: %v", r.Header)
	}
	if _, ok := out["X-Forwarded-For"]; ok {
		t.Errorf("X-Forwarded-For added by the proxy was not removed: %v", out)
	}
	if v, ok := out["User-Agent"]; !ok || v != nil {
		t.Errorf("a removed User-Agent must stay present and empty (so Go sends none): %v %v", v, ok)
	}
	if got := out.Get("X-Forwarded-Host"); got != "public.example" {
		t.Errorf("X-Forwarded-Host %q, want the configured value", got)
	}
	// A request that passed no stage is left alone.
	plain := http.Header{"A": {"1"}}
	EditOutbound(httptest.NewRequest("GET", "/", nil).Context(), plain)
	if !reflect.DeepEqual(plain, http.Header{"A": {"1"}}) {
		t.Errorf("EditOutbound without a stage changed %v", plain)
	}
}

// TestResponseHeaders: the edits apply to the final response (also an error page written by
// a later stage, and a response only flushed), not to a 1xx informational one.
func TestResponseHeaders(t *testing.T) {
	h, err := NewResponseHeaders([]HeaderValue{{"Strict-Transport-Security", "max-age=60"}, {"server", "edge"}}, []string{"x-powered-by"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Name() != "response_headers" {
		t.Errorf("name %q", h.Name())
	}
	srv := httptest.NewServer(h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Powered-By", "php")
		w.Header().Set("Server", "apache")
		switch r.URL.Path {
		case "/hint":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Write([]byte("ok"))
		case "/refuse":
			ErrorPage(w, r, http.StatusForbidden, 3211, "no")
		case "/flush":
			http.NewResponseController(w).Flush()
		}
	})))
	defer srv.Close()
	for _, path := range []string{"/hint", "/refuse", "/flush"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Powered-By") != "" || resp.Header.Get("Server") != "edge" || resp.Header.Get("Strict-Transport-Security") != "max-age=60" {
			t.Errorf("%s: %v", path, resp.Header)
		}
	}
	// The 103 went out as the upstream wrote it (its headers at that moment, unedited).
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET /hint HTTP/1.1\r\nHost: x\r\n\r\n"))
	status, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(status, "103") {
		t.Errorf("the informational response was not passed: %q", status)
	}
}

// TestHeadersRefuseBadText: empty names and control characters in names or values refuse the
// stage; a tab in a value is allowed.
func TestHeadersRefuseBadText(t *testing.T) {
	for _, c := range []struct {
		add    []HeaderValue
		remove []string
	}{
		{add: []HeaderValue{{"", "v"}}},
		{add: []HeaderValue{{"X-A", "v\r\nX-Injected: 1"}}},
		{add: []HeaderValue{{"X A", "v"}}},
		{add: []HeaderValue{{"X-A:", "v"}}},
		{remove: []string{""}},
		{remove: []string{"X-\nA"}},
	} {
		if _, err := NewRequestHeaders(c.add, c.remove); err == nil {
			t.Errorf("%v %v accepted", c.add, c.remove)
		}
		if _, err := NewResponseHeaders(c.add, c.remove); err == nil {
			t.Errorf("%v %v accepted for responses", c.add, c.remove)
		}
	}
	if _, err := NewRequestHeaders([]HeaderValue{{"X-A", "a\tb"}}, nil); err != nil {
		t.Errorf("a tab in a value: %v", err)
	}
}
