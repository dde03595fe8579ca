package enforce

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// requestOf is a public request whose connection's listeners count their error pages on c, as
// ingress.Server records them.
func requestOf(c *ErrorCounter, client string) *http.Request {
	r := httptest.NewRequest("GET", "http://app.example/", nil)
	r.RemoteAddr = client
	return r.WithContext(WithConn(r.Context(), &ConnInfo{Errors: c}))
}

// TestErrorCounts: every ErrorPage answer counts once under its own code, on the counter of the
// listeners whose connection the request came on, and only there: two counters (two servers in
// one process) each see their own answers. A refusal by a real stage (the IP restriction of a
// chain) counts as one answer; a request the chain lets through counts nothing; a request no
// listener recorded counts nowhere.
func TestErrorCounts(t *testing.T) {
	var one, two ErrorCounter
	answer := func(c *ErrorCounter, status, code int) {
		rec := httptest.NewRecorder()
		ErrorPage(rec, requestOf(c, "192.0.2.1:1234"), status, code, "test")
		if rec.Code != status || rec.Header().Get("ngrok-error-code") != errorCode(code) {
			t.Fatalf("ErrorPage wrote %d %q", rec.Code, rec.Header().Get("ngrok-error-code"))
		}
	}
	answer(&one, http.StatusNotFound, 3200)
	answer(&one, http.StatusNotFound, 3200)
	answer(&one, http.StatusBadGateway, 8012)
	answer(&two, http.StatusNotFound, 3200)
	ErrorPage(httptest.NewRecorder(), httptest.NewRequest("GET", "http://app.example/", nil), http.StatusNotFound, 3200, "test")

	deny, err := NewIPFilter(nil, []string{"192.0.2.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	reached := 0
	h := (&Chain{Conn: []ConnStage{deny}}).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	for _, client := range []string{"192.0.2.7:1234", "198.51.100.1:1234"} {
		h.ServeHTTP(httptest.NewRecorder(), requestOf(&two, client))
	}
	if reached != 1 {
		t.Fatalf("the admitted request reached the app %d times, want 1", reached)
	}

	for _, c := range []struct {
		name string
		got  map[string]uint64
		want map[string]uint64
	}{
		{"one", one.Counts(), map[string]uint64{"ERR_NGROK_3200": 2, "ERR_NGROK_8012": 1}},
		{"two", two.Counts(), map[string]uint64{"ERR_NGROK_3200": 1, "ERR_NGROK_3205": 1}},
	} {
		if len(c.got) != len(c.want) {
			t.Errorf("counter %s: %v, want %v", c.name, c.got, c.want)
		}
		for code, n := range c.want {
			if c.got[code] != n {
				t.Errorf("counter %s: %s counted %d, want %d", c.name, code, c.got[code], n)
			}
		}
	}
	var nobody *ErrorCounter
	nobody.count(3200) // a connection without a counter counts nothing, and does not panic
}

// TestErrorCountsConcurrent: answers with codes new to the counter, from several goroutines at
// once, are all counted, although any of them may be the one that adds its code: every
// goroutine answers with the same codes in the same order, so they meet at each code's first
// answer.
func TestErrorCountsConcurrent(t *testing.T) {
	const goroutines, codes = 8, 500
	var c ErrorCounter
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-ready
			r := requestOf(&c, "192.0.2.1:1234")
			for code := 100_000; code < 100_000+codes; code++ {
				ErrorPage(httptest.NewRecorder(), r, http.StatusServiceUnavailable, code, "x")
			}
		})
	}
	close(ready)
	wg.Wait()
	after := c.Counts()
	lost := 0
	for code := 100_000; code < 100_000+codes; code++ {
		if after[errorCode(code)] != goroutines {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d codes were not counted %d times", lost, codes, goroutines)
	}
}

// TestErrorCountNoAlloc: counting an answer with a code already seen, found from the request as
// ErrorPage finds it, takes no lock and allocates nothing (the public request path is
// benchmarked).
func TestErrorCountNoAlloc(t *testing.T) {
	var c ErrorCounter
	r := requestOf(&c, "192.0.2.1:1234")
	countAnswer(r, 3200)
	if n := testing.AllocsPerRun(1000, func() { countAnswer(r, 3200) }); n != 0 {
		t.Fatalf("counting an answer allocates %v times, want 0", n)
	}
	if got := c.Counts()["ERR_NGROK_3200"]; got != 1002 {
		t.Fatalf("counted %d answers, want 1002", got)
	}
}
