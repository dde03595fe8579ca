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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/pebbletest"
)

// ngrokAgentBin is the ngrok agent 2.3.41 that the npm package @expo/ngrok-bin-linux-x64 ships
// (an optional dependency in node/package.json: it installs on linux/amd64 only). No npm package
// ships a v3 agent, so v3 is not tested here.
const ngrokAgentBin = "node_modules/@expo/ngrok-bin-linux-x64/ngrok"

// ngrokAgentConfig is an agent configuration (format of the 2.x agent) pointed at the world: its
// agent listener, edgeplane's CA and token, one http tunnel for hostname forwarding to upstream
// (bind_tls both: an https and an http endpoint), and the web interface on webAddr ("": none).
func (w *world) ngrokAgentConfig(token, hostname, upstream, webAddr string) string {
	w.t.Helper()
	dir := w.t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, w.caPEM, 0o600); err != nil {
		w.t.Fatal(err)
	}
	if webAddr == "" {
		webAddr = "false"
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

// agentProc is a running ngrok agent binary: its output so far, and done, closed once it has
// exited with err.
type agentProc struct {
	out  *lockedBuffer
	done chan struct{}
	err  error
}

// runNgrokAgent starts the agent binary with the configuration file config; it is interrupted
// (killed after 5 s) when the test ends.
func runNgrokAgent(t *testing.T, bin, config string) *agentProc {
	t.Helper()
	cmd := exec.Command(bin, "start", "--all", "--config", config)
	p := &agentProc{out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// startedTunnel is the agent's log line for each endpoint once its Bind is answered.
var startedTunnel = regexp.MustCompile(`msg="started tunnel".* url=(\S+)`)

// startNgrokAgentBin runs the ngrok agent 2.x with one http tunnel for hostname (https and http
// endpoints) forwarding to upstream, connected to w's agent listener, and waits until it has
// started both; it stops with the test. With web, the agent serves its local API, whose address
// it returns: the port is one that was free a moment ago, below the ephemeral range, and where it
// was taken meanwhile (the agent then exits with "address already in use") the agent is started
// again on another.
func startNgrokAgentBin(t *testing.T, w *world, token, hostname, upstream string, web bool) (webAddr string) {
	t.Helper()
	bin := ngrokAgent(t)
	for range 5 {
		webAddr = ""
		if web {
			webAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(pebbletest.FreePort(t)))
		}
		p := runNgrokAgent(t, bin, w.ngrokAgentConfig(token, hostname, upstream, webAddr))
		if p.waitStarted(t, w, webAddr) {
			return webAddr
		}
	}
	t.Fatal("the agent's web port was taken five times in a row")
	return ""
}

// waitStarted waits until the agent has started both endpoints (true), or has exited because
// its web port webAddr was taken before it bound it (false); it fails the test otherwise.
func (p *agentProc) waitStarted(t *testing.T, w *world, webAddr string) bool {
	t.Helper()
	deadline := time.Now().Add(eventuallyFloor)
	for len(startedTunnel.FindAllString(p.out.String(), -1)) < 2 {
		select {
		case <-p.done:
			if webAddr != "" && strings.Contains(p.out.String(), webAddr+": bind: address already in use") {
				return false
			}
			server := ""
			if w.proc != nil {
				server = "\nserver:\n" + w.proc.Stderr.String()
			}
			t.Fatalf("the agent exited; its output:\n%s%s", p.out, server)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent started no tunnels within %v; its output:\n%s", eventuallyFloor, p.out)
		}
	}
	return true
}

// TestNgrokAgentV2: the ngrok agent binary (2.3.41), configured with server_addr, root_cas and
// authtoken, starts an http tunnel (https and http endpoints) on a name under the service
// domain, and public requests through both listeners reach the local app; the agent's own API
// shows the public URLs edgeplane gave it.
func TestNgrokAgentV2(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	app := httptest.NewServer(http.HandlerFunc(hello))
	t.Cleanup(app.Close)
	webAddr := startNgrokAgentBin(t, w, token, "agent.edgeplane.app", app.URL, true)

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
		// No web interface: the agent must exit for the refusal alone, never for a taken port.
		p := runNgrokAgent(t, bin, w.ngrokAgentConfig(c.token, c.hostname, "127.0.0.1:9", ""))
		select {
		case <-p.done:
			if p.err == nil {
				t.Errorf("%s: the agent exited with status 0", c.name)
			}
		case <-time.After(eventuallyFloor):
			t.Errorf("%s: the agent did not exit within %v", c.name, eventuallyFloor)
		}
		if !regexp.MustCompile(`lvl=crit msg="command failed" err=".*\\r\\n\\r\\n` + c.code + `\\r\\n"`).MatchString(p.out.String()) {
			t.Errorf("%s: want the agent to fail with %s; its output:\n%s", c.name, c.code, p.out)
		}
	}
}
