package enforce

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// TestErrorCounts: every ErrorPage answer counts once under its own code, and only there; a
// refusal by a real stage (the IP restriction of a chain) counts as one answer; a request the
// chain lets through counts nothing.
func TestErrorCounts(t *testing.T) {
	before := ErrorCounts()
	answer := func(status, code int) {
		rec := httptest.NewRecorder()
		ErrorPage(rec, status, code, "test")
		if rec.Code != status || rec.Header().Get("ngrok-error-code") != errorCode(code) {
			t.Fatalf("ErrorPage wrote %d %q", rec.Code, rec.Header().Get("ngrok-error-code"))
		}
	}
	answer(http.StatusNotFound, 3200)
	answer(http.StatusNotFound, 3200)
	answer(http.StatusBadGateway, 8012)

	deny, err := NewIPFilter(nil, []string{"192.0.2.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	reached := 0
	h := (&Chain{Conn: []ConnStage{deny}}).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	for _, client := range []string{"192.0.2.7:1234", "198.51.100.1:1234"} {
		r := httptest.NewRequest("GET", "http://app.example/", nil)
		r.RemoteAddr = client
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if reached != 1 {
		t.Fatalf("the admitted request reached the app %d times, want 1", reached)
	}

	after := ErrorCounts()
	want := map[string]uint64{"ERR_NGROK_3200": 2, "ERR_NGROK_8012": 1, "ERR_NGROK_3205": 1}
	for code, n := range after {
		if got := n - before[code]; got != want[code] {
			t.Errorf("%s grew by %d, want %d", code, got, want[code])
		}
	}
	for code := range want {
		if _, ok := after[code]; !ok {
			t.Errorf("%s is missing from ErrorCounts: %v", code, after)
		}
	}
}

// TestErrorCountsConcurrent: answers with codes new to the process, from several goroutines at
// once, are all counted, although any of them may be the one that adds its code: every
// goroutine answers with the same fresh codes in the same order, so they meet at each code's
// first answer.
func TestErrorCountsConcurrent(t *testing.T) {
	const goroutines, codes = 8, 500
	base := 100_000 + int(freshCodes.Add(codes)) // not ngrok codes: new to this process
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-ready
			for c := base; c < base+codes; c++ {
				ErrorPage(httptest.NewRecorder(), http.StatusServiceUnavailable, c, "x")
			}
		})
	}
	close(ready)
	wg.Wait()
	after := ErrorCounts()
	lost := 0
	for c := base; c < base+codes; c++ {
		if after[errorCode(c)] != goroutines {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d codes were not counted %d times", lost, codes, goroutines)
	}
}

// freshCodes hands TestErrorCountsConcurrent codes no earlier run used (go test -count).
var freshCodes atomic.Int64

// TestErrorCountNoAlloc: counting an answer with a code already seen takes no lock and
// allocates nothing (the public request path is benchmarked).
func TestErrorCountNoAlloc(t *testing.T) {
	countError(3200)
	if n := testing.AllocsPerRun(1000, func() { countError(3200) }); n != 0 {
		t.Fatalf("countError allocates %v times per answer, want 0", n)
	}
}
