package enforce

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// policyUpstream is a real upstream server answering a compressible page to a GET of any path
// but /, and "upstream <body>" otherwise, counting the requests it got.
type policyUpstream struct {
	*httptest.Server
	hits atomic.Int64
}

// policyFront starts an upstream and, in front of it, a server running doc's stage (built
// with o) before a reverse proxy to the upstream; it returns the front's URL.
func policyFront(t *testing.T, doc string, o PolicyOptions) (string, *policyUpstream) {
	t.Helper()
	p, err := trafficpolicy.Parse(doc)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	st, err := NewTrafficPolicyWith(p, o)
	if err != nil {
		t.Fatalf("stage: %v", err)
	}
	up := &policyUpstream{}
	up.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.hits.Add(1)
		if r.URL.Path != "/" && (r.Method == "GET" || r.Method == "HEAD") {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, strings.Repeat("a compressible page ", 200))
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "upstream "+string(b))
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	front := httptest.NewServer(st.Wrap(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(front.Close)
	return front.URL, up
}

// do sends a request with headers and returns the response with its body read.
func do(t *testing.T, method, u string, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func rateLimitDoc(capacity int, rate string, keys ...string) string {
	return fmt.Sprintf(`{"on_http_request":[{"expressions":["req.url.path != '/free'"],"actions":[{"type":"rate-limit","config":
	  {"name":"test","algorithm":"sliding_window","capacity":%d,"rate":%q,"bucket_key":[%s]}}]}]}`,
		capacity, rate, `"`+strings.Join(keys, `","`)+`"`)
}

// tooMany checks a refusal: 429 with a Retry-After of 1 to max seconds, no ngrok error code.
func tooMany(t *testing.T, what string, resp *http.Response, maxSecs int) {
	t.Helper()
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || err != nil || ra < 1 || ra > maxSecs || resp.Header.Get("ngrok-error-code") != "" {
		t.Errorf("%s: %d Retry-After %q code %q, want 429 with Retry-After 1..%d", what, resp.StatusCode,
			resp.Header.Get("Retry-After"), resp.Header.Get("ngrok-error-code"), maxSecs)
	}
}

// TestPolicyRateLimit: a capacity of N admits N requests of a bucket in the window and answers
// the next 429 with Retry-After (the upstream never sees it); each bucket key value has its
// own bucket, a request without the keyed header shares the bucket of requests without it, and
// a rule whose expression does not hold does not count.
func TestPolicyRateLimit(t *testing.T) {
	front, up := policyFront(t, rateLimitDoc(3, "60s", "conn.client_ip", "req.headers['x-api-key']"), PolicyOptions{})
	alice := map[string]string{"X-Api-Key": "alice"}
	for i := range 3 {
		if resp, body := do(t, "GET", front+"/", "", alice); resp.StatusCode != 200 || body != "upstream " {
			t.Fatalf("request %d of 3: %d %q", i+1, resp.StatusCode, body)
		}
	}
	resp, body := do(t, "GET", front+"/", "", alice)
	tooMany(t, "the 4th request", resp, 60)
	if !strings.Contains(body, "Too Many Requests") || up.hits.Load() != 3 {
		t.Errorf("the refusal: %q, upstream hits %d", body, up.hits.Load())
	}
	if resp, _ := do(t, "GET", front+"/", "", map[string]string{"X-Api-Key": "bob"}); resp.StatusCode != 200 {
		t.Errorf("another key's bucket: %d", resp.StatusCode)
	}
	for i := range 3 {
		if resp, _ := do(t, "GET", front+"/", "", nil); resp.StatusCode != 200 {
			t.Fatalf("request %d without the header: %d", i+1, resp.StatusCode)
		}
	}
	resp, _ = do(t, "GET", front+"/", "", nil)
	tooMany(t, "the 4th request without the header", resp, 60)
	if resp, _ := do(t, "GET", front+"/free", "", alice); resp.StatusCode != 200 {
		t.Errorf("a request the rule does not match: %d", resp.StatusCode)
	}

	// enforce: false counts and refuses nothing.
	doc := strings.Replace(rateLimitDoc(1, "60s", "conn.client_ip"), `"name"`, `"enforce":false,"name"`, 1)
	front, _ = policyFront(t, doc, PolicyOptions{})
	for i := range 3 {
		if resp, _ := do(t, "GET", front+"/", "", nil); resp.StatusCode != 200 {
			t.Errorf("enforce false, request %d: %d", i+1, resp.StatusCode)
		}
	}
}

// TestPolicyRateLimitWindow: once refused, a bucket admits again a window later (polled, with a
// rate of one second).
func TestPolicyRateLimitWindow(t *testing.T) {
	front, _ := policyFront(t, rateLimitDoc(1, "1s", "conn.client_ip"), PolicyOptions{})
	if resp, _ := do(t, "GET", front+"/", "", nil); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	resp, _ := do(t, "GET", front+"/", "", nil)
	if resp.StatusCode == 200 {
		t.Skip("the machine took over a second between two requests") // the window had passed
	}
	tooMany(t, "the second request", resp, 2)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, _ := do(t, "GET", front+"/", "", nil)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d 30 s later", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPolicyRateLimitKeptByOptions: with PolicyOptions.Limiter, two stages built from the same
// document share the limiter the caller keeps (the plan keeps it across rebuilds), under a key
// naming the action and its configuration.
func TestPolicyRateLimitKeptByOptions(t *testing.T) {
	kept := map[string]*RateLimiter{}
	o := PolicyOptions{Limiter: func(key string, create func() *RateLimiter) *RateLimiter {
		if kept[key] == nil {
			kept[key] = create()
		}
		return kept[key]
	}}
	doc := rateLimitDoc(1, "60s", "conn.client_ip")
	one, _ := policyFront(t, doc, o)
	two, _ := policyFront(t, doc, o)
	if resp, _ := do(t, "GET", one+"/", "", nil); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	resp, _ := do(t, "GET", two+"/", "", nil)
	tooMany(t, "the second request, through a rebuilt stage", resp, 60)
	if len(kept) != 1 {
		t.Errorf("limiters kept: %v", kept)
	}
	for k := range kept {
		if !strings.HasPrefix(k, "on_http_request[0].actions[0] ") || !strings.Contains(k, `"capacity":1`) {
			t.Errorf("limiter key %q", k)
		}
	}
}

// TestRateLimiter: the sliding window's counts and Retry-After against a clock the test moves,
// and the bound on buckets: a client making up keys never makes the limiter hold more than
// MaxRateLimitBuckets, and buckets idle for two windows are dropped.
func TestRateLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewRateLimiter(2, time.Minute)
	l.now = func() time.Time { return now }
	key := []string{"192.0.2.1"}
	for i := range 2 {
		if ok, _ := l.Take(key); !ok {
			t.Fatalf("request %d refused", i+1)
		}
	}
	if ok, retry := l.Take(key); ok || retry <= 59*time.Second || retry > 61*time.Second {
		t.Errorf("over the limit: %v, retry in %v, want about 60 s", ok, retry)
	}
	now = now.Add(90 * time.Second) // half the window before still weighs: 2 × 0.5 = 1 < 2
	if ok, _ := l.Take(key); !ok {
		t.Error("refused with one request's room in the sliding window")
	}
	if ok, retry := l.Take(key); ok || retry <= 0 || retry > 30*time.Second+time.Millisecond {
		t.Errorf("the window is full again: %v, retry in %v", ok, retry)
	}
	// Parts are hashed length-prefixed: ("a","bc") and ("ab","c") are different buckets.
	if keyID([]string{"a", "bc"}) == keyID([]string{"ab", "c"}) {
		t.Error("two key lists share a bucket")
	}

	l = NewRateLimiter(1, time.Minute)
	l.now = func() time.Time { return now }
	for i := range MaxRateLimitBuckets + 500 {
		l.Take([]string{strconv.Itoa(i)})
	}
	if n := l.Buckets(); n != MaxRateLimitBuckets {
		t.Errorf("%d buckets, want the bound %d", n, MaxRateLimitBuckets)
	}
	if ok, _ := l.Take([]string{"0"}); !ok {
		t.Error("the least recently used bucket was not the one forgotten")
	}
	now = now.Add(2 * time.Minute)
	l.Take([]string{"new"})
	if n := l.Buckets(); n != 1 {
		t.Errorf("%d buckets after two idle windows, want 1", n)
	}
}

// TestPolicyRateLimitRefused: what ngrok refuses in rate-limit's configuration is refused by
// Parse (the API's 400), naming the field.
func TestPolicyRateLimitRefused(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"algorithm":"sliding_window","capacity":1,"rate":"60s","bucket_key":["conn.client_ip"]}`:             "config.name: is required",
		`{"name":"x","algorithm":"token_bucket","capacity":1,"rate":"60s","bucket_key":["conn.client_ip"]}`:    "must be sliding_window",
		`{"name":"x","algorithm":"sliding_window","capacity":0,"rate":"60s","bucket_key":["conn.client_ip"]}`:  "config.capacity",
		`{"name":"x","algorithm":"sliding_window","capacity":1,"rate":"soon","bucket_key":["conn.client_ip"]}`: "config.rate",
		`{"name":"x","algorithm":"sliding_window","capacity":1,"rate":"48h","bucket_key":["conn.client_ip"]}`:  "config.rate",
		`{"name":"x","algorithm":"sliding_window","capacity":1,"rate":"60s","bucket_key":[]}`:                  "config.bucket_key",
		`{"name":"x","algorithm":"sliding_window","capacity":1,"rate":"60s","bucket_key":["req.nope"]}`:        "config.bucket_key[0]",
		`{"name":"x","algorithm":"sliding_window","capacity":1,"rate":"60s","bucket_key":["x"],"burst":2}`:     `unknown field "burst"`,
	} {
		_, err := trafficpolicy.Parse(`{"on_http_request":[{"actions":[{"type":"rate-limit","config":` + cfg + `}]}]}`)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}
