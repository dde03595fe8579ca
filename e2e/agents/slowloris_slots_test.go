package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// Clients that never finish their first request:
// at a listener's connection limit, a newcomer takes the slot of the connection unproductive
// longest, so slowloris clients cannot keep others out, while a request in progress and an
// authenticated agent keep theirs. The header and ClientHello timeouts (10 s) would free the
// slots too, later: the tests count the evictions serve logs, which only eviction makes.

// evictionsLogged waits until serve has logged want pending connections closed to admit a new
// client on listener (the log is written in the background), and returns how many it logged.
func evictionsLogged(w *world, listener string, want int) int {
	count := func() int {
		n := 0
		for _, line := range strings.Split(w.proc.Stderr.String(), "\n") {
			if strings.Contains(line, `msg="connection closed to admit a new client"`) &&
				strings.Contains(line, "listener="+listener+" ") && strings.Contains(line, "pending=true") {
				n++
			}
		}
		return n
	}
	for end := time.Now().Add(20 * time.Second); count() < want && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	return count()
}

// TestPublicSlowlorisGivesWay: with --public-max-connections 4, one slot holds an upload in
// progress and three hold clients that never finish their request head (HTTP) or their
// ClientHello or request head (HTTPS). Three new clients are each answered 200, by closing the
// three slow connections; the upload, the oldest connection, completes with 200.
func TestPublicSlowlorisGivesWay(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[secure]
		t.Run(name, func(t *testing.T) {
			host := name + "-slow.edgeplane.app"
			w := start(t, "--public-max-connections", "4", "--public-max-connections-per-ip", "0",
				"--public-idle-timeout", "10m")
			_, token := w.credential()
			sess := w.mustConnect(token)
			opts := []config.HTTPEndpointOption{config.WithDomain(host)}
			if !secure {
				opts = append(opts, config.WithScheme(config.SchemeHTTP))
			}
			tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(opts...))
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			uploading := make(chan struct{}, 1)
			serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/upload" {
					b := make([]byte, 1)
					if _, err := io.ReadFull(r.Body, b); err == nil {
						uploading <- struct{}{}
					}
					_, _ = io.Copy(io.Discard, r.Body)
				}
				_, _ = io.WriteString(w, "ok")
			}))
			public := func() (net.Conn, net.Conn) { // the connection to write to, and the TCP one
				addr := w.http
				if secure {
					addr = w.https
				}
				raw, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { raw.Close() })
				if !secure {
					return raw, raw
				}
				c := tls.Client(raw, &tls.Config{RootCAs: w.ca, ServerName: host, NextProtos: []string{"http/1.1"}})
				if err := c.Handshake(); err != nil {
					t.Fatalf("handshake: %v", err)
				}
				return c, raw
			}
			up, _ := public()
			if _, err := io.WriteString(up, "POST /upload HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 10\r\n\r\nhalf"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-uploading: // the agent has the first bytes: the request is in progress
			case <-time.After(20 * time.Second):
				t.Fatal("the upload did not reach the agent")
			}
			stop := make(chan struct{})
			defer close(stop)
			// Three slow clients, accepted in order (the last one's handshake shows it).
			if secure {
				silent, err := net.Dial("tcp", w.https)
				if err != nil {
					t.Fatal(err)
				}
				defer silent.Close()
				partial, err := net.Dial("tcp", w.https)
				if err != nil {
					t.Fatal(err)
				}
				defer partial.Close()
				_, _ = partial.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}) // a ClientHello's record header only
			} else {
				for _, first := range []string{"", "GET / HT"} {
					c, _ := public()
					_, _ = io.WriteString(c, first)
				}
			}
			trickler, _ := public()
			_, _ = io.WriteString(trickler, "GET / HTTP/1.1\r\nHost: "+host+"\r\n")
			go trickle(trickler, "X-Slow: 1\r\n", stop)

			answered := 0
			for range 3 {
				if _, status := publicKeepAlive(t, w, host, secure); status == 200 {
					answered++
				}
			}
			if _, err := io.WriteString(up, "-done!"); err != nil {
				t.Fatalf("finishing the upload: %v", err)
			}
			_ = up.SetReadDeadline(time.Now().Add(20 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(up), nil)
			if err != nil {
				t.Fatalf("the upload in progress was cut off: %v", err)
			}
			res.Body.Close()
			if n := evictionsLogged(w, "public", 3); answered != 3 || n != 3 || res.StatusCode != 200 {
				t.Errorf("%d of 3 newcomers answered 200, %d slow connections closed for them (want 3), upload %d",
					answered, n, res.StatusCode)
			}
		})
	}
}

// TestAgentSlowlorisGivesWay: with --agent-max-connections 4, one slot holds an authenticated
// agent and three hold connections that never authenticate (one silent in its TLS handshake,
// one after its handshake, one with a muxado session but no Auth). Three new agents each
// complete Auth by closing the three; the authenticated agent keeps serving its endpoint.
func TestAgentSlowlorisGivesWay(t *testing.T) {
	w := start(t, "--agent-max-connections", "4", "--agent-max-unauthenticated-per-ip", "0")
	_, token := w.credential()
	sess := w.mustConnect(token)
	const host = "kept.edgeplane.app"
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	silent, err := net.Dial("tcp", w.agent)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	handshaken, err := tls.Dial("tcp", w.agent, &tls.Config{RootCAs: w.ca, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer handshaken.Close()
	w.rawSession(t) // TLS and muxado, never an Auth
	authed := 0
	for i := range 3 {
		newcomer, _ := w.rawSession(t)
		var resp struct{ Error, ClientId string }
		auth := map[string]any{"Version": []string{"3"}, "Extra": map[string]any{"Authtoken": token}}
		if err := rpc(newcomer, 0, auth, &resp); err != nil || resp.Error != "" {
			t.Errorf("newcomer %d: auth %v %+v", i, err, resp)
			continue
		}
		authed++
	}
	n := evictionsLogged(w, "agent", 3)
	st, body, _ := get(t, w.httpsClient(), "https://"+host+"/")
	if authed != 3 || n != 3 || st != 200 || body != "ok" {
		t.Errorf("%d of 3 newcomers authenticated, %d unauthenticated connections closed for them (want 3); "+
			"the authenticated agent's endpoint answered %d %q", authed, n, st, body)
	}
}
