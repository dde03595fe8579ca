package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// TestBodyBudgetShares: shares are taken while they fit and waited for in arrival order beyond;
// a share larger than the budget is cut to it; a waiter whose deadline passes gets the overload
// error and lets those behind it go on; resize and release give everything back.
func TestBodyBudgetShares(t *testing.T) {
	b := newBodyBudget(100)
	ctx := context.Background()
	a, err := b.take(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	waitFor := func(name string, n int64, ctx context.Context) {
		h, err := b.take(ctx, n)
		if err != nil {
			got <- name + " refused"
			return
		}
		got <- name
		h.release()
	}
	short, cancel := context.WithCancel(ctx)
	go waitFor("big", 1000, short) // cut to 100: waits for everything
	for b.waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	go waitFor("small", 10, ctx) // fits, but arrived after big: waits behind it
	for b.waiting() != 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if first, second := <-got, <-got; first != "big refused" || second != "small" {
		t.Fatalf("got %q then %q, want the big share refused at its deadline, then the small one served", first, second)
	}
	a.resize(20)
	if n := b.inUse(); n != 20 {
		t.Fatalf("%d bytes in use after resizing to 20", n)
	}
	a.release()
	a.release()
	if n := b.inUse(); n != 0 {
		t.Fatalf("%d bytes in use after release", n)
	}
	var e *ep.Error
	if _, err := b.take(canceled(), 1000); err != nil {
		t.Fatalf("a free budget refused a share: %v", err)
	} else if b.inUse() != 100 {
		t.Fatalf("a share of 1000 took %d of 100", b.inUse())
	}
	if _, err := b.take(canceled(), 1); !errors.As(err, &e) || e.Status != 503 || e.Code != ep.CodeUnavailable {
		t.Fatalf("a full budget past the deadline: %v, want 503 ERR_NGROK_9000", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// waiting is the number of requests waiting for a share, for tests.
func (b *bodyBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queue.Len()
}

// budgetServer serves the API over a real socket with the response budget and request timeout
// given, and returns its URL and a key.
func budgetServer(t *testing.T, cfg Config) (*Server, string, string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "budget.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	admin, _, err := st.EnsureAccount(ctx, "budget")
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(st, cfg)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs.URL, *key.(*ep.APIKey).Token
}

// apiCall sends one request and returns the response with its body read.
func apiCall(client *http.Client, token, method, url string, body any) (*http.Response, []byte, error) {
	res, head, _, err := apiCallSize(client, token, method, url, body, 1<<30)
	return res, head, err
}

// apiCallSize sends one request and returns the response, the first keep bytes of its body and
// its size: a client that keeps large answers would fill the test's heap, which the tests
// measure for the server.
func apiCallSize(client *http.Client, token, method, url string, body any, keep int64) (*http.Response, []byte, int64, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Ngrok-Version", "2")
	res, err := client.Do(req)
	if err != nil {
		return nil, nil, 0, err
	}
	defer res.Body.Close()
	head, err := io.ReadAll(io.LimitReader(res.Body, keep))
	if err != nil {
		return nil, nil, 0, err
	}
	rest, err := io.Copy(io.Discard, res.Body)
	return res, head, int64(len(head)) + rest, err
}

// largeEdge makes an HTTPS edge of n routes of about 120 KiB each and returns its id.
func largeEdge(t *testing.T, url, token string, n int) string {
	t.Helper()
	client := &http.Client{}
	res, b, err := apiCall(client, token, "POST", url+"/edges/https", map[string]any{})
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("POST /edges/https: %v %s", err, b)
	}
	var edge struct{ ID string }
	_ = json.Unmarshal(b, &edge)
	policy := "on_http_request: []\n#" + strings.Repeat("p", 64<<10-24)
	for i := range n {
		res, b, err := apiCall(client, token, "POST", url+"/edges/https/"+edge.ID+"/routes", map[string]any{
			"match_type": "path_prefix", "match": fmt.Sprintf("/%04d", i),
			"traffic_policy":  map[string]any{"value": policy},
			"request_headers": map[string]any{"add": map[string]any{"X-Pad": strings.Repeat("h", 56<<10)}}})
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("POST route %d: %v %.200s", i, err, b)
		}
	}
	return edge.ID
}

// heapObjects is the heap's bytes in objects, live or not yet swept.
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestConcurrentLargeGETsShareTheBudget: 24 clients GET an HTTPS edge of 64 routes (an answer of
// about 8 MiB) at once, with a budget of one such answer. Every answer is a 200 with the whole
// edge or a 503 ERR_NGROK_9000 (with Retry-After when the request could not have its share in
// time), the budget is never passed, and the server's heap grows by about one render (the routes
// read, the JSON and its buffer): without the budget every request read and rendered at once.
func TestConcurrentLargeGETsShareTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("renders some 200 MiB of JSON")
	}
	const clients = 24
	budget := int64(ep.MaxHTTPSEdgeResponseBytes)
	s, url, token := budgetServer(t, Config{ResponseBytes: budget})
	id := largeEdge(t, url, token, ep.MaxRoutesPerEdge)
	runtime.GC()
	base := heapObjects()
	var peakHeap, peakBudget atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			if h := heapObjects() - base; h > peakHeap.Load() {
				peakHeap.Store(h)
			}
			if n := s.budget.inUse(); n > peakBudget.Load() {
				peakBudget.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	var (
		mu                  sync.Mutex
		statuses            = map[int]int{}
		budget503, problems []string
	)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		wg.Go(func() {
			res, head, size, err := apiCallSize(client, token, "GET", url+"/edges/https/"+id, nil, 4<<10)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				problems = append(problems, err.Error())
				return
			}
			statuses[res.StatusCode]++
			switch {
			case res.StatusCode == 200:
				if size < ep.MaxRoutesPerEdge*120<<10 {
					problems = append(problems, fmt.Sprintf("a 200 of %d bytes", size))
				}
			case res.StatusCode == 503 && bytes.Contains(head, []byte("ERR_NGROK_9000")):
				// Refused for want of budget, or the database read that followed ran out of the
				// time the wait left.
				if bytes.Contains(head, []byte("too many large answers")) {
					budget503 = append(budget503, res.Header.Get("Retry-After"))
				}
			default:
				problems = append(problems, fmt.Sprintf("%d: %.200s", res.StatusCode, head))
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	t.Logf("%d concurrent GETs of an 8 MiB edge: %d answered 200, %d 503 (%d for want of budget); budget at most %d MiB of %d; heap grew by at most %d MiB",
		clients, statuses[200], statuses[503], len(budget503), peakBudget.Load()>>20, budget>>20, peakHeap.Load()>>20)
	if len(problems) > 0 {
		t.Fatalf("%d bad answers, first: %s", len(problems), problems[0])
	}
	for _, ra := range budget503 {
		if ra != budgetRetryAfter {
			t.Fatalf("a 503 for want of budget with Retry-After %q", ra)
		}
	}
	if statuses[200] == 0 || statuses[200]+statuses[503] != clients {
		t.Fatalf("statuses %v", statuses)
	}
	if peakBudget.Load() > budget {
		t.Fatalf("%d bytes of the budget were taken, over its %d", peakBudget.Load(), budget)
	}
	// One render of some 30 MiB and garbage not yet collected (GOGC 100 lets it reach as much
	// again); without the budget, as many renders as the database has readers, and more.
	if limit := int64(96 << 20); peakHeap.Load() > limit {
		t.Fatalf("the heap grew by %d MiB, over %d MiB", peakHeap.Load()>>20, limit>>20)
	}
}

// TestFullBudgetAnswers503: while the whole budget is taken, a GET that needs a share waits
// until its deadline and is answered 503 ERR_NGROK_9000 with Retry-After; a list too; a request
// with a wrong key is answered 401 at once. Once the budget is free both are served.
func TestFullBudgetAnswers503(t *testing.T) {
	s, url, token := budgetServer(t, Config{RequestTimeout: 300 * time.Millisecond})
	// The large route is created through a server of the same store with the default timeout:
	// under load its create can outlast 300 ms, which only the waits below are meant to meet.
	patient := httptest.NewServer(New(s.store, Config{}))
	t.Cleanup(patient.Close)
	id := largeEdge(t, patient.URL, token, 1)
	hold, err := s.budget.take(context.Background(), DefaultResponseBytes)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{}
	for _, path := range []string{"/edges/https/" + id, "/edges/https", "/ip_policies"} {
		res, b, err := apiCall(client, token, "GET", url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 503 || res.Header.Get("Retry-After") != budgetRetryAfter || !bytes.Contains(b, []byte("ERR_NGROK_9000")) {
			t.Fatalf("GET %s with the budget taken: %d, Retry-After %q: %s", path, res.StatusCode, res.Header.Get("Retry-After"), b)
		}
	}
	// Without a valid key nothing waits for the budget: the answer is the 401.
	wrong := token[:len(token)-1] + string("ab"[(token[len(token)-1]+1)%2])
	for _, path := range []string{"/edges/https/" + id, "/edges/https"} {
		if res, b, err := apiCall(client, wrong, "GET", url+path, nil); err != nil || res.StatusCode != 401 {
			t.Fatalf("GET %s with a wrong key and the budget taken: %v %.200s", path, err, b)
		}
	}
	hold.release()
	for _, path := range []string{"/edges/https/" + id, "/edges/https", "/ip_policies"} {
		if res, b, err := apiCall(client, token, "GET", url+path, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("GET %s with the budget free: %v %.200s", path, err, b)
		}
	}
	if n := s.budget.inUse(); n != 0 {
		t.Fatalf("%d bytes of the budget still taken after the requests", n)
	}
}

// TestSmallListsPassBesideLargeShares: a list of a collection whose documents the server has
// seen to be small takes a quarter of a page's bound, not the whole bound, so with most of the
// budget taken it is still served; a list of HTTPS edges (which embed their routes) takes the
// whole bound and waits, here until its deadline.
func TestSmallListsPassBesideLargeShares(t *testing.T) {
	s, url, token := budgetServer(t, Config{RequestTimeout: 300 * time.Millisecond})
	client := &http.Client{}
	if res, b, err := apiCall(client, token, "POST", url+"/ip_policies", map[string]any{"description": "small"}); err != nil || res.StatusCode != 201 {
		t.Fatalf("POST /ip_policies: %v %.200s", err, b)
	}
	free := int64(ep.MaxPageBytes)/4 + 1<<20
	hold, err := s.budget.take(context.Background(), DefaultResponseBytes-free)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.release()
	if res, b, err := apiCall(client, token, "GET", url+"/ip_policies", nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /ip_policies with %d bytes of the budget free: %v %.200s", free, err, b)
	}
	if res, b, err := apiCall(client, token, "GET", url+"/edges/https", nil); err != nil || res.StatusCode != 503 {
		t.Fatalf("GET /edges/https with %d bytes of the budget free: %v %.200s", free, err, b)
	}
}
