package enforce

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
)

// TestNegotiateCoding: q-values decide, ties go to the server's order (br, gzip, deflate,
// compress), "*" covers unnamed codings, q=0 and malformed weights refuse, identity and codings
// edgeplane does not have (zstd) are never chosen, x-gzip is gzip and x-compress compress.
func TestNegotiateCoding(t *testing.T) {
	for accept, want := range map[string]string{
		"":                                  "",
		"gzip":                              "gzip",
		"deflate":                           "deflate",
		"br":                                "br",
		"gzip, deflate, br":                 "br",
		"gzip, deflate, br, zstd":           "br",
		"deflate, gzip":                     "gzip",
		"gzip;q=0.5, deflate;q=0.8":         "deflate",
		"gzip;q=1.0, br; q=0.5, *;q=0":      "gzip", // ngrok's documented example
		"gzip;q=0":                          "",
		"gzip;q=0, *":                       "br",
		"br;q=0, *":                         "gzip",
		"br;q=0, gzip;q=0, *;q=0.1":         "deflate",
		"br;q=0, gzip;q=0, deflate;q=0, *":  "compress",
		"*":                                 "br",
		"*;q=0":                             "",
		"*;q=0, deflate":                    "deflate",
		"identity":                          "",
		"identity;q=0":                      "",
		"identity, gzip;q=0.001":            "gzip",
		"compress, zstd":                    "compress",
		"x-compress":                        "compress",
		"compress, deflate":                 "deflate",
		"compress;q=1, gzip;q=0.5":          "compress",
		"zstd":                              "",
		"GZIP ; Q=0.3":                      "gzip",
		"BR;Q=0.3, gzip;q=0.2":              "br",
		"gzip;q=nonsense":                   "",
		"gzip;q=2":                          "",
		"gzip;q=-1":                         "",
		"x-gzip":                            "gzip",
		"br;q=1, gzip;q=0.1":                "br",
		"br;q=0.1, gzip;q=1":                "gzip",
		"deflate;q=0.5, gzip;q=0.5":         "gzip",
		"deflate;q=0.5, br;q=0.5":           "br",
		"gzip;q=0.2,gzip;q=0.9,zstd":        "gzip",
		"gzip;level=1;q=0.4, deflate;q=0.3": "gzip",
	} {
		if got := NegotiateCoding([]string{accept}); got != want {
			t.Errorf("Accept-Encoding %q: %q, want %q", accept, got, want)
		}
	}
}

// compressTarget answers by path: a compressible page, already encoded data, a range, a
// no-transform page, a small page, an image, a HEAD.
func compressTarget() http.Handler {
	page := strings.Repeat("hello compressible world ", 100)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(page)))
		h.Set("Etag", `"v1"`)
		status := http.StatusOK
		switch r.URL.Path {
		case "/encoded":
			h.Set("Content-Encoding", "br")
		case "/range":
			h.Set("Content-Range", "bytes 0-2499/5000")
			status = http.StatusPartialContent
		case "/no-transform":
			h.Set("Cache-Control", "public, no-transform")
		case "/small":
			h.Set("Content-Length", "5")
			w.WriteHeader(status)
			w.Write([]byte("small"))
			return
		case "/image":
			h.Set("Content-Type", "image/png")
		case "/json":
			h.Set("Content-Type", "application/problem+json")
			h.Set("Vary", "Origin")
		}
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			w.Write([]byte(page))
		}
	})
}

// TestCompression: which responses are compressed, with which headers, and that the bodies
// decode to the original.
func TestCompression(t *testing.T) {
	c := NewCompression()
	if c.Name() != "compression" {
		t.Errorf("name %q", c.Name())
	}
	srv := httptest.NewServer(c.Wrap(compressTarget()))
	defer srv.Close()
	page := strings.Repeat("hello compressible world ", 100)
	client := &http.Transport{DisableCompression: true} // asks for what the case says, decodes nothing
	defer client.CloseIdleConnections()
	cases := []struct {
		method, path, accept, coding string
		vary                         string
	}{
		{"GET", "/", "gzip, deflate", "gzip", "Accept-Encoding"},
		{"GET", "/", "deflate", "deflate", "Accept-Encoding"},
		{"GET", "/", "", "", "Accept-Encoding"}, // not accepted: unchanged, but the answer varies
		{"GET", "/", "br", "br", "Accept-Encoding"},
		{"GET", "/", "gzip, deflate, br", "br", "Accept-Encoding"},
		{"GET", "/", "zstd", "", "Accept-Encoding"},
		{"GET", "/", "compress", "compress", "Accept-Encoding"},
		{"GET", "/json", "gzip", "gzip", "Origin, Accept-Encoding"},
		{"GET", "/encoded", "gzip", "br", ""},
		{"GET", "/range", "gzip", "", ""},
		{"GET", "/no-transform", "gzip", "", ""},
		{"GET", "/small", "gzip", "", ""},
		{"GET", "/image", "gzip", "", ""},
		{"HEAD", "/", "gzip", "", "Accept-Encoding"},
	}
	for _, cs := range cases {
		req, _ := http.NewRequest(cs.method, srv.URL+cs.path, nil)
		if cs.accept != "" {
			req.Header.Set("Accept-Encoding", cs.accept)
		}
		resp, err := client.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name := cs.method + " " + cs.path + " " + cs.accept
		if got := resp.Header.Get("Content-Encoding"); got != cs.coding {
			t.Errorf("%s: Content-Encoding %q, want %q", name, got, cs.coding)
		}
		if got := strings.Join(resp.Header.Values("Vary"), ", "); got != cs.vary {
			t.Errorf("%s: Vary %q, want %q", name, got, cs.vary)
		}
		if cs.coding != "" && cs.path != "/encoded" { // compressed here (/encoded comes encoded)
			if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(raw)) {
				t.Errorf("%s: a compressed response kept the upstream's Content-Length %s", name, cl)
			}
			if et := resp.Header.Get("Etag"); et != `W/"v1"` {
				t.Errorf("%s: ETag %q, want it weak", name, et)
			}
			if body := decoded(t, cs.coding, string(raw)); body != page {
				t.Errorf("%s: decoded %d bytes, want the page", name, len(body))
			}
			if len(raw) >= len(page)/4 {
				t.Errorf("%s: %d bytes compressed to %d", name, len(page), len(raw))
			}
			continue
		}
		if cs.method == "GET" && cs.path != "/small" && string(raw) != page {
			t.Errorf("%s: the body changed (%d bytes)", name, len(raw))
		}
		if resp.Header.Get("Etag") != `"v1"` {
			t.Errorf("%s: ETag changed to %q", name, resp.Header.Get("Etag"))
		}
	}
}

// TestCompressionStreams: a streamed response is compressed as it goes, with gzip and with br,
// each flush reaching the client before the upstream writes more; nothing is held back until
// the end.
func TestCompressionStreams(t *testing.T) {
	for _, coding := range []string{"gzip", "br"} {
		compressionStreams(t, coding)
	}
}

func compressionStreams(t *testing.T, coding string) {
	next := make(chan struct{})
	srv := httptest.NewServer(NewCompression().Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			w.Write([]byte("data: event " + strconv.Itoa(i) + "\n\n"))
			http.NewResponseController(w).Flush()
			select {
			case <-next:
			case <-time.After(5 * time.Second):
				return
			}
		}
	})))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept-Encoding", coding)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != coding {
		t.Fatalf("not compressed: %v", resp.Header)
	}
	var zr io.Reader = brotli.NewReader(resp.Body)
	if coding == "gzip" {
		if zr, err = gzip.NewReader(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	for i := range 3 {
		want := "data: event " + strconv.Itoa(i) + "\n\n"
		got := ""
		for len(got) < len(want) {
			n, err := zr.Read(buf[:len(want)-len(got)])
			got += string(buf[:n])
			if err != nil {
				t.Fatalf("%s event %d: %q, %v", coding, i, got, err)
			}
		}
		if got != want {
			t.Fatalf("%s event %d: %q", coding, i, got)
		}
		next <- struct{}{} // the upstream writes the next event only now
	}
	if rest, err := io.ReadAll(zr); err != nil || len(rest) != 0 {
		t.Errorf("after the events: %q %v", rest, err)
	}
}

// TestCompressionAbort: an upstream that fails mid-body (the proxy panics with
// http.ErrAbortHandler) does not get a gzip trailer that would make the cut body look whole.
func TestCompressionAbort(t *testing.T) {
	srv := httptest.NewServer(NewCompression().Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(strings.Repeat("partial ", 1000)))
		http.NewResponseController(w).Flush() // the status and a first part reach the client
		panic(http.ErrAbortHandler)
	})))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err == nil || !strings.HasPrefix(string(b), "partial partial") {
		t.Errorf("a cut response decoded as complete")
	}
}
