package ingress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/edgeplane/edgeplane/plan"
)

// agentEndpoint is an online endpoint of an account whose upstream, a real HTTP server, answers
// every request with the account's id.
type agentEndpoint struct {
	tlsEndpoint
	account  string
	upstream string
}

func (e *agentEndpoint) AccountID() string { return e.account }

func (e *agentEndpoint) Dial(ctx context.Context, _, _, _ string, _ bool) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "tcp", e.upstream)
}

// TestHostServedByItsHolder: the public listener carries a host's traffic only to the account
// whose reservation covers it (the exact name's, else the wildcard's one level up): an endpoint
// of another account online on the name is treated as offline, for a request over HTTP and in
// the HTTPS handshake's choice of TLS settings. A host no reservation covers is served by the
// endpoint online on it. The plan is swapped as the data plane swaps it.
func TestHostServedByItsHolder(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "acct_a") }))
	defer upstream.Close()
	a := &agentEndpoint{account: "acct_a", upstream: upstream.Listener.Addr().String(),
		tlsEndpoint: tlsEndpoint{policy: plan.TLSPolicy{MinVersion: tls.VersionTLS13}}}
	s := New(Config{Certificate: func(string) (*tls.Certificate, error) { return nil, ErrUnknownName }})
	s.SetLookup(func(proto, host string) Endpoint {
		if proto == "http" || proto == "https" {
			return a // A's agent is online on every name, on this replica
		}
		return nil
	})
	var current atomic.Pointer[plan.Plan]
	holders := func(byAccount map[string][]string) {
		parts := map[string]*plan.Account{}
		for id, domains := range byAccount {
			parts[id] = &plan.Account{ID: id, Domains: domains}
		}
		current.Store(plan.Merge(parts))
	}
	s.SetPlan(current.Load)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.ServeHTTP(ln) }()
	defer s.Close()
	get := func(host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", host, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	holders(map[string][]string{"acct_b": {"x.example.com", "*.w.example.com"}, "acct_a": {"mine.w.example.com"}})
	for _, host := range []string{"x.example.com", "n.w.example.com"} {
		if st, body := get(host); st != 404 || !strings.Contains(body, "ERR_NGROK_3200") {
			t.Errorf("%s, held by B, served A's endpoint: %d %q", host, st, body)
		}
		if e, ep := s.httpsRoute(host); e != nil || ep != nil {
			t.Errorf("%s, held by B, routes over HTTPS (edge %v, endpoint %v)", host, e != nil, ep != nil)
		}
		if c, err := s.configForClient(&tls.ClientHelloInfo{ServerName: host}); err != nil || c != nil {
			t.Errorf("%s, held by B, has A's TLS settings (%v): %v", host, c != nil, err)
		}
	}
	for _, host := range []string{"mine.w.example.com", "free.edgeplane.app"} {
		if st, body := get(host); st != 200 || body != "acct_a" {
			t.Errorf("%s (A's own reservation, or none) not served by A: %d %q", host, st, body)
		}
		if c, err := s.configForClient(&tls.ClientHelloInfo{ServerName: host}); err != nil || c == nil || c.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s has not A's TLS settings (%v): %v", host, c != nil, err)
		}
	}
	// B's reservation goes, A's comes: A serves the name.
	holders(map[string][]string{"acct_a": {"x.example.com"}})
	if st, body := get("x.example.com"); st != 200 || body != "acct_a" {
		t.Errorf("x.example.com, now A's, not served: %d %q", st, body)
	}
}
