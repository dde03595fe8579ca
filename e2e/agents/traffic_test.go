package agents

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok/config"
)

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestStreaming: a 64 MiB upload and a 64 MiB download through an https endpoint, a websocket
// style upgrade carried both ways, keep-alive, HTTP/2 from the public client, and the 502 page
// when the tunnel fails mid-request.
func TestStreaming(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("stream.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	const size = 64 << 20
	mux := http.NewServeMux()
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		fmt.Fprintf(w, "%d %s", n, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		_, _ = io.CopyN(w, zeros{}, size)
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "no upgrade", 400)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = rw.Flush()
		line, _ := rw.ReadString('\n')
		_, _ = rw.WriteString("echo " + line)
		_ = rw.Flush()
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close() // the upstream dies before answering
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Proto) })
	serveTunnel(t, tun, mux)

	client := w.httpsClient()
	zero := sha256.New()
	_, _ = io.CopyN(zero, zeros{}, size)
	want := fmt.Sprintf("%d %s", size, hex.EncodeToString(zero.Sum(nil)))
	resp, err := client.Post("https://stream.edgeplane.app/upload", "application/octet-stream", io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != want {
		t.Errorf("upload: upstream saw %q, want %q", body, want)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("the public client negotiated %s, want HTTP/2", resp.Proto)
	}

	resp, err = client.Get("https://stream.edgeplane.app/download")
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Errorf("download: %d bytes, %v; want %d", n, err, size)
	}

	// The upgrade, over HTTP/1.1 on the TLS listener.
	c, err := tls.Dial("tcp", w.https, &tls.Config{RootCAs: w.ca, ServerName: "stream.edgeplane.app", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /upgrade HTTP/1.1\r\nHost: stream.edgeplane.app\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	up, err := http.ReadResponse(br, nil)
	if err != nil || up.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", up, err)
	}
	fmt.Fprintf(c, "ping\n")
	line, _ := br.ReadString('\n')
	if line != "echo ping\n" {
		t.Errorf("upgraded stream answered %q", line)
	}

	// Keep-alive: several requests on one public connection.
	hc := w.httpClient()
	for range 3 {
		if st, _, _ := get(t, hc, "http://stream.edgeplane.app/"); st != http.StatusPermanentRedirect {
			t.Errorf("plain HTTP to an https endpoint: %d", st)
		}
	}
	for range 3 {
		if st, body, _ := get(t, client, "https://stream.edgeplane.app/"); st != 200 || body != "HTTP/1.1" {
			t.Errorf("the upstream got %d %q, want HTTP/1.1 from the agent", st, body)
		}
	}

	st, body2, h := get(t, client, "https://stream.edgeplane.app/broken")
	if st != 502 || h.Get("ngrok-error-code") != "ERR_NGROK_8012" || !strings.Contains(body2, "ERR_NGROK_8012") {
		t.Errorf("a tunnel failing mid-request: %d %q %q", st, h.Get("ngrok-error-code"), body2)
	}
}

// TestTLSPassthrough: a tls endpoint receives the client's own TLS, untouched.
func TestTLSPassthrough(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.TLSEndpoint(config.WithDomain("tls.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen tls: %v", err)
	}
	// The agent side terminates TLS itself, with a certificate edgeplane never sees.
	cert := selfSigned(t, "tls.edgeplane.app")
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
				defer tc.Close()
				line, _ := bufio.NewReader(tc).ReadString('\n')
				_, _ = tc.Write([]byte("agent saw " + line))
			}()
		}
	}()
	c, err := tls.Dial("tcp", w.https, &tls.Config{ServerName: "tls.edgeplane.app", InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "passthrough-test" {
		t.Errorf("the client saw certificate %q, want the agent's own", got)
	}
	fmt.Fprintf(c, "hello\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	if line != "agent saw hello\n" {
		t.Errorf("passthrough answered %q", line)
	}
	// No endpoint for a name: the connection is closed.
	_, err = tls.Dial("tcp", w.https, &tls.Config{ServerName: "none.example.net", InsecureSkipVerify: true})
	if err == nil {
		t.Errorf("a TLS connection for an unknown name was accepted")
	}
	_ = net.ErrClosed
}
