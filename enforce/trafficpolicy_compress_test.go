package enforce

import (
	"compress/gzip"
	"compress/zlib"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// decoded is a body decoded from its Content-Encoding.
func decoded(t *testing.T, coding, body string) string {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	var err error
	switch coding {
	case "gzip":
		r, err = gzip.NewReader(r)
	case "deflate":
		r, err = zlib.NewReader(r)
	case "br":
		r = brotli.NewReader(r)
	case "compress":
		cmd := exec.Command("gzip", "-dc") // gzip reads the compress program's .Z format
		cmd.Stdin = r
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("compress body: %v", err)
		}
		return string(out)
	}
	if err != nil {
		t.Fatalf("%s: %v", coding, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s body: %v", coding, err)
	}
	return string(b)
}

// TestPolicyCompressResponse: compress-response in on_http_response compresses what its rule
// matches with the coding the client prefers among those allowed (Vary: Accept-Encoding, no
// Content-Length), and leaves the rest; in on_http_request it compresses the response to come.
func TestPolicyCompressResponse(t *testing.T) {
	page := strings.Repeat("a compressible page ", 200)
	front, _ := policyFront(t, `{"on_http_response":[{"expressions":["req.url.path.startsWith('/api/')"],
	  "actions":[{"type":"compress-response","config":{"algorithms":["deflate"]}}]},
	  {"expressions":["req.url.path == '/page'"],"actions":[{"type":"compress-response"}]}]}`, PolicyOptions{})
	for _, c := range []struct{ path, accept, coding string }{
		{"/page", "gzip, deflate", "gzip"},
		{"/page", "gzip, deflate, br", "br"},
		{"/page", "deflate;q=1, gzip;q=0.5", "deflate"},
		{"/page", "br", "br"},
		{"/page", "zstd", ""},
		{"/page", "compress", "compress"},
		{"/api/x", "gzip, deflate", "deflate"}, // only deflate is allowed there
		{"/api/x", "gzip", ""},
		{"/other", "gzip", ""}, // no rule matches
	} {
		resp, body := do(t, "GET", front+c.path, "", map[string]string{"Accept-Encoding": c.accept})
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != c.coding || decoded(t, c.coding, body) != page {
			t.Errorf("%s with %q: %d %q, want %q", c.path, c.accept, resp.StatusCode, resp.Header.Get("Content-Encoding"), c.coding)
			continue
		}
		if c.coding != "" && (resp.Header.Get("Vary") != "Accept-Encoding" || resp.ContentLength != -1) {
			t.Errorf("%s with %q: Vary %q, length %d", c.path, c.accept, resp.Header.Get("Vary"), resp.ContentLength)
		}
	}
	front, _ = policyFront(t, `{"on_http_request":[{"expressions":["req.url.path == '/page'"],"actions":[{"type":"compress-response"}]}]}`, PolicyOptions{})
	resp, body := do(t, "GET", front+"/page", "", map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || decoded(t, "gzip", body) != page {
		t.Errorf("in on_http_request: %q", resp.Header.Get("Content-Encoding"))
	}
	if resp, _ := do(t, "HEAD", front+"/page", "", map[string]string{"Accept-Encoding": "gzip"}); resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("a HEAD was compressed: %v", resp.Header)
	}
	if resp, _ := do(t, "GET", front+"/api/x", "", map[string]string{"Accept-Encoding": "gzip"}); resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("a request the rule does not match was compressed")
	}
}

// TestPolicyCompressResponseRefused: an algorithm ngrok does not have is refused by Parse (the
// API's 400); every one ngrok has builds.
func TestPolicyCompressResponseRefused(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"algorithms":["zstd"]}`:          `"zstd" is not a compression algorithm`,
		`{"algorithms":["gzip","gzip"]}`:   `"gzip" is listed twice`,
		`{"algorithms":"gzip"}`:            `config`,
		`{"algorithms":["gzip"],"x":true}`: `unknown field "x"`,
	} {
		if _, err := trafficpolicy.Parse(`{"on_http_response":[{"actions":[{"type":"compress-response","config":` + cfg + `}]}]}`); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
	p, err := trafficpolicy.Parse(`{"on_http_request":[{"actions":[{"type":"compress-response","config":{"algorithms":["gzip","br","compress"]}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTrafficPolicy(p); err != nil {
		t.Errorf("gzip, br and compress: %v", err)
	}
}
