package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

var errorsAs = errors.As

// hello answers with the request's view of itself, so tests see what the upstream received.
func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello host=%s xff=%s xfp=%s xfh=%s path=%s", r.Host, r.Header.Get("X-Forwarded-For"),
		r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"), r.URL.Path)
}

// TestHTTPAndHTTPSEndpoints: an agent binds http and https endpoints under the service domain
// and on a reserved domain, and public requests reach it through both listeners.
func TestHTTPAndHTTPSEndpoints(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("app.example.com")
	sess := w.mustConnect(token)
	ctx := context.Background()

	plain, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("plain.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen http: %v\n%s", err, w.proc.Stderr)
	}
	if plain.URL() != "http://plain.edgeplane.app" {
		t.Errorf("http URL = %q", plain.URL())
	}
	serveTunnel(t, plain, http.HandlerFunc(hello))
	secure, err := sess.Listen(ctx, config.HTTPEndpoint(config.WithDomain("app.example.com")))
	if err != nil {
		t.Fatalf("listen https: %v", err)
	}
	if secure.URL() != "https://app.example.com" {
		t.Errorf("https URL = %q", secure.URL())
	}
	serveTunnel(t, secure, http.HandlerFunc(hello))

	st, body, _ := get(t, w.httpClient(), "http://plain.edgeplane.app/a/b")
	if st != 200 || !strings.HasPrefix(body, "hello host=plain.edgeplane.app xff=127.0.0.1 xfp=http xfh=plain.edgeplane.app path=/a/b") {
		t.Errorf("http endpoint: %d %q", st, body)
	}
	st, body, _ = get(t, w.httpsClient(), "https://app.example.com/x")
	if st != 200 || !strings.HasPrefix(body, "hello host=app.example.com xff=127.0.0.1 xfp=https xfh=app.example.com path=/x") {
		t.Errorf("https endpoint: %d %q", st, body)
	}
	// An https endpoint asked for over plain HTTP is redirected to HTTPS.
	st, _, h := get(t, w.httpClient(), "http://app.example.com/x?q=1")
	if st != http.StatusPermanentRedirect || h.Get("Location") != "https://app.example.com/x?q=1" {
		t.Errorf("http to an https endpoint: %d Location %q", st, h.Get("Location"))
	}
	// No endpoint: 404 with ERR_NGROK_3200.
	st, body, h = get(t, w.httpClient(), "http://nobody.edgeplane.app/")
	if st != 404 || h.Get("ngrok-error-code") != "ERR_NGROK_3200" || !strings.Contains(body, "ERR_NGROK_3200") {
		t.Errorf("offline endpoint: %d %q %q", st, h.Get("ngrok-error-code"), body)
	}
	// After the agent closes the tunnel, the endpoint is offline again.
	plain.Close()
	eventually(t, 5*time.Second, "endpoint offline after close", func() bool {
		st, _, _ := tryGet(w.httpClient(), "http://plain.edgeplane.app/")
		return st == 404
	})
}

// TestTCPAndTLSEndpoints: a random TCP address, a reserved one, and a TLS endpoint passed through.
func TestTCPAndTLSEndpoints(t *testing.T) {
	w := start(t, "--tcp-port-range", "23000-23999", "--tcp-addr-host", "127.0.0.1")
	_, token := w.credential()
	sess := w.mustConnect(token)
	ctx := context.Background()

	echo := func(l net.Listener) {
		go func() {
			for {
				c, err := acceptguard.Listener{Listener: l}.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					b, _ := io.ReadAll(c)
					_, _ = c.Write([]byte("echo:" + string(b)))
				}()
			}
		}()
	}
	random, err := sess.Listen(ctx, config.TCPEndpoint())
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	echo(random)
	var ra struct{ ID, Addr string }
	if st := w.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
		t.Fatalf("reserve addr: %d", st)
	}
	reserved, err := sess.Listen(ctx, config.TCPEndpoint(config.WithRemoteAddr(ra.Addr)))
	if err != nil {
		t.Fatalf("listen reserved tcp: %v", err)
	}
	echo(reserved)
	for _, tun := range []ngrok.Tunnel{random, reserved} {
		addr := strings.TrimPrefix(tun.URL(), "tcp://")
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		_, _ = c.Write([]byte("ping"))
		_ = c.(*net.TCPConn).CloseWrite() // half-close: the answer must still come back
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "echo:ping" {
			t.Errorf("tcp %s answered %q", addr, b)
		}
	}
	if !strings.HasSuffix(reserved.URL(), ra.Addr) {
		t.Errorf("reserved tcp URL %q, want the address %q", reserved.URL(), ra.Addr)
	}
}

// TestHostMustMatchServerName: a request whose Host differs from the TLS server name it came in
// on is answered 421 with ERR_NGROK_3200, not routed to the other name's endpoint.
func TestHostMustMatchServerName(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	for _, name := range []string{"one.edgeplane.app", "two.edgeplane.app"} {
		tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name)))
		if err != nil {
			t.Fatalf("listen %s: %v", name, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(hello))
	}
	c, err := tls.Dial("tcp", w.https, &tls.Config{RootCAs: w.ca, ServerName: "one.edgeplane.app", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: two.edgeplane.app\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3200" {
		t.Errorf("Host two over the server name one: %d %q", resp.StatusCode, resp.Header.Get("ngrok-error-code"))
	}
}
