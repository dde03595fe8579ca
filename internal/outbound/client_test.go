package outbound

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// server serves "ok" on a real socket at addr (host:0), counting the connections it accepted.
func server(t *testing.T, addr string, h http.Handler) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	}
	s := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	var conns atomic.Int32
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// The guarded client refuses a server on loopback, whether named by its address or by a name
// that resolves to it, before connecting; with AllowPrivate it reaches it.
func TestClientRefusesLoopback(t *testing.T) {
	s, conns := server(t, "127.0.0.1:0", nil)
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	for _, url := range []string{s.URL, "http://localhost:" + port + "/"} {
		_, err := get(NewClient(Options{}), url)
		r, ok := Refused(err)
		if !ok || r.Class != ClassLoopback {
			t.Fatalf("GET %s with the strict client: %v, want a loopback refusal", url, err)
		}
		if !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "--outbound-allow-private") {
			t.Errorf("the refusal does not name its reason and the flag: %v", err)
		}
		if strings.Contains(r.Reason(), "127.0.0.1") || !strings.Contains(r.Reason(), "a loopback address") {
			t.Errorf("Reason() = %q: it names the class, never the address", r.Reason())
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the refused server accepted %d connections", n)
	}
	if body, err := get(NewClient(Options{AllowPrivate: true}), s.URL); err != nil || body != "ok" {
		t.Errorf("with AllowPrivate: %q %v", body, err)
	}
}

// A redirect from an allowed server to a refused one is refused at its own dial: the refused
// server never sees a connection.
func TestClientRefusesRedirectToRefusedAddress(t *testing.T) {
	refused, conns := server(t, "127.0.0.1:0", nil)
	allowed, _ := server(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/here" {
			_, _ = io.WriteString(w, "here")
			return
		}
		http.Redirect(w, r, refused.URL+"/keys", http.StatusFound)
	}))
	c := NewClient(Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	if body, err := get(c, allowed.URL+"/here"); err != nil || body != "here" {
		t.Fatalf("the allowed server: %q %v", body, err)
	}
	_, err := get(c, allowed.URL+"/jwks")
	if r, ok := Refused(err); !ok || r.Class != ClassLoopback || r.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("redirected to 127.0.0.1: %v, want a loopback refusal", err)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the server redirected to accepted %d connections", n)
	}
}

// The client uses no proxy from the environment: a proxy would be the address checked.
func TestClientIgnoresProxyEnvironment(t *testing.T) {
	proxy, proxied := server(t, "127.0.0.1:0", nil)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	if tr := NewTransport(Options{}); tr.Proxy != nil {
		t.Error("the transport has a proxy function")
	}
	_, err := get(NewClient(Options{}), "http://127.0.0.3:9/")
	if _, ok := Refused(err); !ok {
		t.Errorf("through the environment's proxy: %v, want a refusal of the target", err)
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy got %d connections", n)
	}
}
