package agents

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"golang.ngrok.com/ngrok/config"
)

// The request_headers, response_headers, compression and user_agent_filter modules on real
// traffic: configured on an edge's route through the API, and asked for by an agent in its bind
// options.

// bigPage is a compressible body well above enforce.MinCompressSize.
var bigPage = strings.Repeat("<p>edgeplane compresses this page</p>\n", 200)

// moduleUpstream is the agent's service: /headers answers with the request's headers as JSON
// (what the upstream received), /page a large HTML page, /image bytes of an image type,
// /stream three server-sent events, each sent only after the test took the previous one from
// gate. Every answer carries X-Powered-By and Server headers for response_headers to edit.
func moduleUpstream(gate chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Powered-By", "php")
		w.Header().Set("Server", "apache")
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Length", strconv.Itoa(len(bigPage)))
			io.WriteString(w, bigPage)
		case "/image":
			w.Header().Set("Content-Type", "image/png")
			io.WriteString(w, bigPage)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				io.WriteString(w, "data: event "+strconv.Itoa(i)+"\n\n")
				http.NewResponseController(w).Flush()
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Second):
					return
				}
			}
		default:
			w.Header().Set("Content-Type", "application/json")
			h := r.Header.Clone()
			h.Set("Host", r.Host)
			json.NewEncoder(w).Encode(h)
		}
	})
}

// send makes a request with the given headers (a nil value leaves the header out, "" sends it
// empty) and returns the response with its raw body; the client decodes nothing itself.
func send(t *testing.T, c *http.Client, method, url string, hdr map[string]*string) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := try(c, method, url, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp, b
}

// try is send that returns the error, for polling a host whose configuration is still on its
// way to the data plane (its TLS certificate included).
func try(c *http.Client, method, url string, hdr map[string]*string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(method, url, nil)
	req.Header["User-Agent"] = nil // none unless the case gives one
	for k, v := range hdr {
		if v != nil {
			req.Header[http.CanonicalHeaderKey(k)] = []string{*v}
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// waitServed polls url until it answers (any status), within 3 s.
func waitServed(t *testing.T, c *http.Client, url string) {
	t.Helper()
	eventually(t, 3*time.Second, url+" is served", func() bool {
		_, _, err := try(c, "GET", url, nil)
		return err == nil
	})
}

func ptr(s string) *string { return &s }

// upstreamSaw decodes /headers' answer.
func upstreamSaw(t *testing.T, body []byte) http.Header {
	t.Helper()
	var h http.Header
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("the upstream's answer %q: %v", body, err)
	}
	return h
}

// moduleEdge makes an edge on host with one route "/" to a tunnel group of the labeled tunnel
// the agent serves with moduleUpstream, and returns the route's module path prefix.
func moduleEdge(t *testing.T, w *world, host string, gate chan struct{}) (string, func(modules ...string) string) {
	_, token := w.credential()
	w.reserveDomain(host)
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", host)))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, moduleUpstream(gate))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": host}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	base := "/edges/https/" + edge + "/routes/" + route
	return token, func(m ...string) string { return base + "/" + strings.Join(m, "/") }
}

// apiRefuses PUTs a module and expects 400 with the code, the message naming the field.
func apiRefuses(t *testing.T, w *world, path string, body any, code, field string) {
	t.Helper()
	var e struct {
		ErrorCode string `json:"error_code"`
		Msg       string `json:"msg"`
	}
	if st := w.call("PUT", path, body, &e); st != 400 || e.ErrorCode != code || !strings.HasPrefix(e.Msg, field+":") {
		t.Errorf("PUT %s %v: %d %s %q, want 400 %s naming %s", path, body, st, e.ErrorCode, e.Msg, code, field)
	}
}

// TestHeaderModulesOnTraffic: request_headers removes and replaces what the client sent and
// the X-Forwarded headers edgeplane adds; response_headers edits the upstream's answer; the
// API and a bind refuse hop-by-hop headers, Host and Content-Length.
func TestHeaderModulesOnTraffic(t *testing.T) {
	w := start(t)
	token, module := moduleEdge(t, w, "hdr.example.com", nil)
	apiRefuses(t, w, module("request_headers"), map[string]any{"add": map[string]string{"Connection": "close"}}, "ERR_NGROK_215", "add")
	apiRefuses(t, w, module("request_headers"), map[string]any{"add": map[string]string{"host": "evil.example"}}, "ERR_NGROK_215", "add")
	apiRefuses(t, w, module("request_headers"), map[string]any{"remove": []string{"content-length"}}, "ERR_NGROK_215", "remove")
	apiRefuses(t, w, module("response_headers"), map[string]any{"remove": []string{"Transfer-Encoding"}}, "ERR_NGROK_215", "remove")
	apiRefuses(t, w, module("response_headers"), map[string]any{"add": map[string]string{"upgrade": "h2c"}}, "ERR_NGROK_215", "add")

	if st := w.call("PUT", module("request_headers"), map[string]any{
		"add":    map[string]string{"x-env": "prod", "X-Forwarded-Host": "public.example"},
		"remove": []string{"X-SECRET", "x-forwarded-for"},
	}, nil); st != 200 {
		t.Fatalf("put request_headers: %d", st)
	}
	if st := w.call("PUT", module("response_headers"), map[string]any{
		"add": map[string]string{"server": "edgeplane-edge"}, "remove": []string{"x-powered-by"},
	}, nil); st != 200 {
		t.Fatalf("put response_headers: %d", st)
	}
	c := w.httpsClient()
	var resp *http.Response
	var body []byte
	eventually(t, 3*time.Second, "the header modules reach traffic", func() bool {
		var err error
		resp, body, err = try(c, "GET", "https://hdr.example.com/headers", map[string]*string{
			"X-Env": ptr("dev"), "X-Secret": ptr("s3cret"), "X-Keep": ptr("k"), "User-Agent": ptr("curl/8")})
		return err == nil && resp.StatusCode == 200 && resp.Header.Get("Server") == "edgeplane-edge"
	})
	got := upstreamSaw(t, body)
	for name, want := range map[string]string{"X-Env": "prod", "X-Secret": "", "X-Keep": "k", "X-Forwarded-For": "",
		"X-Forwarded-Host": "public.example", "X-Forwarded-Proto": "https", "Host": "hdr.example.com", "User-Agent": "curl/8"} {
		if v := strings.Join(got[name], ","); v != want {
			t.Errorf("the upstream got %s %q, want %q", name, v, want)
		}
	}
	if resp.Header.Get("X-Powered-By") != "" || resp.Header.Get("Server") != "edgeplane-edge" {
		t.Errorf("the client got %v", resp.Header)
	}
	// A deleted module stops acting, live.
	if st := w.call("DELETE", module("request_headers"), nil, nil); st != 204 {
		t.Fatalf("delete request_headers: %d", st)
	}
	eventually(t, 2*time.Second, "a deleted module stops acting", func() bool {
		resp, body, err := try(c, "GET", "https://hdr.example.com/headers", map[string]*string{"X-Secret": ptr("s3cret")})
		return err == nil && resp.StatusCode == 200 && upstreamSaw(t, body).Get("X-Secret") == "s3cret"
	})

	// The same modules asked for by an agent in its bind options.
	sess := w.mustConnect(token)
	ctx := context.Background()
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("hdr-bind.edgeplane.app"),
		config.WithRequestHeader("X-Env", "prod"), config.WithRemoveRequestHeader("x-secret"),
		config.WithResponseHeader("Server", "edgeplane-bind"), config.WithRemoveResponseHeader("X-Powered-By")))
	if err != nil {
		t.Fatalf("bind with header options: %v", err)
	}
	serveTunnel(t, tun, moduleUpstream(nil))
	waitServed(t, c, "https://hdr-bind.edgeplane.app/headers")
	resp, body = send(t, c, "GET", "https://hdr-bind.edgeplane.app/headers", map[string]*string{"X-Env": ptr("dev"), "X-Secret": ptr("s")})
	got = upstreamSaw(t, body)
	if got.Get("X-Env") != "prod" || got.Get("X-Secret") != "" || got.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("through the bind the upstream got %v", got)
	}
	if resp.Header.Get("Server") != "edgeplane-bind" || resp.Header.Get("X-Powered-By") != "" {
		t.Errorf("through the bind the client got %v", resp.Header)
	}
	for name, opt := range map[string]config.HTTPEndpointOption{
		"add Connection":           config.WithRequestHeader("Connection", "close"),
		"remove Host":              config.WithRemoveRequestHeader("Host"),
		"add Content-Length":       config.WithResponseHeader("Content-Length", "1"),
		"remove Transfer-Encoding": config.WithRemoveResponseHeader("transfer-encoding"),
	} {
		_, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("hdr-bad.edgeplane.app"), opt))
		if code := ngrokCode(err); code != "ERR_NGROK_301" || !strings.Contains(err.Error(), "cannot be") {
			t.Errorf("a bind that would %s: %v, want ERR_NGROK_301", name, err)
		}
	}
}

// decode reads a body in the coding the response names.
func decode(t *testing.T, coding string, raw []byte) string {
	t.Helper()
	var rd io.Reader
	var err error
	switch coding {
	case "gzip":
		rd, err = gzip.NewReader(strings.NewReader(string(raw)))
	case "deflate":
		rd, err = zlib.NewReader(strings.NewReader(string(raw)))
	case "br":
		rd = brotli.NewReader(strings.NewReader(string(raw)))
	case "compress":
		cmd := exec.Command("gzip", "-dc") // gzip reads the compress program's .Z format
		cmd.Stdin = strings.NewReader(string(raw))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("compress body: %v", err)
		}
		return string(out)
	default:
		return string(raw)
	}
	if err != nil {
		t.Fatalf("%s body: %v", coding, err)
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("%s body: %v", coding, err)
	}
	return string(b)
}

// TestCompressionOnTraffic: a route with compression answers br, gzip or deflate as the client
// prefers (br on a tie), leaves alone what it should not compress, streams (each event before
// the next is written, with gzip and with br), and the same holds for a bind's Compression
// option.
func TestCompressionOnTraffic(t *testing.T) {
	w := start(t)
	gate := make(chan struct{})
	token, module := moduleEdge(t, w, "zip.example.com", gate)
	if st := w.call("PUT", module("compression"), map[string]any{"enabled": true}, nil); st != 200 {
		t.Fatalf("put compression: %d", st)
	}
	c := w.httpsClient()
	c.Transport.(*http.Transport).DisableCompression = true
	eventually(t, 3*time.Second, "compression reaches traffic", func() bool {
		resp, _, err := try(c, "GET", "https://zip.example.com/page", map[string]*string{"Accept-Encoding": ptr("gzip")})
		return err == nil && resp.Header.Get("Content-Encoding") == "gzip"
	})
	check := func(base string) {
		t.Helper()
		for _, cs := range []struct{ path, accept, coding, vary string }{
			{"/page", "gzip, deflate, br", "br", "Accept-Encoding"},
			{"/page", "gzip, deflate", "gzip", "Accept-Encoding"},
			{"/page", "gzip;q=0.4, deflate", "deflate", "Accept-Encoding"},
			{"/page", "", "", "Accept-Encoding"},
			{"/page", "br", "br", "Accept-Encoding"},
			{"/page", "br;q=0, zstd", "", "Accept-Encoding"},
			{"/page", "compress", "compress", "Accept-Encoding"},
			{"/image", "gzip", "", ""},
		} {
			hdr := map[string]*string{}
			if cs.accept != "" {
				hdr["Accept-Encoding"] = ptr(cs.accept)
			}
			resp, raw := send(t, c, "GET", base+cs.path, hdr)
			ce := resp.Header.Get("Content-Encoding")
			if resp.StatusCode != 200 || ce != cs.coding || resp.Header.Get("Vary") != cs.vary {
				t.Errorf("%s%s %q: %d Content-Encoding %q Vary %q, want %q %q", base, cs.path, cs.accept, resp.StatusCode, ce,
					resp.Header.Get("Vary"), cs.coding, cs.vary)
				continue
			}
			if body := decode(t, ce, raw); body != bigPage {
				t.Errorf("%s%s %q: the body decoded to %d bytes, want the page", base, cs.path, cs.accept, len(body))
			}
			if ce != "" && len(raw) > len(bigPage)/4 {
				t.Errorf("%s%s: %d bytes compressed to %d", base, cs.path, len(bigPage), len(raw))
			}
		}
		// A stream: each event reaches the client before the upstream writes the next.
		for _, coding := range []string{"gzip", "br"} {
			req, _ := http.NewRequest("GET", base+"/stream", nil)
			req.Header.Set("Accept-Encoding", coding)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			defer resp.Body.Close()
			if resp.Header.Get("Content-Encoding") != coding {
				t.Fatalf("stream not compressed with %s: %v", coding, resp.Header)
			}
			var zr io.Reader = brotli.NewReader(resp.Body)
			if coding == "gzip" {
				if zr, err = gzip.NewReader(resp.Body); err != nil {
					t.Fatalf("stream: %v", err)
				}
			}
			for i := range 3 {
				want := "data: event " + strconv.Itoa(i) + "\n\n"
				buf := make([]byte, len(want))
				if _, err := io.ReadFull(zr, buf); err != nil || string(buf) != want {
					t.Fatalf("%s stream event %d: %q %v", coding, i, buf, err)
				}
				gate <- struct{}{}
			}
		}
	}
	check("https://zip.example.com")

	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("zip-bind.edgeplane.app"), config.WithCompression()))
	if err != nil {
		t.Fatalf("bind with compression: %v", err)
	}
	serveTunnel(t, tun, moduleUpstream(gate))
	waitServed(t, c, "https://zip-bind.edgeplane.app/image")
	check("https://zip-bind.edgeplane.app")
}

// TestUserAgentFilterOnTraffic: an allow rule overrides the deny rules, deny refuses, a
// request without User-Agent is refused, and with an allow rule anything unmatched is
// refused; refusals are 403 ERR_NGROK_3211 and never reach the agent. Invalid rules are
// refused by the API and by a bind.
func TestUserAgentFilterOnTraffic(t *testing.T) {
	w := start(t)
	token, module := moduleEdge(t, w, "ua.example.com", nil)
	apiRefuses(t, w, module("user_agent_filter"), map[string]any{"deny": []string{"ok", "(unclosed"}}, "ERR_NGROK_215", "deny[1]")
	apiRefuses(t, w, module("user_agent_filter"), map[string]any{"allow": []string{"[z-a]"}}, "ERR_NGROK_215", "allow[0]")
	if st := w.call("PUT", module("user_agent_filter"), map[string]any{
		"allow": []string{`(?i)google-images`}, "deny": []string{`(?i)google`, `[Bb]ing`},
	}, nil); st != 200 {
		t.Fatalf("put user_agent_filter: %d", st)
	}
	c := w.httpsClient()
	eventually(t, 3*time.Second, "the filter reaches traffic", func() bool {
		resp, _, err := try(c, "GET", "https://ua.example.com/headers", map[string]*string{"User-Agent": ptr("Googlebot/2.1")})
		return err == nil && resp.StatusCode == 403
	})
	check := func(url string, cases map[string]int) {
		t.Helper()
		for ua, want := range cases {
			hdr := map[string]*string{"User-Agent": ptr(ua)}
			if ua == "<none>" {
				hdr = nil
			}
			resp, body := send(t, c, "GET", url, hdr)
			if resp.StatusCode != want {
				t.Errorf("%s %q: %d, want %d", url, ua, resp.StatusCode, want)
			}
			switch want {
			case 403:
				if resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3211" || strings.Contains(string(body), "X-Forwarded") {
					t.Errorf("%s %q: refused with %q %q", url, ua, resp.Header.Get("ngrok-error-code"), body)
				}
			case 200:
				if got := upstreamSaw(t, body).Get("User-Agent"); got != ua {
					t.Errorf("%s %q: the upstream got User-Agent %q", url, ua, got)
				}
			}
		}
	}
	check("https://ua.example.com/headers", map[string]int{
		"Google-Images/1.0": 200, // the allow rule overrides the deny rule
		"Googlebot/2.1":     403,
		"bingbot/2.0":       403,
		"curl/8.5":          403, // an allow rule exists and did not match
		"<none>":            403,
	})
	// Deny rules alone: anything they do not match is admitted, but not a missing User-Agent.
	if st := w.call("PUT", module("user_agent_filter"), map[string]any{"deny": []string{`(?i)bot`}}, nil); st != 200 {
		t.Fatalf("put user_agent_filter: %d", st)
	}
	eventually(t, 2*time.Second, "the new rules reach traffic", func() bool {
		resp, _, err := try(c, "GET", "https://ua.example.com/headers", map[string]*string{"User-Agent": ptr("curl/8.5")})
		return err == nil && resp.StatusCode == 200
	})
	check("https://ua.example.com/headers", map[string]int{"curl/8.5": 200, "Mozilla/5.0": 200, "Googlebot/2.1": 403, "<none>": 403})

	sess := w.mustConnect(token)
	ctx := context.Background()
	tun, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("ua-bind.edgeplane.app"),
		config.WithAllowUserAgent(`^curl/`), config.WithDenyUserAgent(`^curl/7\.`)))
	if err != nil {
		t.Fatalf("bind with a user agent filter: %v", err)
	}
	serveTunnel(t, tun, moduleUpstream(nil))
	waitServed(t, c, "https://ua-bind.edgeplane.app/headers")
	check("https://ua-bind.edgeplane.app/headers", map[string]int{"curl/8.5": 200, "curl/7.1": 200, "Mozilla/5.0": 403, "<none>": 403})
	_, err = sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("ua-bad.edgeplane.app"), config.WithDenyUserAgent(`(`)))
	if code := ngrokCode(err); code != "ERR_NGROK_301" || !strings.Contains(err.Error(), "deny[0]") {
		t.Errorf("a bind with an invalid rule: %v, want ERR_NGROK_301 naming deny[0]", err)
	}
}
