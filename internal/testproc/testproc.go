// Package testproc runs the real edgeplane binary for tests: it builds it once, starts
// `edgeplane serve` as a subprocess with a clean environment, waits for it to listen, and kills it
// when the test ends. The command-line tests (cmd/edgeplane) and the compatibility suite (e2e)
// share it.
package testproc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeouts of the processes tests start. They bound a failure, never a passing test (each wait
// ends at the answer it waits for), so they are sized for CI's two cores shared with every
// package's tests at once: there a server on a new PostgreSQL schema once logged nothing for
// 10 s at a load of 38, its migrations and first keys taking that long.
const (
	StartTimeout = 60 * time.Second // until the server logs its listening line
	StopTimeout  = 30 * time.Second // from a signal or kill until the process has exited
)

// TokenSentence is part of what serve prints with the bootstrap token of an empty database.
const TokenSentence = "will not be shown again"

// RaceEnv names the environment variable that builds the binary with the race detector: with
// EDGEPLANE_TEST_RACE=1 the suites that run the real server (e2e, e2e/agents, cmd/edgeplane)
// exercise its data plane under real agents and clients with every access checked, which
// in-package -race runs cannot reach, and a test whose server reported a race fails.
const RaceEnv = "EDGEPLANE_TEST_RACE"

// SkipUnderRace skips a test whose measure the race detector distorts (it multiplies a
// process's memory and slows it several times), when the binary is race-built (RaceEnv).
func SkipUnderRace(t testing.TB, measure string) {
	t.Helper()
	if os.Getenv(RaceEnv) != "" {
		t.Skipf("%s is measured on the plain build; %s builds serve with -race, which multiplies its memory", measure, RaceEnv)
	}
}

// raceReport is how the race detector starts each report it writes on stderr.
const raceReport = "WARNING: DATA RACE"

// Build compiles the edgeplane command in cmdDir into a temporary directory (with -race when
// RaceEnv is set); cleanup removes it.
func Build(cmdDir string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "edgeplane-test-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "edgeplane")
	args := []string{"build", "-o", bin}
	if os.Getenv(RaceEnv) != "" {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, cmdDir)...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build %s: %v\n%s", cmdDir, err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// CleanEnv is the test process's environment without any EDGEPLANE_* variable, plus extra: a
// test's server sees only the configuration the test gives it. The data plane is off unless the
// test turns it on (EDGEPLANE_AGENT_LISTEN in extra, or --agent-listen): its default ports are
// fixed, and the many servers tests run at once would fight over them.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EDGEPLANE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "EDGEPLANE_AGENT_LISTEN=")
	return append(env, extra...)
}

// Output collects a subprocess's output while it runs and wakes a waiter on every write.
type Output struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{}
}

// NewOutput returns an empty Output.
func NewOutput() *Output { return &Output{notify: make(chan struct{}, 1)} }

// Write appends p.
func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.notify <- struct{}{}:
	default:
	}
	return n, err
}

// String returns everything written so far.
func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Changed is signalled after writes.
func (b *Output) Changed() <-chan struct{} { return b.notify }

// Process is a running `edgeplane serve`.
type Process struct {
	Cmd    *exec.Cmd
	Stderr *Output
	// Done is closed when the process has exited; Err is then its exit status.
	Done chan struct{}
	err  error
	// Addr is the address the server listens on.
	Addr string
}

// Err is the process's exit status once Done is closed.
func (p *Process) Err() error { <-p.Done; return p.err }

// listeningRE finds the listening line in text or JSON log format.
var listeningRE = regexp.MustCompile(`msg="edgeplane listening" addr=(\S+)|"msg":"edgeplane listening","addr":"([^"]+)"`)

// Serve runs `bin serve args...` with the clean environment plus env, in dir when not empty,
// waits until it logs its listening address, and kills it when the test ends.
func Serve(t testing.TB, bin, dir string, env []string, args ...string) *Process {
	t.Helper()
	p, err := TryServe(t, bin, dir, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TryServe is Serve returning, rather than failing the test on, a server that exits or stays
// silent before its listening line, for a caller that can try again (a restart on a fixed port
// that another socket holds for a moment).
func TryServe(t testing.TB, bin, dir string, env []string, args ...string) (*Process, error) {
	t.Helper()
	p := &Process{Stderr: NewOutput(), Done: make(chan struct{})}
	p.Cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	p.Cmd.Env = CleanEnv(env...)
	p.Cmd.Dir = dir
	p.Cmd.Stdout = io.Discard
	p.Cmd.Stderr = p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start edgeplane serve: %v", err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.Done:
		default:
			_ = p.Cmd.Process.Kill()
			select {
			case <-p.Done:
			case <-time.After(StopTimeout):
				t.Errorf("edgeplane serve (pid %d) did not exit after kill", p.Cmd.Process.Pid)
				return
			}
		}
		if out := p.Stderr.String(); strings.Contains(out, raceReport) {
			t.Errorf("edgeplane serve reported a data race; stderr:\n%s", out)
		}
	})
	deadline := time.NewTimer(StartTimeout)
	defer deadline.Stop()
	for {
		if m := listeningRE.FindStringSubmatch(p.Stderr.String()); m != nil {
			p.Addr = m[1] + m[2]
			return p, nil
		}
		select {
		case <-p.Stderr.Changed():
		case <-p.Done:
			if listeningRE.MatchString(p.Stderr.String()) {
				return nil, fmt.Errorf("edgeplane serve exited right after listening (%v); stderr:\n%s", p.err, p.Stderr)
			}
			return nil, fmt.Errorf("edgeplane serve exited before listening (%v); stderr:\n%s", p.err, p.Stderr)
		case <-deadline.C:
			_ = p.Cmd.Process.Kill()
			return nil, fmt.Errorf("edgeplane serve did not log its listening line within %v; stderr:\n%s", StartTimeout, p.Stderr)
		}
	}
}

// BootstrapToken returns the token serve printed for an empty database (the first non-empty,
// indented line after TokenSentence; with --log-format json, the token field of the log record
// whose message holds TokenSentence) and whether it printed one; it fails the test when the
// printout is malformed.
func BootstrapToken(t testing.TB, stderr string) (string, bool) {
	t.Helper()
	i := strings.Index(stderr, TokenSentence)
	if i < 0 {
		return "", false
	}
	if start := strings.LastIndex(stderr[:i], "\n") + 1; strings.HasPrefix(stderr[start:], "{") {
		line, _, _ := strings.Cut(stderr[start:], "\n")
		var rec struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Token == "" {
			t.Fatalf("the JSON record with %q holds no token (%v): %s", TokenSentence, err, line)
		}
		return rec.Token, true
	}
	for _, line := range strings.Split(stderr[i:], "\n")[1:] {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			t.Fatalf("first line after %q is not indented: %q; stderr:\n%s", TokenSentence, line, stderr)
		}
		tok := strings.TrimSpace(line)
		if strings.ContainsAny(tok, " \t") {
			t.Fatalf("token line holds more than the token: %q", line)
		}
		return tok, true
	}
	t.Fatalf("no token line after %q; stderr:\n%s", TokenSentence, stderr)
	return "", false
}

// Main is a TestMain: it builds the edgeplane command in cmdDir into *bin, runs the tests, removes
// the binary and exits with the tests' status.
func Main(m *testing.M, cmdDir string, bin *string) {
	path, cleanup, err := Build(cmdDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = path
	// Commands the tests run in their own process see the same default as subprocesses: the
	// data plane off (see CleanEnv).
	if _, set := os.LookupEnv("EDGEPLANE_AGENT_LISTEN"); !set {
		os.Setenv("EDGEPLANE_AGENT_LISTEN", "")
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
