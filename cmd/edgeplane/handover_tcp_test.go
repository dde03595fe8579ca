package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testproc"
)

// rawDup returns a new descriptor of ln's socket, as a handover gives its successor.
func rawDup(t *testing.T, ln net.Listener) int {
	t.Helper()
	fd, err := dupListener(ln.(*net.TCPListener))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func portOfListener(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// TestInheritedTCPEntries: EDGEPLANE_INHERITED_TCP's entries are taken only when each names a
// port once and a descriptor, not named elsewhere, of a listening TCP socket on that very
// port; every other entry is ignored with a warning naming it, a socket it named is closed, and
// a descriptor that is no socket is left alone. The entry taken serves its port from the pool,
// once.
func TestInheritedTCPEntries(t *testing.T) {
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	good, other, wrongPort := listen(), listen(), listen()
	goodFD, wrongFD := rawDup(t, good), rawDup(t, wrongPort)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	udpFile, err := udp.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	udpFD, _ := syscall.Dup(int(udpFile.Fd()))
	udpFile.Close()
	client, err := net.Dial("tcp", other.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	clientFile, err := client.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	connFD, _ := syscall.Dup(int(clientFile.Fd()))
	clientFile.Close()
	regular, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	regularFD := int(regular.Fd())
	fixedFD := 3 // named by EDGEPLANE_INHERITED_FDS

	p := strconv.Itoa(portOfListener(good))
	entries := []struct{ entry, want string }{
		{p + "=" + strconv.Itoa(goodFD), ""},
		{"junk", "not PORT=FD"},
		{"0=" + strconv.Itoa(goodFD), "no such port"},
		{"70000=" + strconv.Itoa(goodFD), "no such port"},
		{p + "=" + strconv.Itoa(wrongFD), "port " + p + " is given twice"},
		{"1=1", "a descriptor must be 3 or more"},
		{"2=" + strconv.Itoa(fixedFD), "a descriptor must be 3 or more and given once"},
		{"3=" + strconv.Itoa(goodFD), "a descriptor must be 3 or more and given once"},
		{"4=900", "descriptor not open"},
		{"5=" + strconv.Itoa(regularFD), "not a socket"},
		{"6=" + strconv.Itoa(udpFD), "not a listening socket"},
		{"7=" + strconv.Itoa(connFD), "not a listening socket"},
		{"8=" + strconv.Itoa(wrongFD), fmt.Sprintf("the socket listens on port %d", portOfListener(wrongPort))},
	}
	var list []string
	for _, e := range entries {
		list = append(list, e.entry)
	}
	lns, files, warnings := parseInheritedTCP(strings.Join(list, ","), map[int]bool{fixedFD: true})
	for _, f := range files {
		f.Close()
	}
	pool := &tcpPool{lns: lns}
	defer pool.close()
	if len(lns) != 1 || lns[portOfListener(good)] == nil {
		t.Fatalf("taken %v, want only port %s", lns, p)
	}
	for _, e := range entries[1:] {
		found := false
		for _, w := range warnings {
			found = found || (strings.Contains(w, fmt.Sprintf("%q ignored: ", e.entry)) && strings.Contains(w, e.want))
		}
		if !found {
			t.Errorf("no warning for %q saying %q; warnings:\n%s", e.entry, e.want, strings.Join(warnings, "\n"))
		}
	}
	if len(warnings) != len(entries)-1 {
		t.Errorf("%d warnings for %d bad entries:\n%s", len(warnings), len(entries)-1, strings.Join(warnings, "\n"))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(regularFD, &st); err != nil {
		t.Errorf("the regular file's descriptor an entry named was closed: %v", err)
	}

	// The pool's listener is the inherited socket: a connection to the port reaches it.
	ln := pool.Take(portOfListener(good))
	if ln == nil || pool.Take(portOfListener(good)) != nil {
		t.Fatalf("the pool gave port %s's listener %v, then again", p, ln)
	}
	defer ln.Close()
	good.Close() // the predecessor's descriptor: the socket stays open in the pool's
	c, err := net.DialTimeout("tcp", good.Addr().String(), 20*time.Second)
	if err != nil {
		t.Fatalf("dial the inherited port: %v", err)
	}
	defer c.Close()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	ac, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept on the inherited listener: %v", err)
	}
	ac.Close()
}

// TestInheritedTCPBounded: past maxInheritedTCP entries the rest are ignored with one warning.
func TestInheritedTCPBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fd := rawDup(t, ln)
	defer syscall.Close(fd)
	v := strings.Repeat("x,", maxInheritedTCP) + fmt.Sprintf("%d=%d", portOfListener(ln), fd)
	lns, files, warnings := parseInheritedTCP(v, map[int]bool{})
	for _, f := range files {
		f.Close()
	}
	if len(lns) != 0 || len(warnings) != maxInheritedTCP+1 || !strings.Contains(warnings[0], fmt.Sprintf("only the first %d are taken", maxInheritedTCP)) {
		t.Fatalf("%d entries taken, %d warnings (first %q); want none taken past the bound", len(lns), len(warnings), warnings[0])
	}
}

// TestInheritedTCPExpire: the sockets no bind or edge took within the handover's span are
// closed: their port refuses connections again.
func TestInheritedTCPExpire(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	pool := &tcpPool{lns: map[int]net.Listener{portOfListener(ln): ln}}
	expired := make(chan int, 1)
	pool.expireAfter(time.Millisecond, func(n int) { expired <- n })
	select {
	case n := <-expired:
		if n != 1 {
			t.Fatalf("expired %d listeners, want 1", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the pool did not expire within 20s")
	}
	if pool.Take(portOfListener(ln)) != nil {
		t.Fatal("an expired pool still gives its listener")
	}
	if c, err := net.DialTimeout("tcp", addr, 20*time.Second); err == nil {
		c.Close()
		t.Fatalf("the expired listener's port %s still accepts", addr)
	}
}

// TestServeIgnoresBadInheritedTCP: a successor whose EDGEPLANE_INHERITED_TCP is garbage still
// starts and serves on its inherited sockets, with a log line for each entry it ignored.
func TestServeIgnoresBadInheritedTCP(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sock, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "serve", "--db", filepath.Join(dir, "edgeplane.db"), "--listen", "127.0.0.1:0", "--agent-listen", "")
	cmd.Env = cleanEnv(inheritEnv+"=api=3,ready=4", inheritTCPEnv+"=junk,1=1,80=3,443=900")
	cmd.ExtraFiles = []*os.File{sock, pw}
	stderr := testproc.NewOutput()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = pr.SetReadDeadline(time.Now().Add(runTimeout))
	buf := make([]byte, 6)
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("the successor did not say it is ready: %q %v; stderr:\n%s", buf, err, stderr.String())
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("the successor does not serve its inherited API socket: %v", err)
	}
	resp.Body.Close()
	for _, entry := range []string{"junk", "1=1", "80=3", "443=900"} {
		if !strings.Contains(stderr.String(), fmt.Sprintf(`\"%s\" ignored`, entry)) {
			t.Errorf("no log line for the ignored entry %q; stderr:\n%s", entry, stderr.String())
		}
	}
}
