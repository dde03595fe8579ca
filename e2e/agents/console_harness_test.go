package agents

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the console's tests: a signed-in console client, the inspector's entries as its
// data calls show them, and upstreams that count what reaches them.

// consoleClient is a signed-in console session, as a browser holds one.
type consoleClient struct {
	t    *testing.T
	w    *world
	c    *http.Client
	csrf string
}

var csrfValue = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// console signs in to the console with an API key.
func (w *world) console(token string) *consoleClient {
	w.t.Helper()
	jar, _ := cookiejar.New(nil)
	cc := &consoleClient{t: w.t, w: w, c: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	page := cc.get("/console/signin")
	m := csrfValue.FindStringSubmatch(page)
	if m == nil {
		w.t.Fatalf("no sign-in form:\n%.1000s", page)
	}
	if st, _ := cc.post("/console/signin", url.Values{"csrf": {m[1]}, "token": {token}}); st != http.StatusSeeOther {
		w.t.Fatalf("sign-in: %d", st)
	}
	home := cc.get("/console/")
	if m = csrfValue.FindStringSubmatch(home); m == nil {
		w.t.Fatalf("not signed in:\n%.1000s", home)
	}
	cc.csrf = m[1]
	return cc
}

func (cc *consoleClient) get(path string) string {
	cc.t.Helper()
	resp, err := cc.c.Get(cc.w.api + path)
	if err != nil {
		cc.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// post sends a form as the console's page does, with its CSRF token; it returns the status and
// the body.
func (cc *consoleClient) post(path string, form url.Values) (int, string) {
	cc.t.Helper()
	if form.Get("csrf") == "" {
		form.Set("csrf", cc.csrf)
	}
	req, _ := http.NewRequest("POST", cc.w.api+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", cc.w.api)
	resp, err := cc.c.Do(req)
	if err != nil {
		cc.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// inspected is an entry as the console's data calls show it.
type inspected struct {
	ID             uint64      `json:"id"`
	Replica        string      `json:"replica"`
	Kind           string      `json:"kind"`
	Client         string      `json:"client"`
	Host           string      `json:"host"`
	Method         string      `json:"method"`
	Path           string      `json:"path"`
	Status         int         `json:"status"`
	BytesIn        int64       `json:"bytes_in"`
	BytesOut       int64       `json:"bytes_out"`
	Target         string      `json:"target"`
	Endpoint       string      `json:"endpoint"`
	Edge           string      `json:"edge"`
	Route          string      `json:"route"`
	Backend        string      `json:"backend"`
	ErrorCode      string      `json:"error_code"`
	Note           string      `json:"note"`
	URL            string      `json:"url"`
	RequestHeader  headerLines `json:"request_header"`
	ResponseHeader headerLines `json:"response_header"`
	RequestBody    []byte      `json:"request_body"`
	RequestBodyCut bool        `json:"request_body_cut"`
	ResponseBody   []byte      `json:"response_body"`
	Bodies         bool        `json:"bodies"`
	DurationMS     float64     `json:"duration_ms"`
}

// headerLines is a recorded header as the data calls show it: its lines.
type headerLines []struct{ Name, Value string }

// values returns the values of the header name.
func (h headerLines) values(name string) []string {
	var out []string
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			out = append(out, f.Value)
		}
	}
	return out
}

// traffic returns the account's newest entries and the replica that recorded them.
func (cc *consoleClient) traffic() ([]inspected, string) {
	cc.t.Helper()
	var out struct {
		Replica string      `json:"replica"`
		Entries []inspected `json:"entries"`
	}
	body := cc.get("/console/api/traffic")
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		cc.t.Fatalf("traffic: %v: %.500s", err, body)
	}
	return out.Entries, out.Replica
}

// detail returns an entry in full, and the raw JSON it came in.
func (cc *consoleClient) detail(e inspected) (inspected, string) {
	cc.t.Helper()
	raw := cc.get(strings.Replace(e.URL, "/console/traffic/", "/console/api/traffic/", 1))
	var out inspected
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		cc.t.Fatalf("detail: %v: %.500s", err, raw)
	}
	return out, raw
}

// waitFor waits until an entry matching match is listed, and returns it.
func (cc *consoleClient) waitFor(what string, match func(inspected) bool) inspected {
	cc.t.Helper()
	var found inspected
	eventually(cc.t, 2*time.Second, "the inspector lists "+what, func() bool {
		entries, _ := cc.traffic()
		for _, e := range entries {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// echoConns answers every connection of l with "echo:" and what it read up to its end.
func echoConns(l net.Listener) { echoConnsAs(l, "echo:") }

// pingConn writes "ping" on c, half-closes it, and returns what came back.
func pingConn(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, _ = c.Write([]byte("ping"))
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// countingHandler counts the requests of each path, and answers hello.
type countingHandler struct {
	mu      sync.Mutex
	seen    map[string]int
	headers map[string]http.Header // the last request's, by path
	// status, when set, chooses the answer's status (200 otherwise).
	status func(r *http.Request) int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.seen == nil {
		h.seen, h.headers = map[string]int{}, map[string]http.Header{}
	}
	h.seen[r.URL.Path]++
	h.headers[r.URL.Path] = r.Header.Clone()
	h.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Set-Cookie", "upstream-session=sekret-set-cookie")
	if h.status != nil {
		w.WriteHeader(h.status(r))
	}
	hello(w, r)
}

func (h *countingHandler) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[path]
}

// header returns the last request's headers of a path.
func (h *countingHandler) header(path string) http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.headers[path]
}

func mustDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return c
}
