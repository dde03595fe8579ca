package inspect

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// request is an entry shaped as the public listeners record one: the client's headers cloned,
// the answer's headers, a path.
func request(account, path string, header http.Header) *Entry {
	return &Entry{Account: account, Time: time.Now(), Kind: KindHTTPS, Client: "203.0.113.7:41000", Host: "app.example.com",
		Method: "GET", Path: path, Proto: "HTTP/1.1", Status: 200, RequestHeader: CopyHeader(header),
		ResponseHeader: Header{{"Content-Type", "text/plain"}}, EndpointProto: "https"}
}

func TestRingKeepsTheNewestEntriesOfEachAccount(t *testing.T) {
	r := NewRecorder(Config{Replica: "rep_a", Entries: 10})
	for i := range 25 {
		r.Record(request("acct_a", fmt.Sprintf("/a/%d", i), nil))
		if i%5 == 0 {
			r.Record(request("acct_b", fmt.Sprintf("/b/%d", i), nil))
		}
	}
	got := r.List("acct_a", Filter{}, 0, 100)
	if len(got) != 10 || got[0].Path != "/a/24" || got[9].Path != "/a/15" {
		t.Fatalf("account A keeps %d entries, newest %q, oldest %q; want the 10 newest", len(got), got[0].Path, got[len(got)-1].Path)
	}
	for _, e := range got {
		if e.Account != "acct_a" || e.Replica != "rep_a" {
			t.Fatalf("account A's list holds %+v", e)
		}
		if r.Get("acct_a", "rep_a", e.ID) != e {
			t.Fatalf("Get(%d) does not find a listed entry", e.ID)
		}
		if r.Get("acct_b", "rep_a", e.ID) != nil {
			t.Fatalf("account B's Get finds account A's entry %d", e.ID)
		}
		if r.Get("acct_a", "rep_other", e.ID) != nil {
			t.Fatalf("Get with another replica's name finds entry %d", e.ID)
		}
	}
	if b := r.List("acct_b", Filter{}, 0, 100); len(b) != 5 || b[0].Path != "/b/20" {
		t.Fatalf("account B keeps %d entries; want its 5, untouched by A's 25", len(b))
	}
	// Paging: entries older than a given one.
	older := r.List("acct_a", Filter{}, got[4].ID, 100)
	if len(older) != 5 || older[0].Path != "/a/19" {
		t.Fatalf("entries before %d: %d, first %q", got[4].ID, len(older), older[0].Path)
	}
	// An evicted entry is gone.
	first := r.List("acct_a", Filter{}, 0, 100)[9].ID - 1
	if r.Get("acct_a", "rep_a", first) != nil {
		t.Fatal("an entry pushed out is still found")
	}
}

func TestFilter(t *testing.T) {
	r := NewRecorder(Config{Replica: "rep_a"})
	for _, e := range []*Entry{
		{Account: "a", Kind: KindHTTP, Host: "Shop.example.com", Path: "/cart", Status: 200},
		{Account: "a", Kind: KindHTTPS, Host: "api.example.com", Path: "/v1/Users", Status: 404, ErrorCode: "ERR_NGROK_3200"},
		{Account: "a", Kind: KindHTTPS, Host: "api.example.com", Path: "/v1/orders", Status: 502},
		{Account: "a", Kind: KindTCP, Host: "tcp.example.com:20000", Note: "refused by the endpoint's IP restriction or traffic policy"},
		{Account: "a", Kind: KindTLS, Host: "tls.example.com"},
	} {
		r.Record(e)
	}
	for _, c := range []struct {
		f    Filter
		want int
	}{
		{Filter{}, 5}, {Filter{Status: "2xx"}, 1}, {Filter{Status: "4xx"}, 1}, {Filter{Status: "5xx"}, 1},
		{Filter{Status: "502"}, 1}, {Filter{Status: "error"}, 3}, {Filter{Host: "EXAMPLE"}, 5},
		{Filter{Host: "api"}, 2}, {Filter{Path: "users"}, 1}, {Filter{Kind: KindTCP}, 1},
		{Filter{Host: "api", Status: "5xx"}, 1}, {Filter{Status: "1xx"}, 0},
	} {
		if got := len(r.List("a", c.f, 0, 100)); got != c.want {
			t.Errorf("filter %+v matches %d entries, want %d", c.f, got, c.want)
		}
	}
}

func TestRedact(t *testing.T) {
	h := http.Header{
		"Authorization":    {"Bearer secret-token"},
		"Cookie":           {"session=secret-cookie"},
		"Set-Cookie":       {"a=1", "b=2"},
		"X-Gitlab-Token":   {"secret-webhook"},
		"authorization":    {"Basic c2VjcmV0"}, // a spelling HTTP/2 or a hand-built map may hold
		"X-Request-Id":     {"kept"},
		"Stripe-Signature": {"t=1,v1=kept"},
	}
	kept := CopyHeader(h)
	if len(kept) != 8 {
		t.Fatalf("the copy holds %d lines, want 8", len(kept))
	}
	for _, f := range kept {
		if strings.Contains(f.Value, "secret") || strings.Contains(f.Value, "c2VjcmV0") {
			t.Errorf("%s: %q survived the copy", f.Name, f.Value)
		}
	}
	if kept.Get("x-request-id") != "kept" || kept.Get("Stripe-Signature") != "t=1,v1=kept" {
		t.Errorf("a header that is no secret was changed in the copy: %v", kept)
	}
	if h.Get("Authorization") != "Bearer secret-token" {
		t.Error("the copy changed the request's own header")
	}
	Redact(h)
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, "secret") || strings.Contains(v, "c2VjcmV0") {
				t.Errorf("%s: %q survived redaction", k, v)
			}
		}
	}
	if h.Get("X-Request-Id") != "kept" || h.Get("Stripe-Signature") != "t=1,v1=kept" {
		t.Errorf("a header that is no secret was changed: %v", h)
	}
	if len(h["Set-Cookie"]) != 2 || h["Set-Cookie"][1] != RedactedValue {
		t.Errorf("every Set-Cookie value is redacted: %v", h["Set-Cookie"])
	}
}

// A flood of requests with the largest headers the public listeners accept (64 KiB) keeps the
// recorder within its byte bounds, in its own accounting and in the heap it really holds: each
// account's bound with eight accounts flooding under a roomy total, and the total bound with
// eight accounts whose own bounds together exceed it.
func TestRingMemoryUnderAFloodOfLargeHeaders(t *testing.T) {
	for _, c := range []struct {
		name           string
		account, total int64
	}{
		{"per account", 1 << 20, 16 << 20},
		{"in total", 4 << 20, 8 << 20},
	} {
		t.Run(c.name, func(t *testing.T) { flood(t, c.account, c.total) })
	}
}

func flood(t *testing.T, account, total int64) {
	r := NewRecorder(Config{Replica: "rep_a", Entries: 1000, AccountBytes: account, TotalBytes: total})
	big := http.Header{}
	for i := range 60 {
		big.Set(fmt.Sprintf("X-Flood-%02d", i), strings.Repeat("x", 1000))
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				r.Record(request(fmt.Sprintf("acct_%d", w), fmt.Sprintf("/flood/%d", i), big))
			}
		}()
	}
	wg.Wait()
	after := heap()
	const maxEntry = 70 << 10
	if got := r.Bytes(); got > total+maxEntry {
		t.Fatalf("the recorder accounts for %d bytes, over its bound of %d", got, total)
	}
	for w := range 8 {
		n, b := r.Count(fmt.Sprintf("acct_%d", w))
		if b > account {
			t.Errorf("account %d holds %d bytes (%d entries), over its bound of %d", w, b, n, account)
		}
		if n == 0 || n >= 500 {
			t.Errorf("account %d holds %d entries: the byte bounds, not the entry bound, should decide", w, n)
		}
	}
	// The accounting must not undercount what the entries hold: the heap grew by about what the
	// recorder says it keeps, and never by much more.
	if grown := int64(after) - int64(before); grown > r.Bytes()+r.Bytes()/2 {
		t.Fatalf("the heap grew by %d bytes for entries accounted as %d", grown, r.Bytes())
	}
}

// An account flooding its endpoints cannot push out a quieter account's traffic while that
// account stays within its share.
func TestTotalBoundTrimsTheLargestAccountFirst(t *testing.T) {
	r := NewRecorder(Config{Replica: "rep_a", Entries: 1000, AccountBytes: 2 << 20, TotalBytes: 2 << 20})
	small := http.Header{"Accept": {"*/*"}}
	big := http.Header{"X-Flood": {strings.Repeat("x", 16<<10)}}
	for i := range 50 {
		r.Record(request("quiet", fmt.Sprintf("/q/%d", i), small))
	}
	for i := range 2000 {
		r.Record(request("noisy", fmt.Sprintf("/n/%d", i), big))
	}
	if n, _ := r.Count("quiet"); n != 50 {
		t.Fatalf("the quiet account lost entries to the noisy one: %d of 50 left", n)
	}
	if got := r.Bytes(); got > 2<<20 {
		t.Fatalf("total %d over the bound", got)
	}
}

func TestCapHeaders(t *testing.T) {
	r := NewRecorder(Config{Replica: "rep_a"})
	resp := http.Header{}
	for i := range 200 {
		resp.Set(fmt.Sprintf("X-Big-%03d", i), strings.Repeat("y", 5000)) // 1 MiB of answer headers
	}
	e := request("a", "/", nil)
	e.ResponseHeader = CopyHeader(resp)
	r.Record(e)
	if s := headerSize(e.ResponseHeader); s > maxHeaderRecord {
		t.Fatalf("the kept answer headers are %d bytes, over %d", s, maxHeaderRecord)
	}
	if e.Size() > 100<<10 || !strings.Contains(e.Note, "64 KiB") {
		t.Fatalf("entry of %d bytes, note %q", e.Size(), e.Note)
	}
}

func TestSubscriptions(t *testing.T) {
	r := NewRecorder(Config{Replica: "rep_a"})
	a, err := r.Subscribe("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Subscribe("b")
	if err != nil {
		t.Fatal(err)
	}
	r.Record(request("a", "/for-a", nil))
	r.Record(request("b", "/for-b", nil))
	if e := <-a.C; e.Path != "/for-a" {
		t.Fatalf("A's view got %q", e.Path)
	}
	if e := <-b.C; e.Path != "/for-b" {
		t.Fatalf("B's view got %q", e.Path)
	}
	select {
	case e := <-a.C:
		t.Fatalf("A's view got a second entry %q", e.Path)
	default:
	}
	// A view that falls behind loses entries without blocking the recorder, and is told.
	for range subscriptionBuffer + 10 {
		r.Record(request("a", "/more", nil))
	}
	if !a.Lost() || a.Lost() {
		t.Fatal("Lost should report the dropped entries once")
	}
	a.Close()
	a.Close()
	var subs []*Subscription
	for range maxSubscribers {
		s, err := r.Subscribe("c")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, err := r.Subscribe("c"); err != ErrTooManySubscribers {
		t.Fatalf("subscription beyond the limit: %v", err)
	}
	subs[0].Close()
	if _, err := r.Subscribe("c"); err != nil {
		t.Fatalf("a closed view does not free its place: %v", err)
	}
	if _, err := r.Subscribe("d"); err != nil {
		t.Fatalf("another account's views are limited by c's: %v", err)
	}
}

func TestBodiesSetting(t *testing.T) {
	r := NewRecorder(Config{Replica: "rep_a"})
	if r.Bodies("a") {
		t.Fatal("bodies are kept by default")
	}
	r.SetBodies("a", true)
	if !r.Bodies("a") || r.Bodies("b") {
		t.Fatal("the bodies setting is per account")
	}
	r.SetBodies("a", false)
	if r.Bodies("a") {
		t.Fatal("bodies could not be turned off")
	}
}
