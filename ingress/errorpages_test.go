package ingress

import (
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
// accounts A and B, count only the error pages their own listeners answered: an unknown host
// (ERR_NGROK_3200) and B's IP restriction (ERR_NGROK_3205) on one server never show on the
// other. An ngrok-error-code header that A's upstream sends (as an agent's own error page does)
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
	start := func() (*Server, string) {
		s := New(Config{Lookup: func(proto, host string) Endpoint {
			switch {
			case proto != "http":
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
		go func() { _ = s.ServeHTTP(ln) }()
		t.Cleanup(func() { s.Close() })
		return s, ln.Addr().String()
	}
	one, oneAddr := start()
	two, twoAddr := start()
	get := func(addr, host, path string, status int, code string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", host, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
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

	for _, c := range []struct {
		name string
		s    *Server
		want map[string]uint64
	}{
		{"one", one, map[string]uint64{"ERR_NGROK_3200": 2}},
		{"two", two, map[string]uint64{"ERR_NGROK_3200": 1, "ERR_NGROK_3205": 1}},
	} {
		if got := c.s.Errors(); !maps.Equal(got, c.want) {
			t.Errorf("server %s counted %v, want %v", c.name, got, c.want)
		}
	}
}
