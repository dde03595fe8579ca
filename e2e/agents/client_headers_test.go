package agents

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// spoofedHeaders are a hostile client's headers in the spellings an upstream may read as
// edgeplane's own: CGI, WSGI, Rack and PHP turn '-' into '_' and ignore case, so each of these is
// HTTP_NGROK_AUTH_USER_EMAIL (or its neighbours) to the application.
var spoofedHeaders = [][2]string{
	{"ngrok_auth_user_email", "mallory@example.com"},
	{"Ngrok-Auth_User-Email", "mallory@example.com"},
	{"NGROK_AUTH_USER_ID", "admin"},
	{"ngrok-auth-user-name", "Mallory"},
	{"Ngrok_Mtls_Subject_Cn", "admin"},
	{"ngrok-mtls-serial-number", "1"},
	{"X_Forwarded_Proto", "https"},
	{"x_forwarded_host", "evil.example"},
	{"X_Forwarded_For", "10.6.6.6"},
	{"X-Forwarded-Proto", "https"},
	{"X-Forwarded-Host", "evil.example"},
	{"X-Forwarded-For", "10.9.9.9"},
}

// headerEcho answers with the request's headers as JSON, spellings kept.
var headerEcho = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_ = json.NewEncoder(w).Encode(r.Header)
})

// rawGet sends one HTTP/1.1 GET for host over a new TCP connection to addr with the headers
// written exactly as given, and returns the response.
func rawGet(t *testing.T, addr, host string, hdr [][2]string) (int, []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n")
	for _, h := range hdr {
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the response of %s: %v", host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// checkForwarded fails unless the upstream saw none of the client's identity headers in any
// spelling, no X-Forwarded-* spelled with underscores, X-Forwarded-Proto and -Host set to what
// edgeplane saw (proto, host) alone, and X-Forwarded-For with the client's value then the
// client's address.
func checkForwarded(t *testing.T, what string, saw http.Header, proto, host string) {
	t.Helper()
	for k, v := range saw {
		folded := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		if strings.HasPrefix(folded, "ngrok-auth-") || strings.HasPrefix(folded, "ngrok-mtls-") ||
			(strings.HasPrefix(folded, "x-forwarded-") && strings.Contains(k, "_")) {
			t.Errorf("%s: the upstream saw the client's %s: %q", what, k, v)
		}
	}
	for name, want := range map[string]string{"X-Forwarded-Proto": proto, "X-Forwarded-Host": host,
		"X-Forwarded-For": "10.9.9.9, 127.0.0.1"} {
		if got := saw.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s: the upstream saw %s %q, want %q", what, name, got, want)
		}
	}
}

// TestClientHeaderSpellings: a public client's identity headers (ngrok-auth-*, ngrok-mtls-*) in
// any spelling an upstream reads as the same name never reach an agent, on an endpoint or an
// edge of account A and an endpoint of account B; X-Forwarded-Proto and -Host are what
// edgeplane saw, whatever the client sent, and X-Forwarded-For is appended to.
func TestClientHeaderSpellings(t *testing.T) {
	w := start(t)
	b := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	w.reserveDomain("hdr-edge.example.com")
	sessA, sessB := w.mustConnect(tokenA), b.mustConnect(tokenB)
	for _, c := range []struct {
		w    *world
		name string
	}{{w, "hdr-a.edgeplane.app"}, {b, "hdr-b.edgeplane.app"}} {
		sess := sessA
		if c.w == b {
			sess = sessB
		}
		tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(c.name), config.WithScheme(config.SchemeHTTP)))
		if err != nil {
			t.Fatalf("bind %s: %v", c.name, err)
		}
		serveTunnel(t, tun, headerEcho)
	}
	lt, err := sessA.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "hdr")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, lt, headerEcho)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "hdr"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"hdr-edge.example.com:443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})

	for _, name := range []string{"hdr-a.edgeplane.app", "hdr-b.edgeplane.app"} {
		st, body := rawGet(t, w.http, name, spoofedHeaders)
		if st != 200 {
			t.Fatalf("%s: %d %s", name, st, body)
		}
		checkForwarded(t, name, upstreamSaw(t, body), "http", name)
	}

	c := w.httpsClient()
	eventually(t, 3*time.Second, "the edge is in the plan", func() bool { return statusOf(c, "https://hdr-edge.example.com/") == 200 })
	req, _ := http.NewRequest("GET", "https://hdr-edge.example.com/", nil)
	for _, h := range spoofedHeaders {
		req.Header[h[0]] = append(req.Header[h[0]], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("edge: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("edge: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	checkForwarded(t, "edge over HTTP/2", upstreamSaw(t, body), "https", "hdr-edge.example.com")
}
