package ingress

import (
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/outbound"
	"github.com/edgeplane/edgeplane/plan"
)

// TestChooseBackend: a backend tree resolves to one target: a tunnel group only to the
// endpoints of the account asking (never another account's with the same labels), a static
// backend and an HTTP response always, failover to the first child that takes the request,
// weighted never to a child of weight 0 and past a child that cannot take it; nothing takes
// it from a missing backend or a group with no endpoint online.
func TestChooseBackend(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "acct_a") }))
	defer upstream.Close()
	online := map[string][]Endpoint{"acct_a": {&agentEndpoint{account: "acct_a", upstream: upstream.Listener.Addr().String()}}}
	s := New(Config{Labeled: func(account string, labels map[string]string) []Endpoint {
		if labels["app"] != "web" {
			return nil
		}
		return online[account]
	}})
	defer s.Close()
	group := &plan.Backend{ID: "bkdtg_1", Kind: plan.TunnelGroup, Labels: map[string]string{"app": "web"}}
	static := &plan.Backend{ID: "bkdsb_1", Kind: plan.Static, Address: "127.0.0.1:1"}
	answer := &plan.Backend{ID: "bkdhr_1", Kind: plan.HTTPResponse, Status: 201, Body: "hi"}
	missing := &plan.Backend{ID: "bkdsb_gone", Missing: true}
	a, b := conn{account: "acct_a"}, conn{account: "acct_b"}

	tg, ok := s.choose(group, a)
	if !ok || tg.backend != "bkdtg_1" || !strings.HasPrefix(tg.key, "t") || tg.dial == nil {
		t.Fatalf("A's group: %+v %v", tg, ok)
	}
	c, err := tg.dial(context.Background()) // reaches A's agent's upstream
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, ok := s.choose(group, b); ok {
		t.Error("B's request was given A's tunnel of the same labels")
	}
	if st, ok := s.choose(static, b); !ok || st.backend != "bkdsb_1" || !strings.HasPrefix(st.key, "s") {
		t.Errorf("static: %+v %v", st, ok)
	}
	if r, ok := s.choose(answer, b); !ok || r.respond != answer {
		t.Errorf("http response: %+v %v", r, ok)
	}
	for _, none := range []*plan.Backend{nil, missing} {
		if _, ok := s.choose(none, a); ok {
			t.Errorf("%+v took the request", none)
		}
	}
	failover := &plan.Backend{ID: "bkdfo_1", Kind: plan.Failover, Children: []*plan.Backend{missing, group, static}}
	if f, ok := s.choose(failover, a); !ok || f.backend != "bkdtg_1" {
		t.Errorf("failover for A: %+v, want the group", f)
	}
	if f, ok := s.choose(failover, b); !ok || f.backend != "bkdsb_1" {
		t.Errorf("failover for B: %+v, want the static backend (B has no tunnel)", f)
	}
	weighted := &plan.Backend{ID: "bkdwb_1", Kind: plan.Weighted, Children: []*plan.Backend{answer, group, static}, Weights: []int64{0, 5, 5}}
	for range 200 {
		w, ok := s.choose(weighted, b)
		if !ok || w.backend != "bkdsb_1" {
			t.Fatalf("weighted for B: %+v %v; want the static backend (weight 0 never, the group has no tunnel of B's)", w, ok)
		}
	}
	if _, ok := s.choose(&plan.Backend{Kind: plan.Weighted, Children: []*plan.Backend{answer}, Weights: []int64{0}}, a); ok {
		t.Error("a weighted backend whose weights are all 0 took the request")
	}
}

// TestPickWeighted: every index of positive weight is chosen, never one of weight 0 or less,
// and no index when no weight is positive.
func TestPickWeighted(t *testing.T) {
	if i := pickWeighted([]int64{0, -3}); i != -1 {
		t.Errorf("no positive weight: %d", i)
	}
	seen := map[int]int{}
	for range 2000 {
		seen[pickWeighted([]int64{0, 1, -2, 3})]++
	}
	if seen[0] != 0 || seen[2] != 0 || seen[-1] != 0 || seen[1] == 0 || seen[3] == 0 {
		t.Errorf("choices: %v", seen)
	}
}

// TestRespond: an HTTP response backend's status, headers and body; a status outside HTTP's
// range answers 200.
func TestRespond(t *testing.T) {
	w := httptest.NewRecorder()
	respond(w, &plan.Backend{Status: 418, Headers: map[string]string{"X-Kind": "teapot"}, Body: "short and stout"})
	if w.Code != 418 || w.Header().Get("X-Kind") != "teapot" || w.Body.String() != "short and stout" {
		t.Errorf("answer: %d %v %q", w.Code, w.Header(), w.Body)
	}
	w = httptest.NewRecorder()
	respond(w, &plan.Backend{Status: 7})
	if w.Code != 200 {
		t.Errorf("status 7 answered %d", w.Code)
	}
}

// TestDialStatic: a static backend is dialled plainly, or with TLS verified against the roots
// given: a server the roots do not trust, or one not speaking TLS, is an error naming the
// backend; a loopback backend is refused unless private addresses are allowed.
func TestDialStatic(t *testing.T) {
	ctx := context.Background()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain") }))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secure") }))
	defer secure.Close()
	plainAddr, secureAddr := plain.Listener.Addr().String(), secure.Listener.Addr().String()

	if _, err := dialStatic(ctx, plainAddr, false, outbound.Options{}); err == nil {
		t.Error("a loopback backend was dialled without AllowPrivate")
	} else if _, refused := outbound.Refused(err); !refused {
		t.Errorf("a loopback backend without AllowPrivate: %v, want the outbound guard's refusal", err)
	}
	private := outbound.Options{AllowPrivate: true}
	c, err := dialStatic(ctx, plainAddr, false, private)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	roots := x509.NewCertPool()
	roots.AddCert(secure.Certificate())
	c, err = dialStatic(ctx, secureAddr, true, outbound.Options{Roots: roots, AllowPrivate: true})
	if err != nil {
		t.Fatalf("TLS with the server's root: %v", err)
	}
	c.Close()
	for name, addr := range map[string]string{"untrusted": secureAddr, "not TLS": plainAddr} {
		pool := x509.NewCertPool()
		if _, err := dialStatic(ctx, addr, true, outbound.Options{Roots: pool, AllowPrivate: true}); err == nil || !strings.Contains(err.Error(), "TLS to static backend "+addr) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if _, err := dialStatic(ctx, closed, false, private); err == nil {
		t.Error("a closed port was dialled")
	}
}

// TestHeaderHelpers: a Host without its port, IPv6 brackets removed; X-Forwarded-For appends
// the client's address, an IPv4-mapped one as IPv4, to what the client sent.
func TestHeaderHelpers(t *testing.T) {
	for in, want := range map[string]string{"app.example.com:443": "app.example.com", "app.example.com": "app.example.com",
		"[::1]:8443": "::1", "[::1]": "::1"} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
	if v := forwardedFor([]string{"10.0.0.1", "10.0.0.2"}, "192.0.2.7"); v != "10.0.0.1, 10.0.0.2, 192.0.2.7" {
		t.Errorf("forwardedFor with prior values: %q", v)
	}
	if v := forwardedFor(nil, "192.0.2.7"); v != "192.0.2.7" {
		t.Errorf("forwardedFor alone: %q", v)
	}
	for in, want := range map[string]string{"192.0.2.7:5000": "192.0.2.7", "[::ffff:192.0.2.7]:5000": "192.0.2.7",
		"[2001:db8::1]:443": "2001:db8::1", "[fe80::1%eth0]:443": "fe80::1%eth0", "not an address": "", "192.0.2.7": ""} {
		if got := clientIP(in); got != want {
			t.Errorf("clientIP(%q) = %q, want %q", in, got, want)
		}
	}
}
