package main

import (
	"bytes"
	"context"
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

// TestInheritedSocketsRefused: a malformed EDGEPLANE_INHERITED_FDS, or one naming a descriptor
// that is not what it says, stops serve with exit 2 and a message naming the entry, before the
// database is touched.
func TestInheritedSocketsRefused(t *testing.T) {
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
	regular, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	for _, c := range []struct {
		name, value string
		files       []*os.File // given as descriptors 3, 4, …
		want        string
	}{
		{"not NAME=FD", "api:3", nil, `"api:3" is not NAME=FD`},
		{"not a number", "api=three", nil, `"api=three" is not NAME=FD`},
		{"unknown name", "admin=3,ready=4", []*os.File{sock, regular}, `"admin" names no listener`},
		{"twice", "api=3,api=4,ready=5", []*os.File{sock, sock, regular}, "api is given twice"},
		{"standard descriptor", "api=1,ready=3", []*os.File{regular}, "api=1: a descriptor must be 3 or more"},
		{"descriptor reused", "api=3,ready=3", []*os.File{sock}, "ready=3: a descriptor must be 3 or more and given once"},
		{"not open", "api=900,ready=901", nil, "api=900: descriptor not open"},
		{"ready not a pipe", "api=3,ready=4", []*os.File{sock, regular}, "ready=4: not a pipe"},
		{"not a socket", "api=3,ready=4", []*os.File{regular, regular}, "api=3: not a listening socket"},
		{"no ready pipe", "api=3", []*os.File{sock}, "no ready=FD"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "edgeplane.db")
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, "serve", "--db", db, "--listen", "127.0.0.1:0")
			cmd.Env = cleanEnv(inheritEnv + "=" + c.value)
			cmd.ExtraFiles = c.files
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if code := exitCode(t, err); code != 2 || !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), inheritEnv) {
				t.Errorf("exit %d, stderr %q; want exit 2 naming %s and %q", code, stderr.String(), inheritEnv, c.want)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("the refused start touched the database: %v", err)
			}
		})
	}
}

// TestFailedHandoverKeepsServing: when the new process cannot start (here the executable was
// replaced by one that exits at once), the handover fails with a log line and the old process
// goes on serving on its sockets; a later SIGUSR2, once the executable is sound again, hands
// over to it (an upgrade is this: replace the binary, then SIGUSR2).
func TestFailedHandoverKeepsServing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "edgeplane")
	copyFile(t, binPath, bin)
	p := testproc.Serve(t, bin, dir, nil, "--db", filepath.Join(dir, "edgeplane.db"), "--listen", "127.0.0.1:0")
	api := "http://" + p.Addr + "/"
	pid := p.Cmd.Process.Pid

	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho broken build >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(broken, bin); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, p, `msg="handover failed: this process goes on serving"`)
	if !strings.Contains(p.Stderr.String(), "exited before it was ready") {
		t.Errorf("the failure does not say the new process exited; stderr:\n%s", p.Stderr)
	}
	resp, err := http.Get(api)
	if err != nil {
		t.Fatalf("the old process stopped serving after a failed handover: %v", err)
	}
	resp.Body.Close()

	copyFile(t, binPath, bin)
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, p, `msg="handover: serving on the inherited sockets"`)
	// The successor's pid is in its line; it is killed with the test.
	for _, line := range strings.Split(p.Stderr.String(), "\n") {
		if _, rest, ok := strings.Cut(line, `msg="handover: serving on the inherited sockets" pid=`); ok {
			var newPid int
			for _, r := range rest {
				if r < '0' || r > '9' {
					break
				}
				newPid = newPid*10 + int(r-'0')
			}
			t.Cleanup(func() { _ = syscall.Kill(newPid, syscall.SIGKILL) })
		}
	}
	waitLogged(t, p, `msg="handover: drained; exiting"`)
	resp, err = http.Get(api)
	if err != nil {
		t.Fatalf("nothing serves the API after the handover: %v", err)
	}
	resp.Body.Close()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// waitLogged waits until the server's log holds s.
func waitLogged(t *testing.T, p *testproc.Process, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.Stderr.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s; stderr:\n%s", s, p.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHandoverNotifiesSystemd: under a Type=notify unit (NOTIFY_SOCKET set), serve sends
// READY=1 once it serves; a handover sends RELOADING=1, then the new process's pid as MAINPID
// with READY=1, so systemd follows it.
func TestHandoverNotifiesSystemd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	next := func() string {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	p := testproc.Serve(t, binPath, dir, []string{"NOTIFY_SOCKET=" + sockPath}, "--db", filepath.Join(dir, "edgeplane.db"), "--listen", "127.0.0.1:0")
	if got := next(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if err := syscall.Kill(p.Cmd.Process.Pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if got := next(); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("notification at the handover %q, want RELOADING=1 with MONOTONIC_USEC", got)
	}
	got := next()
	pidText, ok := strings.CutPrefix(got, "MAINPID=")
	pidText, ready := strings.CutSuffix(pidText, "\nREADY=1")
	newPid, err := strconv.Atoi(pidText)
	if err == nil {
		t.Cleanup(func() { _ = syscall.Kill(newPid, syscall.SIGKILL) })
	}
	if !ok || !ready || err != nil || newPid == p.Cmd.Process.Pid {
		t.Fatalf("the new process's notification %q, want MAINPID=<its pid> and READY=1", got)
	}
	waitLogged(t, p, `msg="handover: drained; exiting"`)
}
