package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"golang.ngrok.com/ngrok/config"
)

// Isolation between accounts on the public listeners: one account's agent or clients must not
// take the connection slots another account's clients need, nor keep them.

// silentAgent is a TCP endpoint on a reserved address of an account whose agent accepts every
// public connection, reads what comes, and never answers nor closes.
type silentAgent struct {
	addr     string
	accepted atomic.Int32 // connections the agent accepted
	ended    atomic.Int32 // of them, those the server ended (the agent read their end)
}

func newSilentAgent(t *testing.T, w *world) *silentAgent {
	t.Helper()
	var ra struct{ ID, Addr string }
	if st := w.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
		t.Fatalf("reserve an address: %d", st)
	}
	_, token := w.credential()
	tun, err := w.mustConnect(token).Listen(context.Background(), config.TCPEndpoint(config.WithRemoteAddr(ra.Addr)))
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	a := &silentAgent{addr: strings.TrimPrefix(tun.URL(), "tcp://")}
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			go func() {
				_, _ = io.Copy(io.Discard, c)
				a.ended.Add(1)
			}()
		}
	}()
	return a
}

// flood opens n client connections to addr, sending nothing; closed counts those the server
// has closed (their read ended).
type flood struct {
	conns  []net.Conn
	closed atomic.Int32
}

func newFlood(t *testing.T, addr string, n int) *flood {
	t.Helper()
	f := &flood{}
	for range n {
		f.add(t, addr)
	}
	return f
}

func (f *flood) add(t *testing.T, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	f.conns = append(f.conns, c)
	go func() {
		_, _ = io.Copy(io.Discard, c)
		f.closed.Add(1)
	}()
}

// servedFresh makes up to n requests to url, each on a new connection, and returns how many
// were answered 200 "ok" before the first that was not.
func servedFresh(t *testing.T, w *world, url string, n int) int {
	t.Helper()
	c := w.httpsClient()
	c.Transport.(*http.Transport).DisableKeepAlives = true
	for i := range n {
		resp, err := c.Get(url)
		if err != nil {
			t.Logf("GET %s: %v", url, err)
			return i
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Logf("GET %s: %d %q", url, resp.StatusCode, body)
			return i
		}
	}
	return n
}

// okEndpoint binds an https endpoint for host with a new credential of w's account, answering
// "ok".
func okEndpoint(t *testing.T, w *world, host string) {
	t.Helper()
	_, token := w.credential()
	tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host)))
	if err != nil {
		t.Fatalf("listen %s: %v", host, err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
}

// TestTCPFloodLeavesOtherAccountsServed: with --public-max-connections 120, account B's agent
// accepts connections on its TCP address and never answers, and 125 clients connect to it. B
// holds its share (half the slots, the default of --public-max-connections-per-account), the
// server closes B's other clients at once, and account A's HTTPS requests, each on a new
// connection, are all served meanwhile. Once B's clients close, their slots come back at once:
// B is admitted again for as many, although its agent still answers none of the old ones, and A
// is still served.
func TestTCPFloodLeavesOtherAccountsServed(t *testing.T) {
	const slots, share, clients = 120, 60, 125
	w := start(t, "--public-max-connections", "120", "--public-max-connections-per-ip", "0",
		"--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "21000-21499")
	okEndpoint(t, w, "served-a.edgeplane.app")
	b := newSilentAgent(t, w.asAccount("flooder"))

	f := newFlood(t, b.addr, clients)
	eventually(t, 5*time.Second, "B's agent to accept its share", func() bool { return b.accepted.Load() >= share })
	if n := servedFresh(t, w, "https://served-a.edgeplane.app/", 20); n != 20 {
		t.Errorf("A: %d of 20 requests served while B's %d clients held their connections", n, clients)
	}
	eventually(t, 5*time.Second, "the server to close B's clients beyond its share", func() bool {
		return f.closed.Load() >= clients-share
	})
	if got, closed := b.accepted.Load(), f.closed.Load(); got != share || closed != clients-share {
		t.Errorf("B's agent accepted %d connections (want its share, %d); %d of B's clients were closed (want %d)",
			got, share, closed, clients-share)
	}

	// B's clients close (a FIN, which the server passes to the agent); the agent still answers
	// none of them. Their slots come back: B gets its share again.
	for _, c := range f.conns {
		c.Close()
	}
	again := &flood{}
	eventually(t, 5*time.Second, "B's new clients to be admitted in the slots of the closed ones", func() bool {
		if b.accepted.Load() < 2*share {
			again.add(t, b.addr)
		}
		return b.accepted.Load() >= 2*share
	})
	if n := servedFresh(t, w, "https://served-a.edgeplane.app/", 20); n != 20 {
		t.Errorf("A: %d of 20 requests served beside B's new clients", n)
	}
	if got := b.accepted.Load(); got != 2*share {
		t.Errorf("B's agent accepted %d connections in all, want %d", got, 2*share)
	}
}

// TestTCPIdleTimeout: a TCP endpoint's connection on which no byte moves either way for
// --public-tcp-idle-timeout is closed, on the client's side and the agent's.
func TestTCPIdleTimeout(t *testing.T) {
	w := start(t, "--public-tcp-idle-timeout", "500ms", "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "21500-21999")
	a := newSilentAgent(t, w)
	c, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c, eventuallyFloor) {
		t.Fatal("the quiet connection was still open")
	}
	eventually(t, time.Second, "the agent's side of the quiet connection to end", func() bool { return a.ended.Load() == 1 })
}

// http1Client is a public client of the TLS listener that opens one HTTP/1.1 connection per
// request in progress (no HTTP/2, whose streams would share one).
func http1Client(w *world) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, w.https)
		},
		TLSClientConfig: &tls.Config{RootCAs: w.ca},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
}

// TestAccountShareOfPublicConnections: with --public-max-connections-per-account 3, account B
// has three requests in progress on its HTTPS endpoint (its agent holds them): a fourth
// request is answered 429 ERR_NGROK_714, and a connection to B's TLS endpoint is closed after
// its ClientHello, while A's requests are served. Once B's requests finish, B is served again.
func TestAccountShareOfPublicConnections(t *testing.T) {
	w := start(t, "--public-max-connections-per-account", "3")
	okEndpoint(t, w, "share-a.edgeplane.app")
	b := w.asAccount("busy")
	_, token := b.credential()
	sess := b.mustConnect(token)
	slow, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("share-b.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	serveTunnel(t, slow, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	passthrough, err := sess.Listen(context.Background(), config.TLSEndpoint(config.WithDomain("share-b-tls.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen tls: %v", err)
	}
	defer passthrough.Close()

	client := http1Client(w)
	var wg sync.WaitGroup
	held := make([]int, 3)
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := client.Get("https://share-b.edgeplane.app/hold"); err == nil {
				held[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	for range held {
		select {
		case <-arrived:
		case <-time.After(eventuallyFloor):
			t.Fatal("B's requests did not reach its agent")
		}
	}
	resp, err := client.Get("https://share-b.edgeplane.app/")
	if err != nil {
		t.Fatalf("B's fourth request: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_714" {
		t.Errorf("B's fourth request beside three in progress: %d %q, want 429 ERR_NGROK_714", resp.StatusCode, resp.Header.Get("ngrok-error-code"))
	}
	raw, err := net.Dial("tcp", w.https)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(eventuallyFloor))
	if _, err := tlsHello(raw, "share-b-tls.edgeplane.app").Read(make([]byte, 1)); err == nil {
		t.Error("B's TLS endpoint got a connection beyond the account's share")
	}
	if n := servedFresh(t, w, "https://share-a.edgeplane.app/", 5); n != 5 {
		t.Errorf("A: %d of 5 requests served while B held its share", n)
	}
	close(release)
	wg.Wait()
	if held[0] != 200 || held[1] != 200 || held[2] != 200 {
		t.Errorf("B's requests in progress ended %v, want 200 each", held)
	}
	if st, body, _ := get(t, client, "https://share-b.edgeplane.app/"); st != 200 || body != "ok" {
		t.Errorf("B once its requests finished: %d %q", st, body)
	}
}

// tlsHello sends a ClientHello for name on c and returns c, from which the server's answer (or
// its closing the connection) can then be read.
func tlsHello(c net.Conn, name string) net.Conn {
	_ = tls.Client(helloOnly{c}, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	return c
}

// helloOnly lets a TLS client write its ClientHello and then stop, reading nothing.
type helloOnly struct{ net.Conn }

func (helloOnly) Read([]byte) (int, error) { return 0, errors.New("the ClientHello is sent") }

// TestPublicHeaderTimeout: --public-header-timeout bounds how long a public client may take
// before its request head (HTTP) or its ClientHello (TLS): under a short one, silent clients
// are closed; under a long one, clients that start after the former fixed 10 s are served.
func TestPublicHeaderTimeout(t *testing.T) {
	t.Run("short", func(t *testing.T) {
		w := start(t, "--public-header-timeout", "300ms")
		for _, addr := range []string{w.http, w.https} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !closedWithin(c, eventuallyFloor) {
				t.Errorf("a silent client of %s was not closed", addr)
			}
		}
	})
	t.Run("long", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits 11 s, past the former fixed header timeout")
		}
		const host = "patient.edgeplane.app"
		w := start(t, "--public-header-timeout", "1m")
		okEndpoint(t, w, host)
		var wg sync.WaitGroup
		for _, secure := range []bool{false, true} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				addr := map[bool]string{false: w.http, true: w.https}[secure]
				raw, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer raw.Close()
				time.Sleep(11 * time.Second) // the client is slow to start: longer than 10 s
				var c net.Conn = raw
				if secure {
					c = tls.Client(raw, &tls.Config{RootCAs: w.ca, ServerName: host, NextProtos: []string{"http/1.1"}})
				}
				_ = c.SetDeadline(time.Now().Add(eventuallyFloor))
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
					t.Errorf("https %v: writing after 11 s: %v", secure, err)
					return
				}
				res, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Errorf("https %v: no answer to a request sent after 11 s: %v", secure, err)
					return
				}
				res.Body.Close()
				if !served(res.StatusCode, secure) {
					t.Errorf("https %v: status %d", secure, res.StatusCode)
				}
			}()
		}
		wg.Wait()
	})
}
