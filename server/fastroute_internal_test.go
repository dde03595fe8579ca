package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/serving"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
	dto "github.com/prometheus/client_model/go"
)

// fastRouteWorld is a server on a real database (the API suites' engine) with two accounts, each with an IP policy and
// a rule, served twice over real sockets: through ServeHTTP (the fast route for GETs by id) and
// through the ServeMux alone, as before the fast route.
type fastRouteWorld struct {
	s              *Server
	fast, mux      string // addresses
	tokenA, tokenB string
	policyA, ruleA string
	policyB, ruleB string
}

func newFastRouteWorld(t *testing.T) *fastRouteWorld {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.Fresh(t, testdb.Engine()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &fastRouteWorld{}
	for i, name := range []string{"a", "b"} {
		admin, _, err := st.EnsureAccount(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
		if err != nil {
			t.Fatal(err)
		}
		pol, err := st.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{})
		if err != nil {
			t.Fatal(err)
		}
		polID := pol.Base().ID
		rule, err := st.Create(ctx, admin, ep.IPPolicyRules, "", &ep.IPPolicyRuleCreate{IPPolicyID: &polID, CIDR: ptr("10.0.0.0/8"), Action: ptr("allow")})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			w.tokenA, w.policyA, w.ruleA = *key.(*ep.APIKey).Token, polID, rule.Base().ID
		} else {
			w.tokenB, w.policyB, w.ruleB = *key.(*ep.APIKey).Token, polID, rule.Base().ID
		}
	}
	logger, err := serving.NewLogger(serving.NewLogWriter(io.Discard), "text", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	w.s = New(st, Config{BaseURL: "http://api.test", Logger: logger, Metrics: NewMetrics(st)})
	fast := httptest.NewServer(w.s)
	t.Cleanup(fast.Close)
	viaMux := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { w.s.observe(rw, r, w.s.mux) }))
	t.Cleanup(viaMux.Close)
	w.fast, w.mux = fast.Listener.Addr().String(), viaMux.Listener.Addr().String()
	return w
}

func ptr[T any](v T) *T { return &v }

// rawExchange sends the request line and headers as they are (no client cleans the path) and
// returns the response: its status line, its headers but Date and Ngrok-Operation-Id (which
// differ between any two responses), and its body, as one string.
func rawExchange(t *testing.T, addr, method, target string, headers map[string]string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	var req strings.Builder
	req.WriteString(method + " " + target + " HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n")
	for k, v := range headers {
		req.WriteString(k + ": " + v + "\r\n")
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Ngrok-Operation-Id") == "" {
		t.Fatalf("%s %s: no operation id", method, target)
	}
	opID := resp.Header.Get("Ngrok-Operation-Id")
	resp.Header.Del("Date")
	resp.Header.Del("Ngrok-Operation-Id")
	var keys []string
	for k := range resp.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out strings.Builder
	out.WriteString(resp.Status + "\n")
	for _, k := range keys {
		out.WriteString(k + ": " + strings.Join(resp.Header[k], ", ") + "\n")
	}
	out.WriteString("\n" + strings.ReplaceAll(string(body), opID, "<operation id>"))
	return out.String()
}

// A GET by id answered through the fast route is byte for byte the answer the ServeMux's route
// gives (but for Date and the operation id), for clean paths the fast route takes and for the
// odd ones it leaves to the mux, with and without valid credentials, and across accounts: A's
// key reads A's objects and gets 404 for B's, through either.
func TestFastRouteAnswersAsTheMux(t *testing.T) {
	w := newFastRouteWorld(t)
	auth := func(token string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "Ngrok-Version": "2"}
	}
	type exchange struct {
		method, target string
		headers        map[string]string
		fast           bool // whether the fast route takes it
		status         string
	}
	exchanges := []exchange{
		{"GET", "/ip_policy_rules/" + w.ruleA, auth(w.tokenA), true, "200 OK"},
		{"GET", "/ip_policies/" + w.policyA, auth(w.tokenA), true, "200 OK"},
		{"GET", "/ip_policy_rules/" + w.ruleB, auth(w.tokenB), true, "200 OK"},
		{"GET", "/ip_policy_rules/" + w.ruleB, auth(w.tokenA), true, "404 Not Found"}, // B's rule, A's key
		{"GET", "/ip_policies/" + w.policyB, auth(w.tokenA), true, "404 Not Found"},
		{"GET", "/ip_policy_rules/" + w.policyA, auth(w.tokenA), true, "404 Not Found"}, // a policy's id as a rule's
		{"GET", "/ip_policy_rules/" + w.ruleA + "?x=1", auth(w.tokenA), true, "200 OK"},
		{"GET", "/ip_policy_rules/ipr_x", auth(w.tokenA), true, "404 Not Found"},
		{"GET", "/ip_policy_rules/" + w.ruleA, auth("ak_nope"), true, "401 Unauthorized"},
		{"GET", "/ip_policy_rules/" + w.ruleA, map[string]string{"Ngrok-Version": "2"}, true, "401 Unauthorized"},
		{"GET", "/ip_policy_rules/" + w.ruleA, nil, true, "400 Bad Request"},
		{"GET", "/ip_policy_rules/" + w.ruleA, map[string]string{"Authorization": "Bearer " + w.tokenA}, true, "400 Bad Request"},
		// Paths the mux cleans, unescapes or redirects, and methods it routes otherwise.
		{"GET", "/ip_policy_rules/%69pr_x", auth(w.tokenA), false, "404 Not Found"},
		{"GET", "/ip_policy_rules/" + strings.Replace(w.ruleA, "ipr", "%69pr", 1), auth(w.tokenA), false, "200 OK"},
		{"GET", "/ip_policy_rules//" + w.ruleA, auth(w.tokenA), false, "307 Temporary Redirect"},
		{"GET", "/ip_policies/../ip_policy_rules/" + w.ruleA, auth(w.tokenA), false, "307 Temporary Redirect"},
		{"GET", "/ip_policy_rules/./" + w.ruleA, auth(w.tokenA), false, "307 Temporary Redirect"},
		{"GET", "/ip_policy_rules/" + w.ruleA + "/", auth(w.tokenA), false, "404 Not Found"},
		{"GET", "/ip_policy_rules/", auth(w.tokenA), false, "404 Not Found"},
		{"GET", "/ip_policy_rules", auth(w.tokenA), false, "200 OK"},
		{"GET", "/IP_POLICY_RULES/" + w.ruleA, auth(w.tokenA), false, "404 Not Found"},
		{"GET", "/ip_policy_rules/" + w.ruleA + ".json", auth(w.tokenA), false, "404 Not Found"},
		{"HEAD", "/ip_policy_rules/" + w.ruleA, auth(w.tokenA), false, "200 OK"},
		{"DELETE", "/ip_policy_rules/ipr_x", auth(w.tokenA), false, "404 Not Found"},
		{"GET", "/healthz", nil, false, "200 OK"},
		{"GET", "http://api.test/ip_policy_rules/" + w.ruleA, auth(w.tokenA), true, "200 OK"},
	}
	ruleGets := 0.0 // answered 200 by the GET-by-id route of rules, through either server
	for _, x := range exchanges {
		if x.method == "GET" && x.status == "200 OK" && strings.Contains(x.target, "/ip_policy_rules/") {
			ruleGets += 2
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(x.method + " " + x.target + " HTTP/1.1\r\nHost: api.test\r\n\r\n")))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, fast := w.s.fastRouteOf(r); fast != x.fast {
			t.Errorf("%s %s: fast route %v, want %v", x.method, x.target, fast, x.fast)
		}
		got, want := rawExchange(t, w.fast, x.method, x.target, x.headers), rawExchange(t, w.mux, x.method, x.target, x.headers)
		if got != want {
			t.Errorf("%s %s: through ServeHTTP\n%s\nthrough the mux\n%s", x.method, x.target, got, want)
		}
		if status, _, _ := strings.Cut(got, "\n"); status != x.status {
			t.Errorf("%s %s: %s, want %s", x.method, x.target, status, x.status)
		}
	}
	// The fast route names its pattern as the mux does: the metrics (and the log line) count
	// both servers' GETs of rules under the route's pattern.
	var m dto.Metric
	if err := w.s.metrics.requests.WithLabelValues("GET /ip_policy_rules/{id}", "GET", "200").Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != ruleGets {
		t.Errorf("the metrics count %v GETs of rules answered 200, want %v", n, ruleGets)
	}
}

// A collection path under which another GET route of one more segment is registered is left
// to the mux, which would choose that route for its one id; the others keep their fast route.
func TestFastRouteYieldsToLiterals(t *testing.T) {
	w := newFastRouteWorld(t)
	s := w.s
	if _, ok := s.fast["/ip_policies/"]; !ok {
		t.Fatal("no fast route for /ip_policies/")
	}
	s.routes = append(s.routes, route{method: "GET", path: "/ip_policies/special"})
	s.mux.HandleFunc("GET /ip_policies/special", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	s.keepFastRoutes()
	if _, ok := s.fast["/ip_policies/"]; ok {
		t.Error("the fast route of /ip_policies/ was kept beside GET /ip_policies/special")
	}
	if _, ok := s.fast["/ip_policy_rules/"]; !ok {
		t.Error("the fast route of /ip_policy_rules/ was dropped")
	}
	r := httptest.NewRequest("GET", "/ip_policies/special", nil)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	if rec.Code != http.StatusTeapot {
		t.Errorf("GET /ip_policies/special: %d, want the literal route's 418", rec.Code)
	}
}

// A GET the read cache answers allocates little beyond what net/http does (net/http is left out
// here): one state for the request (its context, opInfo, status writer and operation id
// header), the request's copy with that context, the operation id, the path value. It was 17
// before the request's state was one allocation, the request line written without a record, the
// key's hash decoded once and Content-Length values shared; the bound leaves room for a few more.
func TestCachedGetAllocations(t *testing.T) {
	if testdb.Engine() != "sqlite" {
		t.Skip("the read cache is SQLite's: on PostgreSQL every GET reads the database")
	}
	h, token, _, rule := benchServer(t)
	r := benchRequest("GET", "/ip_policy_rules/"+rule, token, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}
	w := &discardWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(500, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	t.Logf("%.1f allocations per cached GET", allocs)
	if allocs > 12 {
		t.Errorf("%.1f allocations per cached GET, want at most 12", allocs)
	}
}
