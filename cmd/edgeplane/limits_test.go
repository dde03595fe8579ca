package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keepAlive sends one request on a new raw connection and reads its answer, leaving the
// connection open; it returns the connection and the status (0 when the server closed the
// connection without answering).
func keepAlive(t *testing.T, addr, request string) (net.Conn, int) {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, request); err != nil {
		return c, 0
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, 0
	}
	res.Body.Close()
	_ = c.SetReadDeadline(time.Time{})
	return c, res.StatusCode
}

// closedByServer reports whether the server closes c within d (rather than leaving it open).
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

const healthz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

// TestPerIPConnectionLimit: with --max-connections-per-ip 3, three keep-alive connections from
// 127.0.0.1 are served and a fourth is closed unanswered; once one of the three closes, a new
// one is served.
func TestPerIPConnectionLimit(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--max-connections-per-ip", "3")
	var open []net.Conn
	served, refused := 0, 0
	for range 4 {
		c, status := keepAlive(t, p.Addr, healthz)
		switch status {
		case 200:
			served++
			open = append(open, c)
		case 0:
			refused++
		default:
			t.Fatalf("GET /healthz: %d", status)
		}
	}
	if served != 3 || refused != 1 {
		t.Fatalf("4 connections from one address with a limit of 3: %d served, %d refused", served, refused)
	}
	open[0].Close()
	ok := false
	for range 50 { // the server notices the close when it reads the connection's EOF
		if _, status := keepAlive(t, p.Addr, healthz); status == 200 {
			ok = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		t.Errorf("no connection was served after one of the three closed")
	}
}

// TestIdleUnauthenticatedConnectionsFreeTheirSlots is an exhaustion of the API's slots scaled
// down: --max-connections 4 slots all held by keep-alive connections that asked for /healthz
// without a key. They are closed after --unauthenticated-idle-timeout, so a new client is served
// without waiting for the 120 s idle timeout, while a connection that presented a valid key is
// kept.
func TestIdleUnauthenticatedConnectionsFreeTheirSlots(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServe(t, "", []string{"EDGEPLANE_UNAUTHENTICATED_IDLE_TIMEOUT=300ms"},
		"--db", db, "--listen", "127.0.0.1:0", "--max-connections", "4")
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	trusted, status := keepAlive(t, p.Addr, rawRequest(token, "GET", "/ip_policies", ""))
	if status != 200 {
		t.Fatalf("GET /ip_policies: %d", status)
	}
	var idle []net.Conn
	for range 3 {
		c, status := keepAlive(t, p.Addr, healthz)
		if status != 200 {
			t.Fatalf("GET /healthz: %d", status)
		}
		idle = append(idle, c)
	}
	// Every slot is taken; the new client waits in the backlog until the idle ones go.
	res, err := (&http.Client{Timeout: 30 * time.Second}).Get(p.url("/healthz"))
	if err != nil {
		t.Fatalf("a new client beside 3 idle unauthenticated connections and 1 authenticated: %v", err)
	}
	res.Body.Close()
	closed := 0
	for _, c := range idle {
		if closedByServer(c, 5*time.Second) {
			closed++
		}
	}
	if closed != 3 {
		t.Errorf("%d of 3 idle unauthenticated connections were closed by the server", closed)
	}
	if closedByServer(trusted, time.Second) {
		t.Errorf("the authenticated keep-alive connection was closed before --idle-timeout")
	}
	if res.StatusCode != 200 {
		t.Errorf("the new client got %d", res.StatusCode)
	}
}

// TestConnectionLimitSettingsAreChecked: a limit below zero, or no number, stops serve with a
// message naming the flag or the variable.
func TestConnectionLimitSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--max-connections-per-ip", "-1"}, "--max-connections-per-ip must be at least 0, got -1"},
		{[]string{"EDGEPLANE_MAX_CONNECTIONS_PER_IP=many"}, nil, `EDGEPLANE_MAX_CONNECTIONS_PER_IP must be a whole number of at least 0, got "many"`},
		{nil, []string{"--unauthenticated-idle-timeout", "0s"}, "--unauthenticated-idle-timeout must be a positive duration"},
		{nil, []string{"--agent-max-connections", "-2"}, "--agent-max-connections must be at least 0, got -2"},
		{nil, []string{"--agent-max-connections-per-ip", "-1"}, "--agent-max-connections-per-ip must be at least 0"},
		{[]string{"EDGEPLANE_AGENT_MAX_UNAUTHENTICATED_PER_IP=x"}, nil, `EDGEPLANE_AGENT_MAX_UNAUTHENTICATED_PER_IP must be a whole number of at least 0, got "x"`},
		{nil, []string{"--public-max-connections", "-1"}, "--public-max-connections must be at least 0"},
		{[]string{"EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_IP=-5"}, nil, `EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_IP must be a whole number of at least 0, got "-5"`},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db")}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %q: exit %d, stderr %q, want %q", c.env, c.args, code, stderr, c.want)
		}
	}
}

// evictions counts the connections serve logged as closed to admit a new client on listener.
func evictions(stderr, listener string) int {
	n := 0
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, `msg="connection closed to admit a new client"`) && strings.Contains(line, "listener="+listener+" ") {
			n++
		}
	}
	return n
}

// TestSlowlorisGivesWayOnTheAPI is a slowloris wave scaled down: with
// --max-connections 4 and a header timeout of a minute, one slot holds an upload in progress
// and three hold clients that never finish their request head (silent, half a request line, a
// header trickled forever). Three new clients are each answered 200 at once, by closing the three
// slow ones, oldest first; the upload, though the oldest connection, is not touched and
// completes with 201.
func TestSlowlorisGivesWayOnTheAPI(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServe(t, "", nil, "--db", db, "--listen", "127.0.0.1:0", "--max-connections", "4",
		"--read-header-timeout", "1m", "--read-timeout", "2m", "--log-level", "debug")
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	body := `{"description":"uploaded slowly"}`
	up := dial(t, p.Addr)
	head := strings.Replace(rawRequest(token, "POST", "/ip_policies", body), "\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n", 1)
	head = strings.TrimSuffix(head, body)
	if _, err := io.WriteString(up, head); err != nil {
		t.Fatal(err)
	}
	upr := bufio.NewReader(up)
	_ = up.SetReadDeadline(time.Now().Add(20 * time.Second))
	// The server asks for the body once the handler reads it: the request is in progress.
	if line, err := upr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("no 100 Continue for the upload: %q %v", line, err)
	}
	if line, err := upr.ReadString('\n'); err != nil || line != "\r\n" {
		t.Fatalf("100 Continue not followed by its blank line: %q %v", line, err)
	}
	if _, err := io.WriteString(up, body[:10]); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	var slow []net.Conn
	for _, first := range []string{"", "GET /ip_pol", "GET /ip_policies HTTP/1.1\r\nHost: x\r\n"} {
		c := dial(t, p.Addr)
		if _, err := io.WriteString(c, first); err != nil {
			t.Fatal(err)
		}
		if first != "" && strings.HasSuffix(first, "\r\n") {
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(500 * time.Millisecond):
					}
					if _, err := io.WriteString(c, "X-Slow: 1\r\n"); err != nil {
						return
					}
				}
			}()
		}
		slow = append(slow, c)
	}
	// The listener accepts in order: the newcomers come after the slow ones, every slot taken.
	answered := 0
	for range 3 {
		// Each newcomer keeps its connection open (closing it would free a slot).
		if _, status := keepAlive(t, p.Addr, healthz); status == 200 {
			answered++
		}
	}
	closed := 0
	for _, c := range slow {
		if closedByServer(c, 20*time.Second) {
			closed++
		}
	}
	if _, err := io.WriteString(up, body[10:]); err != nil {
		t.Fatalf("finishing the upload: %v", err)
	}
	_ = up.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(upr, nil)
	if err != nil {
		t.Fatalf("the upload in progress was cut off: %v (%d of 3 newcomers answered, %d of 3 slow clients closed); stderr:\n%s",
			err, answered, closed, p.Stderr)
	}
	res.Body.Close()
	if answered != 3 || closed != 3 || res.StatusCode != 201 {
		t.Errorf("%d of 3 newcomers answered 200, %d of 3 slow clients closed, upload %d", answered, closed, res.StatusCode)
	}
	// The newcomers' own connections, idle and younger, are closed last: evictions are the slow
	// ones only, each logged once.
	// The log is written in the background: wait for the lines.
	for end := time.Now().Add(20 * time.Second); evictions(p.Stderr.String(), "api") < 3 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := evictions(p.Stderr.String(), "api"); n != 3 {
		t.Errorf("%d evictions logged on the API listener, want 3:\n%s", n, p.Stderr)
	}
}
