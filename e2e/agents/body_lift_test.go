package agents

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// A module that reads the first part of a body under its own bound (the WAF's first 4 KiB, a
// JWT's first MiB) puts the body timeout back when it is done: a request it refuses, whose
// client then stops sending the rest, has its connection closed at the body timeout instead of
// held for ever by net/http's read of what is left; one it lets on keeps the body timeout too;
// and one whose body it read whole leaves no bound behind to cut a slow answer.

// liftUpstream is the upstream of A's binds with body-reading modules: it reads the body whole
// and answers what its read ended with.
var liftUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	fmt.Fprintf(w, "read %d %v", len(b), err)
})

// wantAnsweredThenClosed reads the answer on c: status with the error code, not sooner than the
// body timeout after the client's last byte (since), and then the connection closed.
func wantAnsweredThenClosed(t *testing.T, what string, c net.Conn, br *bufio.Reader, since time.Time, status int, code string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Errorf("%s: no answer: %v", what, err)
		return
	}
	took := time.Since(since)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status || resp.Header.Get("ngrok-error-code") != code {
		t.Errorf("%s: %d %s, want %d %s", what, resp.StatusCode, resp.Header.Get("ngrok-error-code"), status, code)
	}
	if took < bodyTimeout {
		t.Errorf("%s: answered %v after the client's last byte, before the %v body timeout", what, took, bodyTimeout)
	}
	if !resp.Close {
		t.Errorf("%s: the answer does not close the connection", what)
	}
	if !closedWithin(c, eventuallyFloor) {
		t.Errorf("%s: the connection stayed open after the answer", what)
	}
}

// TestPublicBodyTimeoutAfterModules: account A's binds inspect bodies, one with the WAF
// (process_body), one with jwt-validation taking its token from the body. A request each
// refuses after reading the body's first part (a SQL injection in the first 4 KiB; a body over
// the 1 MiB searched for a token), whose client then sends nothing more of its declared body,
// is answered (403 ERR_NGROK_3700, 401 ERR_NGROK_3406) and its connection closed, not sooner
// than the body timeout after its last byte. A clean request the WAF lets on whose rest stalls
// gets the proxy's 408 ERR_NGROK_3220. A clean body the WAF read whole, followed by an
// http-request action that takes three body timeouts, still reaches the upstream. Account B's requests are served
// while A's are held.
func TestPublicBodyTimeoutAfterModules(t *testing.T) {
	// The service an http-request action calls between the WAF and the upstream, answering
	// after three body timeouts.
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(3 * bodyTimeout)
		_, _ = io.WriteString(w, "ok")
	})}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = slow.Serve(sl) }()
	defer slow.Close()

	bw := newBodyWorld(t, bodyTimeout, "--outbound-allow-private") // the slow service is on this host
	const wafHost, jwtHost, slowHost = "lift-waf-a.edgeplane.app", "lift-jwt-a.edgeplane.app", "lift-slow-a.edgeplane.app"
	for host, policy := range map[string]string{
		wafHost: `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"process_body":true}}]}]}`,
		slowHost: `{"on_http_request":[{"actions":[{"type":"owasp-crs-request","config":{"process_body":true}},
		  {"type":"http-request","config":{"url":"http://` + sl.Addr().String() + `/","timeout":"20s","on_error":"halt"}}]}]}`,
		jwtHost: `{"on_http_request":[{"actions":[{"type":"jwt-validation","config":{
		  "issuer":{"allow_list":[{"value":"https://idp.example.com/"}]},"http":{"tokens":[{"type":"jwt","method":"body","name":"token"}]},
		  "jws":{"allowed_algorithms":["RS256"],"keys":{"sources":{"additional_jkus":["https://idp.example.com/jwks"]}}}}}]}]}`,
	} {
		_, token := bw.credential()
		tun, err := bw.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host),
			config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(policy)))
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		serveTunnel(t, tun, liftUpstream)
	}
	const browserHead = "User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: text/html\r\n"
	form := "Content-Type: application/x-www-form-urlencoded\r\n"
	// A form whose first 4 KiB (and 100 bytes more) are sent, 1000 declared bytes never.
	pad := func(prefix string, n int) string { return prefix + strings.Repeat("a", n-len(prefix)) }
	attack := pad("comment="+url.QueryEscape("1' OR '1'='1' UNION SELECT password FROM users--")+"&pad=", 4096+100)
	clean := pad("name=alice&pad=", 4096+100)
	overMiB := pad(`{"pad":"`, 1<<20+100)

	type stalled struct {
		what   string
		c      net.Conn
		br     *bufio.Reader
		since  time.Time
		status int
		code   string
	}
	var held []stalled
	for _, c := range []struct {
		what, host, head, first string
		status                  int
		code                    string
	}{
		{"the WAF's refusal", wafHost, browserHead + form, attack, 403, "ERR_NGROK_3700"},
		{"the JWT's refusal", jwtHost, "Content-Type: application/json\r\n", overMiB, 401, "ERR_NGROK_3406"},
		{"a request the WAF let on", wafHost, browserHead + form, clean, 408, "ERR_NGROK_3220"},
	} {
		head := fmt.Sprintf("POST /stalled HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n", c.host, c.head, len(c.first)+1000)
		// The last 200 bytes go apart, timed: they hold the byte that completes the module's
		// read, so the module's bound, and the body timeout put back after it, start after since.
		conn, br, _ := bw.send(t, head, c.first[:len(c.first)-200])
		since := time.Now()
		if _, err := io.WriteString(conn, c.first[len(c.first)-200:]); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		held = append(held, stalled{c.what, conn, br, since, c.status, c.code})
	}

	client := bw.httpClient()
	defer client.CloseIdleConnections()
	for i := range 3 {
		resp, err := client.Post("http://"+bw.hostB+fmt.Sprintf("/post%d", i), "text/plain", strings.NewReader("b's body"))
		if err != nil {
			t.Fatalf("B's POST: %v", err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != "B 8" {
			t.Errorf("B's POST %d: %d %q, want 200 \"B 8\"", i, resp.StatusCode, got)
		}
	}

	for _, h := range held {
		wantAnsweredThenClosed(t, h.what, h.c, h.br, h.since, h.status, h.code)
	}

	// A body the WAF read to its end leaves no deadline behind: net/http's watch for a client
	// that leaves (its read of the idle connection, from the body's end on) must not end the
	// request while a later action takes longer than the body timeout.
	req, _ := http.NewRequest("POST", "http://"+slowHost+"/", strings.NewReader("name=alice"))
	for k, v := range browser {
		req.Header.Set(k, *v)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("after a slow action: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != "read 10 <nil>" {
		t.Errorf("after a slow action: %d %s %q, want 200 \"read 10 <nil>\"", resp.StatusCode, resp.Header.Get("ngrok-error-code"), got)
	}
}
