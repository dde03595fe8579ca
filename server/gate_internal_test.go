package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// gateServer is a server whose gate holds one request, with a key to call it with. The gate is
// set by hand: on SQLite the store asks for none (ConnLimit 0), on PostgreSQL it is the pool size.
func gateServer(t *testing.T, timeout time.Duration) (*Server, string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "gate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	admin, _, err := st.EnsureAccount(ctx, "gate")
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	if st.ConnLimit() != 0 {
		t.Fatalf("SQLite asks for a gate of %d", st.ConnLimit())
	}
	s := New(st, Config{RequestTimeout: timeout})
	s.gate = make(chan struct{}, 1)
	return s, *key.(*ep.APIKey).Token
}

// waitAtGate waits until n requests wait at the gate: goroutines blocked in the select of
// authenticated, as the runtime's goroutine dump shows them. A pause instead may end, on a
// loaded machine, before a request has reached the gate, and the next would overtake it.
func waitAtGate(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var dump bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
		waiting := 0
		for _, g := range strings.Split(dump.String(), "\n\n") {
			if strings.Contains(g, " [select") && strings.Contains(g, "(*Server).authenticated.func") {
				waiting++
			}
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait at the gate, want %d\n%s", waiting, n, dump.String())
		}
		time.Sleep(time.Millisecond)
	}
}

func gateRequest(token string, i int) *http.Request {
	r := httptest.NewRequest("GET", "/gated", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Ngrok-Version", "2")
	r.Header.Set("X-Test-Index", strconv.Itoa(i))
	return r
}

// Requests beyond the gate are let through in the order they arrived.
func TestGateQueuesInArrivalOrder(t *testing.T) {
	s, token := gateServer(t, 10*time.Second)
	var (
		mu    sync.Mutex
		order []int
	)
	h := s.authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.Header.Get("X-Test-Index"))
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
	}), false)
	s.gate <- struct{}{} // the one place is taken
	var wg sync.WaitGroup
	const n = 6
	for i := range n {
		wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), gateRequest(token, i)) })
		waitAtGate(t, i+1) // each waits at the gate before the next arrives
	}
	<-s.gate
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("let through in the order %v, want arrival order", order)
		}
	}
	if len(order) != n {
		t.Fatalf("%d of %d requests got through", len(order), n)
	}
}

// A request that waits at the gate past its deadline is answered 503 ERR_NGROK_9000, and nothing
// runs for it.
func TestGateDeadline(t *testing.T) {
	s, token := gateServer(t, 50*time.Millisecond)
	ran := false
	h := s.authenticated(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }), false)
	s.gate <- struct{}{}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, gateRequest(token, 0))
	var body struct {
		ErrorCode string `json:"error_code"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != http.StatusServiceUnavailable || body.ErrorCode != "ERR_NGROK_9000" || ran {
		t.Fatalf("status %d, body %s, handler ran %v", rec.Code, rec.Body, ran)
	}
}

// The authentication middleware hands the handler its caller (or, on fused routes, its
// credential) in the request's opInfo, which observe puts there; served on its own, without
// observe, it makes one, and the handler still gets them.
func TestAuthenticatedHandsOnWithoutObserve(t *testing.T) {
	s, token := gateServer(t, 10*time.Second)
	s.gate = nil
	var caller ep.Caller
	var cred credential
	s.authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { caller = callerOf(r) }), false).
		ServeHTTP(httptest.NewRecorder(), gateRequest(token, 0))
	s.authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cred = credentialFrom(r) }), true).
		ServeHTTP(httptest.NewRecorder(), gateRequest(token, 0))
	if caller.AccountID == "" || caller.KeyID == "" {
		t.Fatalf("the handler got caller %+v", caller)
	}
	if selector, _, _ := ep.ParseToken(token); cred.selector != selector || cred.secret == "" {
		t.Fatalf("the fused handler got credential %+v", cred)
	}
}
