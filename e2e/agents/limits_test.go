package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// Connection limits of the agent and public listeners. Every client of a test is 127.0.0.1, so
// the tests set the per-address limits low.

// TestAgentListenerUnauthenticatedLimit: with --agent-max-unauthenticated-per-ip 3, three
// connections that never authenticate are held and a fourth is closed at once; an agent that
// authenticates no longer counts, so room opens for another unauthenticated one.
func TestAgentListenerUnauthenticatedLimit(t *testing.T) {
	w := start(t, "--agent-max-unauthenticated-per-ip", "3")
	_, token := w.credential()
	dialRaw := func() (*tls.Conn, bool) {
		c, err := tls.Dial("tcp", w.agent, &tls.Config{RootCAs: w.ca, ServerName: "localhost"})
		if err != nil {
			return nil, false
		}
		t.Cleanup(func() { c.Close() })
		return c, !closedWithin(c, 500*time.Millisecond)
	}
	var held []*tls.Conn
	refused := 0
	for range 4 {
		if c, ok := dialRaw(); ok {
			held = append(held, c)
		} else {
			refused++
		}
	}
	if len(held) != 3 || refused != 1 {
		t.Fatalf("4 unauthenticated connections with a limit of 3: %d held, %d refused", len(held), refused)
	}
	held[0].Close()
	// The server notices the close when it reads the EOF; an agent then connects.
	var connected bool
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sess, err := w.connect(ctx, token)
		if err == nil {
			t.Cleanup(func() { sess.Close(); cancel() })
			connected = true
			break
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	if !connected {
		t.Fatal("an agent could not connect after an unauthenticated connection closed")
	}
	// Two unauthenticated connections and one authenticated agent: one more fits (once the
	// SDK's own attempts, refused above, are gone), then none.
	room := false
	for range 50 {
		if _, room = dialRaw(); room {
			break
		}
	}
	if !room {
		t.Errorf("refused although the authenticated agent does not count")
	}
	if _, ok := dialRaw(); ok {
		t.Errorf("a fourth unauthenticated connection was held beyond the limit of 3")
	}
}

// TestAgentStreamFloods: a session that opens streams far past the limit of requests in
// progress (16) gets the rest closed at once, whatever their number, while other agents' traffic
// is served; a connection that opens many streams without authenticating gets no answer on any
// and is closed.
func TestAgentStreamFloods(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	other := w.mustConnect(token)
	tun, err := other.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("bystander.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))

	t.Run("authenticated, 2000 streams never written to", func(t *testing.T) {
		sess, _ := w.rawSession(t)
		var resp struct{ Error, ClientId string }
		auth := map[string]any{"Version": []string{"3"}, "Extra": map[string]any{"Authtoken": token}}
		if err := rpc(sess, 0, auth, &resp); err != nil || resp.Error != "" {
			t.Fatalf("auth: %v %+v", err, resp)
		}
		const n = 2000
		var mu sync.Mutex
		pending, closed, failed := 0, 0, 0
		var wg sync.WaitGroup
		for range n {
			st, err := sess.OpenTypedStream(1) // Bind, whose body never comes
			if err != nil {
				failed++
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				_ = st.SetReadDeadline(time.Now().Add(3 * time.Second))
				_, err := st.Read(make([]byte, 1))
				var ne net.Error
				mu.Lock()
				defer mu.Unlock()
				if errors.As(err, &ne) && ne.Timeout() {
					pending++
				} else {
					closed++
				}
			}()
		}
		wg.Wait()
		t.Logf("%d streams: %d in progress, %d closed by the server, %d not opened", n, pending, closed, failed)
		if pending > 16 {
			t.Errorf("%d streams were held in progress, beyond the limit of 16", pending)
		}
		if pending+closed+failed != n || closed < n-16-failed {
			t.Errorf("of %d streams: %d pending, %d closed, %d failed", n, pending, closed, failed)
		}
		if st, body, _ := get(t, w.httpsClient(), "https://bystander.edgeplane.app/"); st != 200 || body != "ok" {
			t.Errorf("another agent's endpoint during the flood: %d %q", st, body)
		}
	})

	t.Run("unauthenticated, 500 streams", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for the 10 s authentication deadline")
		}
		sess, c := w.rawSession(t)
		answered := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 500 {
			st, err := sess.OpenTypedStream(0) // Auth, every one of them
			if err != nil {
				break
			}
			if i == 0 {
				_, _ = st.Write([]byte(`{"Version":`)) // the first never completes
				continue
			}
			_, _ = st.Write([]byte(`{"Version":["3"],"Extra":{"Authtoken":"x"}}`))
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = st.SetReadDeadline(time.Now().Add(13 * time.Second))
				if n, _ := st.Read(make([]byte, 1)); n > 0 {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			}()
		}
		if !closedWithin(c, 13*time.Second) {
			t.Errorf("the connection stayed open past the authentication deadline")
		}
		wg.Wait()
		// A connection gets one Auth answered at most: the first Auth stream edgeplane accepts
		// (streams need not be accepted in the order they were opened, so that may be a
		// complete one, refused, which ends the session) and never another.
		if answered > 1 {
			t.Errorf("%d Auth streams of one connection were answered, want at most one", answered)
		}
		if st, _, _ := get(t, w.httpsClient(), "https://bystander.edgeplane.app/"); st != 200 {
			t.Errorf("another agent's endpoint after the flood: %d", st)
		}
	})
}

// trickle writes line every 500 ms to c until a write fails or stop closes.
func trickle(c net.Conn, line string, stop <-chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	}
}

// TestPublicSlowloris: clients of the public HTTP and TLS listeners that never finish their
// request header (or their ClientHello) are closed at the 10 s header (or hello) timeout, and
// other clients are served meanwhile.
func TestPublicSlowloris(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 10 s header timeout")
	}
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("slow.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	stop := make(chan struct{})
	defer close(stop)
	slow := map[string][]net.Conn{}
	head := "GET / HTTP/1.1\r\nHost: slow.edgeplane.app\r\n"
	for range 5 {
		c, err := net.Dial("tcp", w.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, head)
		go trickle(c, "X-Slow: 1\r\n", stop)
		slow["http headers"] = append(slow["http headers"], c)
	}
	for range 3 {
		raw, err := net.Dial("tcp", w.https)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		c := tls.Client(raw, &tls.Config{RootCAs: w.ca, ServerName: "slow.edgeplane.app", NextProtos: []string{"http/1.1"}})
		if err := c.Handshake(); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		_, _ = io.WriteString(c, head)
		go trickle(c, "X-Slow: 1\r\n", stop)
		slow["https headers"] = append(slow["https headers"], raw)
	}
	for range 2 {
		c, err := net.Dial("tcp", w.https)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}) // a record header of a ClientHello never sent
		slow["client hello"] = append(slow["client hello"], c)
	}
	served := 0
	for range 3 {
		// Plain HTTP answers an https endpoint with its redirect.
		if st, _, _ := get(t, w.httpClient(), "http://slow.edgeplane.app/"); st == http.StatusPermanentRedirect {
			served++
		}
		if st, body, _ := get(t, w.httpsClient(), "https://slow.edgeplane.app/"); st == 200 && body == "ok" {
			served++
		}
		time.Sleep(time.Second)
	}
	if served != 6 {
		t.Errorf("%d of 6 requests beside the slow clients were served", served)
	}
	for kind, conns := range slow {
		closed := 0
		for _, c := range conns {
			if closedWithin(c, 12*time.Second) {
				closed++
			}
		}
		if closed != len(conns) {
			t.Errorf("%s: %d of %d slow connections closed by the server", kind, closed, len(conns))
		}
	}
}

// TestPublicPerIPLimit: with --public-max-connections-per-ip 4, the HTTP and TLS listeners share
// the count: two HTTP and two TLS keep-alive connections are served, a fifth connection on
// either is closed unanswered. (Plain HTTP answers the https endpoint with its redirect.)
func TestPublicPerIPLimit(t *testing.T) {
	w := start(t, "--public-max-connections-per-ip", "4")
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("capped.edgeplane.app")))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	request := func(secure bool) bool {
		var c net.Conn
		var err error
		if secure {
			c, err = tls.Dial("tcp", w.https, &tls.Config{RootCAs: w.ca, ServerName: "capped.edgeplane.app", NextProtos: []string{"http/1.1"}})
		} else {
			c, err = net.Dial("tcp", w.http)
		}
		if err != nil {
			return false
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: capped.edgeplane.app\r\n\r\n"); err != nil {
			return false
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200 || !secure && res.StatusCode == http.StatusPermanentRedirect
	}
	served := 0
	for _, secure := range []bool{false, true, false, true} {
		if request(secure) {
			served++
		}
	}
	if served != 4 {
		t.Fatalf("%d of 4 connections within the limit were served", served)
	}
	if request(false) {
		t.Errorf("a fifth connection (HTTP) was served beyond the limit of 4")
	}
	if request(true) {
		t.Errorf("a fifth connection (TLS) was served beyond the limit of 4")
	}
}
