package ingress

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
)

// TestBulkCopiesShares: the large buffers are lent within the server's bound and each
// account's share: an account at its share is refused while another account still borrows, a
// server at its bound refuses everyone, and every buffer given back can be lent again.
func TestBulkCopiesShares(t *testing.T) {
	b := newBulkCopies()
	b.max, b.perAccount = 3, 2
	a1, a2 := b.take("acct_a"), b.take("acct_a")
	if a1 == nil || a2 == nil || len(*a1) != bulkCopySize {
		t.Fatalf("A's first two: %v %v, want two buffers of %d bytes", a1 != nil, a2 != nil, bulkCopySize)
	}
	if b.take("acct_a") != nil {
		t.Fatal("A was lent a third buffer past its share of 2")
	}
	b1 := b.take("acct_b")
	if b1 == nil {
		t.Fatal("B was refused while A held only its share")
	}
	if b.take("acct_b") != nil {
		t.Fatal("B was lent a buffer past the server's bound of 3")
	}
	if all, ofA := b.inUse("acct_a"); all != 3 || ofA != 2 {
		t.Fatalf("in use: %d, A %d; want 3 and 2", all, ofA)
	}
	b.give("acct_a", a1)
	if b.take("acct_b") == nil {
		t.Fatal("B was refused after A gave one back")
	}
	b.give("acct_a", a2)
	if all, ofA := b.inUse("acct_a"); all != 2 || ofA != 0 || len(b.byAccount) != 1 {
		t.Fatalf("in use: %d, A %d, accounts %d; want 2, 0, 1 (A forgotten)", all, ofA, len(b.byAccount))
	}
}

// TestBulkCopyAnswers: through the proxy, an answer declaring at least bulkCopyMin bytes is
// copied with a large buffer lent to its account (A's and B's at once, each counted to its own
// account), its bytes intact, and the buffer is given back when the answer ends, or when its
// client leaves in the middle; a smaller answer and one of unknown length borrow none.
func TestBulkCopyAnswers(t *testing.T) {
	const size = 3 << 20
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	sum := sha256.Sum256(body)
	var mu sync.Mutex
	holds := map[string]chan struct{}{"A": make(chan struct{}), "B": make(chan struct{})}
	half := make(chan string, 2)
	serve := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/small":
				w.Header().Set("Content-Length", strconv.Itoa(bulkCopyMin-1))
				_, _ = w.Write(body[:bulkCopyMin-1])
			case "/unknown":
				_, _ = w.Write(body) // no Content-Length: chunked
			case "/leave":
				w.Header().Set("Content-Length", strconv.Itoa(size))
				_, _ = w.Write(body[:size/2])
				w.(http.Flusher).Flush()
				<-r.Context().Done() // until edgeplane closes the stream of the client that left
			default:
				w.Header().Set("Content-Length", strconv.Itoa(size))
				_, _ = w.Write(body[:size/2])
				w.(http.Flusher).Flush()
				half <- name
				mu.Lock()
				hold := holds[name]
				mu.Unlock()
				<-hold
				_, _ = w.Write(body[size/2:])
			}
		})
	}
	w := newTripWorld(t, serve("A"), serve("B"))
	bulk := w.s.proxy.bulk

	type result struct {
		name string
		sum  [32]byte
		err  error
	}
	results := make(chan result, 2)
	for _, c := range []struct{ name, host string }{{"A", "a.example.com"}, {"B", "b.example.com"}} {
		pc := w.dial(t)
		go func() {
			fmt.Fprintf(pc.c, "GET /big HTTP/1.1\r\nHost: %s\r\n\r\n", c.host)
			resp, err := http.ReadResponse(pc.br, nil)
			if err != nil {
				results <- result{c.name, [32]byte{}, err}
				return
			}
			got, err := io.ReadAll(resp.Body)
			results <- result{c.name, sha256.Sum256(got), err}
		}()
	}
	<-half
	<-half
	waitFor(t, "both accounts' answers to borrow a large buffer", func() bool {
		all, ofA := bulk.inUse("acct_a")
		_, ofB := bulk.inUse("acct_b")
		return all == 2 && ofA == 1 && ofB == 1
	})
	close(holds["A"])
	close(holds["B"])
	for range 2 {
		r := <-results
		if r.err != nil || r.sum != sum {
			t.Fatalf("%s's download: %v, intact %v", r.name, r.err, r.sum == sum)
		}
	}
	waitFor(t, "the large buffers to be given back", func() bool { all, _ := bulk.inUse("acct_a"); return all == 0 })

	// A client that leaves in the middle of a large answer gives its buffer back too.
	leaver := w.dial(t)
	fmt.Fprintf(leaver.c, "GET /leave HTTP/1.1\r\nHost: b.example.com\r\n\r\n")
	resp, err := http.ReadResponse(leaver.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if _, ofB := bulk.inUse("acct_b"); ofB != 1 {
		t.Fatalf("B's answer to the client about to leave holds %d large buffers, want 1", ofB)
	}
	leaver.c.Close()
	waitFor(t, "the leaving client's buffer to be given back", func() bool { all, _ := bulk.inUse("acct_b"); return all == 0 })

	// Answers below the bound, and of unknown length, are copied with the small buffer.
	pc := w.dial(t)
	for _, path := range []string{"/small", "/unknown"} {
		before := bulkTaken(bulk)
		st, _, got := pc.get(t, "a.example.com", path)
		if st != 200 || (path == "/small" && len(got) != bulkCopyMin-1) || (path == "/unknown" && len(got) != size) {
			t.Fatalf("GET %s: %d, %d bytes", path, st, len(got))
		}
		if after := bulkTaken(bulk); after != before {
			t.Errorf("GET %s borrowed a large buffer (%d lent before, %d after)", path, before, after)
		}
	}
}

// bulkTaken counts the large buffers lent since the server started, so a test sees a lend even
// after the buffer was given back.
func bulkTaken(b *bulkCopies) int64 { return b.taken.Load() }

// TestBulkCopyEdgeAccounts: a large answer through an HTTPS edge route borrows its large buffer
// in the name of the edge's account: A's edge's download counts against A's share, B's against
// B's, each while its body is being copied.
func TestBulkCopyEdgeAccounts(t *testing.T) {
	const size = 2 << 20
	upstream := serveUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(make([]byte, size))
	}))
	s := New(Config{OutboundAllowPrivate: true})
	defer s.Close()
	account := func(id, host string) *plan.Account {
		route := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: "edghtsrt_" + id}, MatchType: ep.MatchPathPrefix, Match: "/",
			Backend: &ep.EndpointBackend{Enabled: true, Backend: ep.NewRef("bkdst_" + id)}}
		snap := &plan.Snapshot{Account: id,
			HTTPSEdges: []*ep.HTTPSEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_" + id}, Hostports: []string{host + ":443"}},
				Routes: []*ep.HTTPSEdgeRoute{route}}},
			Backends: map[string]ep.Document{"bkdst_" + id: &ep.StaticBackend{Meta: ep.Meta{ID: "bkdst_" + id}, Address: upstream}}}
		return plan.NewLive().Build(snap, s.EdgeHandler())
	}
	pl := plan.Merge(map[string]*plan.Account{"acct_a": account("acct_a", "a.example.test"),
		"acct_b": account("acct_b", "b.example.test")})
	for _, c := range []struct{ host, account, other string }{
		{"a.example.test", "acct_a", "acct_b"}, {"b.example.test", "acct_b", "acct_a"},
	} {
		e := pl.HTTPS(c.host)
		if e == nil {
			t.Fatalf("%s is not in the plan", c.host)
		}
		rec := &lendWatcher{ResponseRecorder: httptest.NewRecorder(), bulk: s.proxy.bulk, account: c.account, other: c.other}
		r := httptest.NewRequest(http.MethodGet, "https://"+c.host+"/file", nil)
		s.proxy.serveEdge(rec, r, e, nil)
		if rec.Code != 200 || rec.Body.Len() != size {
			t.Fatalf("%s: %d, %d bytes", c.host, rec.Code, rec.Body.Len())
		}
		if rec.own != 1 || rec.others != 0 {
			t.Errorf("%s: while copying, %d large buffers were lent to %s and %d to %s; want 1 and 0", c.host, rec.own, c.account, rec.others, c.other)
		}
	}
}

// lendWatcher records, at the first write of an answer's body, how many large buffers are lent
// to the account serving it and to the other one.
type lendWatcher struct {
	*httptest.ResponseRecorder
	bulk           *bulkCopies
	account, other string
	seen           bool
	own, others    int
}

func (l *lendWatcher) Write(p []byte) (int, error) {
	if !l.seen {
		l.seen = true
		_, l.own = l.bulk.inUse(l.account)
		_, l.others = l.bulk.inUse(l.other)
	}
	return l.ResponseRecorder.Write(p)
}
