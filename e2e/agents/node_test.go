package agents

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Node SDK and the ngrok agent binary come from npm: node/package.json pins them and
// node/package-lock.json makes the install reproducible. npm ci runs at most once per test run,
// and not at all when node_modules was installed from the same package.json and lock file (a
// stamp file records their hash), so a run does not pull node_modules from under another run of
// the same tree. Where npm cannot install (no npm, no network to the registry), the tests that
// need it are skipped, never failed.

var (
	npmOnce sync.Once
	npmErr  string // why the install is unusable ("" once it succeeded)
)

// npmInstall installs node/'s packages once per test run and skips t when that failed; it
// returns node/'s absolute path.
func npmInstall(t *testing.T) string {
	t.Helper()
	npmOnce.Do(func() { npmErr = npmCIOnce("node") })
	if npmErr != "" {
		t.Skip("skipped: " + npmErr)
	}
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// npmCIOnce runs npm ci in dir unless its stamp says node_modules holds what the lock file pins,
// and returns why the packages are unusable ("" when they are usable).
func npmCIOnce(dir string) string {
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err.Error()
		}
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".edgeplane-agents-installed")
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == sum {
		return ""
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "npm is not installed"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// An unreachable registry fails within two tries of at most a minute each, not npm's
	// default three tries of five minutes each.
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error",
		"--fetch-retries=1", "--fetch-timeout=60000")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "npm ci in e2e/agents/node failed (no network to the npm registry?): " + err.Error() + "\n" + lastBytes(string(out), 1500)
	}
	if err := os.WriteFile(stamp, []byte(sum+"\n"), 0o644); err != nil {
		return err.Error()
	}
	return ""
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// jsonEvent is one line that a client process prints (node/sdk.js; gov2agent has its own).
type jsonEvent struct {
	Event, Stage, Code, Message, URL, ID string
}

// runNodeSDK runs node/sdk.js in mode against the world and returns its events up to "ready"
// or the first error. The process ends with the test.
func (w *world) runNodeSDK(mode, token, domain string) []jsonEvent {
	w.t.Helper()
	return w.runNodeSDKVia(w.agent, mode, token, domain)
}

// runNodeSDKVia is runNodeSDK with the SDK connecting to agentAddr (a relay to the agent
// listener) instead.
func (w *world) runNodeSDKVia(agentAddr, mode, token, domain string) []jsonEvent {
	w.t.Helper()
	dir := npmInstall(w.t)
	node, err := exec.LookPath("node")
	if err != nil {
		w.t.Skip("skipped: node is not installed")
	}
	caFile := filepath.Join(w.t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, w.caPEM, 0o600); err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "sdk.js"), mode, agentAddr, caFile, token, domain)
	cmd.Dir = dir
	stdout, stderr := w.startClient(cmd, "node sdk.js")
	var events []jsonEvent
	sc := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		var ev jsonEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		events = append(events, ev)
		if ev.Event == "ready" || ev.Event == "error" {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return events
		}
	}
	w.t.Fatalf("node sdk.js %s ended without a result (events %+v); stderr:\n%s", mode, events, stderr)
	return nil
}

// startClient starts cmd with piped output and ends it with the test: its standard input is
// closed (the clients' cue to disconnect), and it is killed if it has not exited 5 s later.
func (w *world) startClient(cmd *exec.Cmd, name string) (io.Reader, *lockedBuffer) {
	w.t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		w.t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	w.t.Cleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return stdout, stderr
}

// lockedBuffer collects a process's output safely while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNodeSDK: @ngrok/ngrok (the Rust-based Node SDK) connects with serverAddr + caCert, opens
// an https and an http endpoint forwarding to a Node app and a labeled tunnel, and public
// requests reach the Node app through both public listeners; ngrok.forward() with server_addr
// + session_ca_cert works too; and the SDK reports refusals with their codes. The Rust client
// under the SDK reads each reply to EOF and decodes it strictly (exact field names, every key it
// requires), so this is the test that catches a reply left open or missing a field.
func TestNodeSDK(t *testing.T) {
	w := start(t)
	_, token := w.credential()

	events := w.runNodeSDK("builder", token, "node.edgeplane.app")
	var urls []string
	labeledID := ""
	for _, ev := range events {
		switch ev.Event {
		case "error":
			t.Fatalf("builder: %+v\n%s", ev, w.proc.Stderr)
		case "endpoint":
			urls = append(urls, ev.URL)
		case "labeled":
			labeledID = ev.ID
		}
	}
	if strings.Join(urls, " ") != "https://node.edgeplane.app http://http-node.edgeplane.app" || labeledID == "" {
		t.Errorf("endpoints %v, labeled tunnel %q", urls, labeledID)
	}
	st, body, _ := get(t, w.httpsClient(), "https://node.edgeplane.app/over/https")
	if st != 200 || body != "node upstream host=node.edgeplane.app xff=127.0.0.1 xfp=https xfh=node.edgeplane.app path=/over/https" {
		t.Errorf("https endpoint: %d %q", st, body)
	}
	st, body, _ = get(t, w.httpClient(), "http://http-node.edgeplane.app/over/http")
	if st != 200 || body != "node upstream host=http-node.edgeplane.app xff=127.0.0.1 xfp=http xfh=http-node.edgeplane.app path=/over/http" {
		t.Errorf("http endpoint: %d %q", st, body)
	}
	var tl struct {
		Tunnels []tunnelDoc `json:"tunnels"`
	}
	if st := w.call("GET", "/tunnels", nil, &tl); st != 200 || len(tl.Tunnels) != 3 {
		t.Fatalf("list tunnels: %d %+v", st, tl)
	}
	labeled := false
	for _, tn := range tl.Tunnels {
		if tn.Labels["edge"] == "edghts_node" && strings.HasPrefix(tn.ForwardsTo, "http://127.0.0.1:") {
			labeled = true
		}
	}
	if !labeled {
		t.Errorf("labeled tunnel not listed: %+v", tl.Tunnels)
	}

	events = w.runNodeSDK("forward", token, "node-fwd.edgeplane.app")
	if ev := events[0]; ev.Event != "endpoint" || ev.URL != "https://node-fwd.edgeplane.app" {
		t.Fatalf("forward: %+v", events)
	}
	st, body, _ = get(t, w.httpsClient(), "https://node-fwd.edgeplane.app/fwd")
	if st != 200 || body != "node upstream host=node-fwd.edgeplane.app xff=127.0.0.1 xfp=https xfh=node-fwd.edgeplane.app path=/fwd" {
		t.Errorf("forward endpoint: %d %q", st, body)
	}

	// Refusals: the Node SDK fails at once (no retries) with the code in errorCode.
	cases := []struct{ name, mode, token, domain, stage, code string }{
		{"unknown token", "refused", token[:len(token)-4] + "AAAA", "", "connect", "ERR_NGROK_107"},
		{"malformed token", "refused", "not-a-token", "", "connect", "ERR_NGROK_105"},
		{"unreserved domain", "builder", token, "node.example.com", "listen", "ERR_NGROK_319"},
	}
	for _, c := range cases {
		ev := w.runNodeSDK(c.mode, c.token, c.domain)[0]
		if ev.Event != "error" || ev.Stage != c.stage || ev.Code != c.code {
			t.Errorf("%s: %+v, want a %s error with %s", c.name, ev, c.stage, c.code)
		}
	}
}
