package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// TestDatabaseCrashMidRequest: PostgreSQL connections break again and again under reads and
// writes. Every request either succeeds or answers 503 ERR_NGROK_9000 (retry); none is a 500
// (writes whose connection broke before COMMIT once answered 500 "conn closed").
func TestDatabaseCrashMidRequest(t *testing.T) {
	dsn := testdb.Postgres(t)
	proxy := testdb.NewProxy(t, testdb.Target(dsn))
	ctx := context.Background()
	st, err := store.Open(ctx, proxy.Redirect(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(server.New(st, server.Config{BaseURL: "http://127.0.0.1"}))
	defer srv.Close()
	admin, _, err := st.EnsureAccount(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := st.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
	if err != nil {
		t.Fatal(err)
	}
	token, id := *key.(*ep.APIKey).Token, policy.Base().ID
	requests := []struct{ method, path, body string }{
		{"GET", "/ip_policies/" + id, ""},
		{"PATCH", "/ip_policies/" + id, `{"description":"d"}`},
		{"POST", "/ip_policies", `{}`},
		{"GET", "/ip_policies?limit=5", ""},
	}
	var (
		stop       atomic.Bool
		wg         sync.WaitGroup
		mu         sync.Mutex
		ok, retry  int
		unexpected []string
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; !stop.Load(); i++ {
				rq := requests[i%len(requests)]
				req, _ := http.NewRequest(rq.method, srv.URL+rq.path, strings.NewReader(rq.body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Ngrok-Version", "2")
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				code := errorCodeOf(res)
				mu.Lock()
				switch {
				case res.StatusCode < 300:
					ok++
				case res.StatusCode == http.StatusServiceUnavailable && code == "ERR_NGROK_"+strconv.Itoa(ep.CodeUnavailable):
					retry++
				default:
					unexpected = append(unexpected, rq.method+" "+rq.path+": "+strconv.Itoa(res.StatusCode)+" "+code)
				}
				mu.Unlock()
			}
		}()
	}
	for range 30 {
		time.Sleep(30 * time.Millisecond)
		proxy.Down()
		time.Sleep(10 * time.Millisecond)
		proxy.Up()
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d answered, %d told to retry (503), %d otherwise", ok, retry, len(unexpected))
	if len(unexpected) > 0 {
		t.Fatalf("%d requests answered neither success nor 503 ERR_NGROK_%d, e.g. %s", len(unexpected), ep.CodeUnavailable, unexpected[0])
	}
	if ok == 0 || retry == 0 {
		t.Fatalf("the test did not exercise both sides: %d answered, %d told to retry", ok, retry)
	}
}

// errorCodeOf reads the response and returns its error_code, if it has one.
func errorCodeOf(res *http.Response) string {
	defer res.Body.Close()
	var body struct {
		ErrorCode string `json:"error_code"`
	}
	raw, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(raw, &body)
	return body.ErrorCode
}
