package agents

import (
	"context"
	"net/http"
	"testing"

	"golang.ngrok.com/ngrok/config"
)

// TestCompressResponseThroughAnAgent: an agent endpoint whose own traffic policy has
// compress-response answers with the coding the client prefers among the allowed ones, br and
// compress included (br on a tie with gzip; q=0 refuses a coding), and the body decodes to the
// page (compress with gzip -d, an implementation of its own).
func TestCompressResponseThroughAnAgent(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("br.edgeplane.app"), config.WithScheme(config.SchemeHTTP),
		config.WithTrafficPolicy(`{"on_http_response":[{"expressions":["req.url.path == '/page'"],
		  "actions":[{"type":"compress-response","config":{"algorithms":["gzip","br","compress"]}}]}]}`)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, moduleUpstream(nil))
	c := w.httpClient()
	c.Transport.(*http.Transport).DisableCompression = true
	for _, cs := range []struct{ path, accept, coding string }{
		{"/page", "gzip, deflate, br, zstd", "br"},
		{"/page", "br", "br"},
		{"/page", "br;q=0.2, gzip;q=0.9", "gzip"},
		{"/page", "br;q=0, gzip", "gzip"},
		{"/page", "compress", "compress"},
		{"/page", "x-compress;q=0.9, gzip;q=0.1", "compress"},
		{"/page", "deflate", ""}, // not among the allowed algorithms
		{"/image", "br", ""},     // no rule matches
	} {
		resp, raw := send(t, c, "GET", "http://br.edgeplane.app"+cs.path, map[string]*string{"Accept-Encoding": ptr(cs.accept)})
		ce := resp.Header.Get("Content-Encoding")
		if resp.StatusCode != 200 || ce != cs.coding {
			t.Errorf("%s %q: %d Content-Encoding %q, want %q", cs.path, cs.accept, resp.StatusCode, ce, cs.coding)
			continue
		}
		if body := decode(t, ce, raw); body != bigPage {
			t.Errorf("%s %q: decoded to %d bytes, want the page", cs.path, cs.accept, len(body))
		}
		if ce != "" && (len(raw) > len(bigPage)/4 || resp.Header.Get("Vary") != "Accept-Encoding") {
			t.Errorf("%s %q: %d bytes, Vary %q", cs.path, cs.accept, len(raw), resp.Header.Get("Vary"))
		}
	}
}
