package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSlowClientsAreCutOff opens raw TCP connections to a running server that never finish their
// request header: one sends nothing, one half a request line, one trickles header lines forever
// (each byte arriving in time, the header never complete). The server closes every one of them
// within readHeaderTimeout (plus a margin), and meanwhile answers other clients at once.
//
// It takes readHeaderTimeout (10 s), the default, of wall time, spent in parallel with the other
// tests. The other timeouts are tested with shorter values set by their flags (below).
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	p, token := serverToken(t)
	const margin = 4 * time.Second
	start := time.Now()
	type slow struct {
		name    string
		first   string // sent at once
		trickle string // then sent every 500 ms until the connection breaks
	}
	clients := []slow{
		{name: "silent"},
		{name: "half a request line", first: "GET /ip_policies HT"},
		{name: "trickling headers", first: "GET /ip_policies HTTP/1.1\r\nHost: x\r\nNgrok-Version: 2\r\n", trickle: "X-Slow: 1\r\n"},
	}
	var wg sync.WaitGroup
	closed := make([]time.Duration, len(clients))
	for i, c := range clients {
		conn := dial(t, p.Addr)
		if c.first != "" {
			if _, err := io.WriteString(conn, c.first); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(2)
		done := make(chan struct{})
		go func() { // read until the server closes the connection
			defer wg.Done()
			defer close(done)
			_ = conn.SetReadDeadline(start.Add(readHeaderTimeout + margin))
			_, _ = io.Copy(io.Discard, conn)
			closed[i] = time.Since(start)
		}()
		go func() {
			defer wg.Done()
			if c.trickle == "" {
				return
			}
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, c.trickle); err != nil {
						return
					}
				}
			}
		}()
	}
	// Other clients are served while the slow ones hang on, not after them: well within the
	// header timeout the slow ones are held for (a tighter bound would time the machine's load,
	// which runs every package's tests at once, not the server).
	for range 3 {
		t0 := time.Now()
		if status, body := call(t, "GET", p.url("/ip_policies"), token, ""); status != 200 {
			t.Fatalf("GET /ip_policies beside slow clients: %d %s", status, body)
		}
		if d := time.Since(t0); d > readHeaderTimeout/2 {
			t.Errorf("a request beside slow clients took %v", d)
		}
		time.Sleep(2 * time.Second)
	}
	wg.Wait()
	for i, c := range clients {
		if closed[i] >= readHeaderTimeout+margin {
			t.Errorf("%s: the server kept the connection open for %v, beyond the %v header timeout", c.name, closed[i].Round(time.Millisecond), readHeaderTimeout)
		} else {
			t.Logf("%s: closed by the server after %v", c.name, closed[i].Round(time.Millisecond))
		}
	}
}

// TestIdleAndReadTimeouts runs a server with short --idle-timeout and --read-timeout (the
// environment sets one, a flag the other) and checks what each does to a raw connection:
//   - a keep-alive connection that sent one request and then nothing is closed by the server after
//     the idle timeout, not before;
//   - a request whose body trickles in slower than the read timeout allows is cut off: it is
//     answered 400 ERR_NGROK_213 and the connection closed within the timeout (plus a margin),
//     and nothing of the request is stored (the list stays empty).
func TestIdleAndReadTimeouts(t *testing.T) {
	t.Parallel()
	const (
		idle   = 1500 * time.Millisecond
		read   = 2 * time.Second
		margin = 2 * time.Second
	)
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServe(t, "", []string{"EDGEPLANE_IDLE_TIMEOUT=" + idle.String()},
		"--db", db, "--listen", "127.0.0.1:0", "--read-timeout", read.String())
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}

	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		conn := dial(t, p.Addr)
		if _, err := io.WriteString(conn, rawRequest(token, "GET", "/ip_policies", "")); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("GET /ip_policies: %d", res.StatusCode)
		}
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(idle + margin))
		n, err := br.Read(make([]byte, 1))
		waited := time.Since(start)
		if n != 0 || err != io.EOF {
			t.Fatalf("after %v idle: read %d bytes, error %v; want the server to close the connection (EOF)", waited, n, err)
		}
		if waited < idle-200*time.Millisecond {
			t.Fatalf("the server closed the idle connection after %v, before the %v idle timeout", waited, idle)
		}
		t.Logf("idle connection closed after %v", waited.Round(time.Millisecond))
	})

	t.Run("slow body", func(t *testing.T) {
		t.Parallel()
		conn := dial(t, p.Addr)
		body := `{"description":"slow","action":"allow"}`
		full := rawRequest(token, "POST", "/ip_policies", body)
		head := full[:len(full)-len(body)]
		start := time.Now()
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		closed := make(chan time.Duration, 1)
		var answer strings.Builder
		go func() {
			_ = conn.SetReadDeadline(start.Add(read + margin))
			_, _ = io.Copy(&answer, conn)
			closed <- time.Since(start)
		}()
		// One byte every 400 ms: the body would take 16 s.
		tick := time.NewTicker(400 * time.Millisecond)
		defer tick.Stop()
		var took time.Duration
	trickle:
		for i := 0; ; i++ {
			select {
			case took = <-closed:
				break trickle
			case <-tick.C:
				if i < len(body)-1 { // never the last byte
					_, _ = io.WriteString(conn, body[i:i+1])
				}
			}
		}
		if took >= read+margin {
			t.Fatalf("the server kept reading a trickling body for %v, beyond the %v read timeout", took, read)
		}
		if took < read-200*time.Millisecond {
			t.Fatalf("the connection was closed after %v, before the %v read timeout", took, read)
		}
		t.Logf("trickling body cut off after %v", took.Round(time.Millisecond))
		if a := answer.String(); !strings.HasPrefix(a, "HTTP/1.1 400 ") || !strings.Contains(a, `"error_code":"ERR_NGROK_213"`) {
			t.Fatalf("the cut-off request was answered %q, want 400 ERR_NGROK_213", a)
		}
		if status, got := call(t, "GET", p.url("/ip_policies"), token, ""); status != 200 || strings.Contains(string(got), "slow") {
			t.Fatalf("after the cut-off request: %d %s", status, got)
		}
	})
}

// TestInvalidTimeoutsAreRejected: a timeout that is not a positive duration stops serve before
// it listens, with a message naming the flag and the value.
func TestInvalidTimeoutsAreRejected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env, args []string
		want      string
	}{
		{nil, []string{"--idle-timeout", "soon"}, `--idle-timeout must be a positive duration like 2m0s, got "soon"`},
		{nil, []string{"--read-timeout", "0s"}, `--read-timeout must be a positive duration like 1m0s, got "0s"`},
		{nil, []string{"--write-timeout", "-5s"}, `--write-timeout must be a positive duration like 1m0s, got "-5s"`},
		{[]string{"EDGEPLANE_READ_HEADER_TIMEOUT=10"}, nil, `--read-header-timeout must be a positive duration like 10s, got "10"`},
	} {
		t.Run(c.want, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "edgeplane.db")
			args := append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, c.args...)
			_, stderr, code := runBin(t, c.env, args...)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want a failure saying %q", code, stderr, c.want)
			}
			if strings.Contains(stderr, "edgeplane listening") {
				t.Fatalf("serve listened despite the invalid timeout:\n%s", stderr)
			}
		})
	}
}

// TestWriteTimeout runs a server with a short --write-timeout and sends a create whose body
// arrives after it (well within the read timeout). Its answer could not be sent any more, so the
// server must not act on it either: the connection closes without an answer, the request log
// shows it answered 503, and nothing is stored. The same create sent promptly is stored (201).
// Without the request deadline following the write timeout, the late create was stored and its
// client never told.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const (
		write  = 2 * time.Second         // so requests get a 1.8 s deadline
		late   = 3500 * time.Millisecond // when the body's last byte is sent: 1.7 s after that deadline
		margin = 2 * time.Second
	)
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServe(t, "", nil, "--db", db, "--listen", "127.0.0.1:0", "--write-timeout", write.String())
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	if status, body := call(t, "POST", p.url("/ip_policies"), token, `{"description":"prompt"}`); status != 201 {
		t.Fatalf("a prompt create: %d %s", status, body)
	}

	conn := dial(t, p.Addr)
	full := rawRequest(token, "POST", "/ip_policies", `{"description":"late"}`)
	start := time.Now()
	if _, err := io.WriteString(conn, full[:len(full)-1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(late - time.Since(start))
	if _, err := io.WriteString(conn, full[len(full)-1:]); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(margin))
	answer, _ := io.ReadAll(conn)
	took := time.Since(start)
	if len(answer) != 0 {
		t.Fatalf("a request whose body ended after the %v write timeout was answered %q; want the connection closed", write, answer)
	}
	if took >= late+margin {
		t.Fatalf("the connection was still open %v after the request", took-late)
	}
	if status, got := call(t, "GET", p.url("/ip_policies"), token, ""); status != 200 || strings.Contains(string(got), `"late"`) || !strings.Contains(string(got), `"prompt"`) {
		t.Fatalf("after the late create: %d %s; want only the prompt one stored", status, got)
	}
	// The log has the answer the client never got.
	deadline := time.Now().Add(margin)
	for !strings.Contains(p.Stderr.String(), "status=503") {
		if time.Now().After(deadline) {
			t.Fatalf("no 503 in the request log:\n%s", p.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawRequest is an authenticated API request as its bytes, for tests that send it over a raw
// connection in pieces or with pauses.
func rawRequest(token, method, path, body string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nNgrok-Version: 2\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, token, len(body), body)
}

// dial opens a raw TCP connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
