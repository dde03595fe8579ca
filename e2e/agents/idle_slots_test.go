package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// Idle keep-alive connections of the public listeners: they must not keep
// new clients out, whether the slots are taken by a few or by thousands of them.

// publicKeepAlive opens a keep-alive connection to the public HTTP listener (or the TLS one),
// sends one request for host and reads its answer, leaving the connection open. It returns the
// TCP connection (nil when none was made) and the status (0 without an answer).
func publicKeepAlive(t *testing.T, w *world, host string, secure bool) (net.Conn, int) {
	t.Helper()
	addr := w.http
	if secure {
		addr = w.https
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, 0
	}
	t.Cleanup(func() { raw.Close() })
	c := raw
	if secure {
		c = tls.Client(raw, &tls.Config{RootCAs: w.ca, ServerName: host, NextProtos: []string{"http/1.1"}})
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		return raw, 0
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return raw, 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return raw, res.StatusCode
}

// served is whether a status is the endpoint's answer: 200 from the agent over HTTPS, or the
// redirect to HTTPS that plain HTTP gets for an https endpoint.
func served(status int, secure bool) bool {
	return status == 200 || !secure && status == http.StatusPermanentRedirect
}

// idleWorld starts a server with the extra flags and an agent serving "ok" on host.
func idleWorld(t *testing.T, host string, args ...string) *world {
	t.Helper()
	w := start(t, args...)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	return w
}

// TestPublicIdleConnectionsGiveWayToNewClients: with --public-max-connections 12 and an idle
// timeout far longer than the test, 12 keep-alive connections (HTTP and HTTPS, one request
// each) take every slot. Twelve new clients are each answered, and the connections closed to
// make room for them are the 12 idle ones.
func TestPublicIdleConnectionsGiveWayToNewClients(t *testing.T) {
	const slots = 12
	const host = "idle.edgeplane.app"
	w := idleWorld(t, host, "--public-max-connections", strconv.Itoa(slots),
		"--public-max-connections-per-ip", "0", "--public-idle-timeout", "10m")
	var idle []net.Conn
	for i := range slots {
		secure := i%2 == 1
		c, status := publicKeepAlive(t, w, host, secure)
		if !served(status, secure) {
			t.Fatalf("idle connection %d (https %v): status %d", i, secure, status)
		}
		idle = append(idle, c)
	}
	answered := map[bool]int{}
	for i := range slots {
		secure := i%2 == 0
		if _, status := publicKeepAlive(t, w, host, secure); served(status, secure) {
			answered[secure]++
		}
	}
	if answered[false] != slots/2 || answered[true] != slots/2 {
		t.Errorf("new clients answered beside %d idle connections: %d of %d over HTTP, %d of %d over HTTPS",
			slots, answered[false], slots/2, answered[true], slots/2)
	}
	closed := 0
	for _, c := range idle {
		if closedWithin(c, 20*time.Second) {
			closed++
		}
	}
	if closed != slots {
		t.Errorf("%d of the %d idle connections were closed to make room for the new clients", closed, slots)
	}
}

// TestPublicIdleTimeout: a public keep-alive connection is closed once it has waited
// --public-idle-timeout for its next request, over HTTP and over HTTPS.
func TestPublicIdleTimeout(t *testing.T) {
	const host = "brief.edgeplane.app"
	w := idleWorld(t, host, "--public-idle-timeout", "500ms")
	for _, secure := range []bool{false, true} {
		c, status := publicKeepAlive(t, w, host, secure)
		if !served(status, secure) {
			t.Fatalf("https %v: status %d", secure, status)
		}
		if !closedWithin(c, 20*time.Second) {
			t.Errorf("https %v: the idle connection was still open after 20 s", secure)
		}
	}
}
