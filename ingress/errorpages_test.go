package ingress

import (
	"context"
	"crypto/tls"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/edgeplane/edgeplane/enforce"
)

// moduleEndpoint is an account's endpoint whose modules are chain.
type moduleEndpoint struct {
	agentEndpoint
	chain *enforce.Chain
}

func (e *moduleEndpoint) Chain() *enforce.Chain { return e.chain }

// TestErrorPagesCountedPerServer: two public servers in one process, each with endpoints of
// accounts A and B, count only the error pages their own listeners answered, over HTTP and over
// HTTPS (HTTP/2): an unknown host (ERR_NGROK_3200) and B's IP restriction (ERR_NGROK_3205) on
// one server never show on the other. An ngrok-error-code header that A's upstream sends (as an agent's own error page does)
// reaches the client and counts nowhere: it is not edgeplane's answer, and its values are the
// upstream's to choose.
func TestErrorPagesCountedPerServer(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/agent-error" {
			w.Header().Set("ngrok-error-code", "ERR_NGROK_8012")
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	deny, err := enforce.NewIPFilter(nil, []string{"127.0.0.0/8", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	a := &moduleEndpoint{agentEndpoint: agentEndpoint{account: "acct_a", upstream: upstream.Listener.Addr().String()}}
	b := &moduleEndpoint{agentEndpoint: agentEndpoint{account: "acct_b", upstream: upstream.Listener.Addr().String()},
		chain: &enforce.Chain{Conn: []enforce.ConnStage{deny}}}
	ca := testCA(t)
	start := func() (*Server, string, string) {
		s := New(Config{Certificate: func(host string) (*tls.Certificate, error) { return ca.Issue(host) }, Lookup: func(proto, host string) Endpoint {
			switch {
			case proto != "http" && proto != "https":
				return nil
			case host == "a.example.com":
				return a
			case host == "b.example.com":
				return b
			}
			return nil
		}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.ServeHTTP(ln) }()
		go func() { _ = s.ServeTLS(tln) }()
		t.Cleanup(func() { s.Close() })
		return s, ln.Addr().String(), tln.Addr().String()
	}
	one, oneAddr, _ := start()
	two, twoAddr, twoTLS := start()
	// Over HTTPS the requests are HTTP/2, whose requests' contexts the listener sets per
	// connection too.
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	get := func(addr, host, path string, status int, code string) {
		t.Helper()
		scheme, rt := "http", http.DefaultTransport
		if addr == twoTLS {
			scheme, rt = "https", h2
		}
		req, _ := http.NewRequest("GET", scheme+"://"+host+path, nil)
		tr := rt.(*http.Transport).Clone()
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		defer tr.CloseIdleConnections()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", host, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if scheme == "https" && resp.ProtoMajor != 2 {
			t.Fatalf("GET https://%s%s over %s, want HTTP/2", host, path, resp.Proto)
		}
		if resp.StatusCode != status || resp.Header.Get("ngrok-error-code") != code {
			t.Fatalf("GET %s%s: %d %q, want %d %q", host, path, resp.StatusCode, resp.Header.Get("ngrok-error-code"), status, code)
		}
	}

	get(oneAddr, "a.example.com", "/", 200, "")
	get(oneAddr, "a.example.com", "/agent-error", 502, "ERR_NGROK_8012")
	get(oneAddr, "unknown.example.com", "/", 404, "ERR_NGROK_3200")
	get(oneAddr, "unknown.example.com", "/", 404, "ERR_NGROK_3200")
	get(twoAddr, "b.example.com", "/", 403, "ERR_NGROK_3205")
	get(twoAddr, "unknown.example.com", "/", 404, "ERR_NGROK_3200")
	get(twoAddr, "a.example.com", "/agent-error", 502, "ERR_NGROK_8012")
	get(twoTLS, "b.example.com", "/", 403, "ERR_NGROK_3205")
	get(twoTLS, "a.example.com", "/agent-error", 502, "ERR_NGROK_8012")

	for _, c := range []struct {
		name string
		s    *Server
		want map[string]uint64
	}{
		{"one", one, map[string]uint64{"ERR_NGROK_3200": 2}},
		{"two", two, map[string]uint64{"ERR_NGROK_3200": 1, "ERR_NGROK_3205": 2}},
	} {
		if got := c.s.Errors(); !maps.Equal(got, c.want) {
			t.Errorf("server %s counted %v, want %v", c.name, got, c.want)
		}
	}
}
