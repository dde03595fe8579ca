package agents

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// ngrokAgentBin is the ngrok agent 2.3.41 that the npm package @expo/ngrok-bin-linux-x64 ships
// (an optional dependency in node/package.json: it installs on linux/amd64 only). No npm package
// ships a v3 agent, so v3 is not tested here.
const ngrokAgentBin = "node_modules/@expo/ngrok-bin-linux-x64/ngrok"

// ngrokAgentConfig is an agent configuration (format of the 2.x agent) pointed at the world: its
// agent listener, edgeplane's CA and token, one http tunnel for hostname forwarding to upstream
// (bind_tls both: an https and an http endpoint), and the web interface on webAddr.
func (w *world) ngrokAgentConfig(token, hostname, upstream, webAddr string) string {
	w.t.Helper()
	dir := w.t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, w.caPEM, 0o600); err != nil {
		w.t.Fatal(err)
	}
	config := fmt.Sprintf(`authtoken: %s
server_addr: %s
root_cas: %s
update_check: false
console_ui: false
web_addr: %s
log: stdout
log_level: info
tunnels:
  app:
    proto: http
    addr: %s
    hostname: %s
    bind_tls: both
`, token, w.agent, caFile, webAddr, upstream, hostname)
	path := filepath.Join(dir, "ngrok.yml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// ngrokAgent returns the agent binary's path, or skips t where it cannot be installed.
func ngrokAgent(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("skipped: the ngrok agent's npm package is for linux/amd64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	bin := filepath.Join(npmInstall(t), ngrokAgentBin)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipped: npm ci did not install the ngrok agent: %v", err)
	}
	return bin
}

// freeLoopbackAddr is a loopback address with a port nothing listens on at the moment.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestNgrokAgentV2: the ngrok agent binary (2.3.41), configured with server_addr, root_cas and
// authtoken, starts an http tunnel (https and http endpoints) on a name under the service
// domain, and public requests through both listeners reach the local app; the agent's own API
// shows the public URLs edgeplane gave it.
func TestNgrokAgentV2(t *testing.T) {
	bin := ngrokAgent(t)
	w := start(t)
	_, token := w.credential()
	app := httptest.NewServer(http.HandlerFunc(hello))
	t.Cleanup(app.Close)
	webAddr := freeLoopbackAddr(t)
	config := w.ngrokAgentConfig(token, "agent.edgeplane.app", app.URL, webAddr)
	cmd := exec.Command(bin, "start", "--all", "--config", config)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})

	// The agent logs "started tunnel" for each endpoint once its Binds are answered.
	started := regexp.MustCompile(`msg="started tunnel".* url=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for len(started.FindAllString(out.String(), -1)) < 2 {
		select {
		case <-done:
			t.Fatalf("the agent exited; its output:\n%s\nserver:\n%s", out, w.proc.Stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent started no tunnels within 20s; its output:\n%s", out)
		}
	}

	st, body, _ := get(t, w.httpsClient(), "https://agent.edgeplane.app/over/https")
	if st != 200 || !strings.HasPrefix(body, "hello host=agent.edgeplane.app xff=127.0.0.1 xfp=https xfh=agent.edgeplane.app path=/over/https") {
		t.Errorf("https endpoint: %d %q", st, body)
	}
	st, body, _ = get(t, w.httpClient(), "http://agent.edgeplane.app/over/http")
	if st != 200 || !strings.HasPrefix(body, "hello host=agent.edgeplane.app xff=127.0.0.1 xfp=http xfh=agent.edgeplane.app path=/over/http") {
		t.Errorf("http endpoint: %d %q", st, body)
	}

	var tunnels struct {
		Tunnels []struct {
			PublicURL string `json:"public_url"`
			Proto     string `json:"proto"`
		} `json:"tunnels"`
	}
	resp, err := http.Get("http://" + webAddr + "/api/tunnels")
	if err != nil {
		t.Fatalf("the agent's API: %v", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&tunnels); err != nil {
		t.Fatalf("the agent's /api/tunnels: %v", err)
	}
	urls := map[string]string{}
	for _, tn := range tunnels.Tunnels {
		urls[tn.PublicURL] = tn.Proto
	}
	if urls["https://agent.edgeplane.app"] != "https" || urls["http://agent.edgeplane.app"] != "http" || len(urls) != 2 {
		t.Errorf("the agent's tunnels: %+v", tunnels.Tunnels)
	}
}

// TestNgrokAgentV2Refusals: the agent binary exits at the first refusal and prints its code: an
// unknown token (107) and a hostname its account did not reserve (319).
func TestNgrokAgentV2Refusals(t *testing.T) {
	bin := ngrokAgent(t)
	w := start(t)
	_, token := w.credential()
	cases := []struct{ name, token, hostname, code string }{
		{"unknown token", token[:len(token)-4] + "AAAA", "agent.edgeplane.app", "ERR_NGROK_107"},
		{"unreserved hostname", token, "agent.example.com", "ERR_NGROK_319"},
	}
	for _, c := range cases {
		config := w.ngrokAgentConfig(c.token, c.hostname, "127.0.0.1:9", freeLoopbackAddr(t))
		cmd := exec.Command(bin, "start", "--all", "--config", config)
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the agent: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err == nil {
				t.Errorf("%s: the agent exited with status 0", c.name)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s: the agent did not exit within 15s", c.name)
		}
		if !regexp.MustCompile(`lvl=crit msg="command failed" err=".*\\r\\n\\r\\n` + c.code + `\\r\\n"`).MatchString(out.String()) {
			t.Errorf("%s: want the agent to fail with %s; its output:\n%s", c.name, c.code, out)
		}
	}
}
