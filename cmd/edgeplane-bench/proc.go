package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a server under test, running in a process of its own so that its CPU time and peak
// RSS are its own and nobody else's.
type child struct {
	name string
	cmd  *exec.Cmd
	addr string
	log  string
	done chan struct{}
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// architecture Go supports.
const clockTick = 10 * time.Millisecond

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startChild runs path with args (where "{addr}" is replaced by the listen address), logging to
// logPath, and waits until GET /healthz answers 200.
func startChild(name, path string, args []string, env []string, logPath string) (*child, error) {
	return startChildFunc(name, path, func(addr string) ([]string, error) {
		a := make([]string, len(args))
		for i, s := range args {
			a[i] = strings.ReplaceAll(s, "{addr}", addr)
		}
		return a, nil
	}, env, logPath)
}

// startChildFunc is startChild for a program whose arguments (or the files they name) are made
// from the listen address by argsFor, called again with a new address on each attempt.
func startChildFunc(name, path string, argsFor func(addr string) ([]string, error), env []string, logPath string) (*child, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		a, err := argsFor(addr)
		if err != nil {
			return nil, err
		}
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(path, a...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), env...)
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, err
		}
		logf.Close()
		c := &child{name: name, cmd: cmd, addr: addr, log: logPath, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(c.done) }()
		if lastErr = c.waitReady(60 * time.Second); lastErr == nil {
			return c, nil
		}
		c.kill()
	}
	return nil, fmt.Errorf("%s did not start: %w\n%s", name, lastErr, tail(logPath, 2000))
}

func (c *child) waitReady(limit time.Duration) error {
	req := request("GET", c.addr, "/healthz", "", nil)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return errors.New("the process exited")
		default:
		}
		cl := newClient(c.addr)
		status, _, err := cl.do(req)
		cl.close()
		if err == nil && status == 200 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no 200 from /healthz within %s", limit)
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// cpu is the user plus system CPU time the process has used, all threads included.
func (c *child) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.pid()))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces: fields are counted after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// procCounts are a process's read and write system calls (from /proc/<pid>/io, every thread's)
// and its threads' context switches, voluntary (a thread that waited: for a socket, a lock, or
// a Go runtime thread parking for want of work) and forced: what a request costs in system calls
// and wake-ups, counts that depend far less on the machine's load than its CPU time does.
type procCounts struct {
	reads, writes, switches int64
}

func (a procCounts) sub(b procCounts) procCounts {
	return procCounts{a.reads - b.reads, a.writes - b.writes, a.switches - b.switches}
}

// counts reads the process's procCounts.
func (c *child) counts() (procCounts, error) {
	var pc procCounts
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", c.pid()))
	if err != nil {
		return pc, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			pc.reads, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			pc.writes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.pid()))
	if err != nil {
		return pc, err
	}
	for _, t := range tasks {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", c.pid(), t.Name()))
		if err != nil {
			continue // the thread has exited
		}
		for line := range strings.SplitSeq(string(st), "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				pc.switches += n
			}
		}
	}
	return pc, nil
}

// resetPeak sets the process's peak RSS (VmHWM) to its current RSS, so that the peak read after
// a scenario is the scenario's own.
func (c *child) resetPeak() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", c.pid()), []byte("5"), 0)
}

// peakRSS is VmHWM in bytes.
func (c *child) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid()))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/<pid>/status")
}

// stop ends the process gracefully (SIGTERM), and kills it if it has not exited in time.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		c.kill()
	}
}

// kill ends the process at once (SIGKILL), as a crash would, and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// storeCounters are counters of an edgeplane server's store, from its metrics: group commit
// batches and the write transactions in them, and read cache hits and misses (SQLite only); key
// lookup queries and the lookups combined in them (PostgreSQL only).
type storeCounters struct{ batches, writes, hits, misses, queries, lookups float64 }

// counters scrapes the store counters; ok is false when the server exposes none.
func (c *child) counters() (sc storeCounters, ok bool) {
	// net/http's client: the exposition is chunked, which the load generator's client refuses.
	res, err := http.Get("http://" + c.addr + "/metrics")
	if err != nil {
		return sc, false
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		return sc, false
	}
	for line := range strings.Lines(string(body)) {
		name, value, found := strings.Cut(strings.TrimSpace(line), " ")
		if !found {
			continue
		}
		var dst *float64
		switch name {
		case "edgeplane_write_batches_total":
			dst = &sc.batches
		case "edgeplane_write_transactions_total":
			dst = &sc.writes
		case `edgeplane_read_cache_total{result="hit"}`:
			dst = &sc.hits
		case `edgeplane_read_cache_total{result="miss"}`:
			dst = &sc.misses
		case "edgeplane_key_lookup_queries_total":
			dst = &sc.queries
		case "edgeplane_key_lookups_total":
			dst = &sc.lookups
		default:
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			*dst, ok = v, true
		}
	}
	return sc, ok
}

// since says what happened between two scrapes: the average group commit batch, the share of
// read cache hits, and the average number of key lookups per query, where there was any.
func (sc storeCounters) since(before storeCounters) string {
	var parts []string
	if b := sc.batches - before.batches; b > 0 {
		parts = append(parts, fmt.Sprintf("batch %.1f", (sc.writes-before.writes)/b))
	}
	if n := sc.hits - before.hits + sc.misses - before.misses; n > 0 {
		parts = append(parts, fmt.Sprintf("cache hits %.0f%%", 100*(sc.hits-before.hits)/n))
	}
	if q := sc.queries - before.queries; q > 0 {
		parts = append(parts, fmt.Sprintf("lookups per query %.1f", (sc.lookups-before.lookups)/q))
	}
	return strings.Join(parts, ", ")
}
