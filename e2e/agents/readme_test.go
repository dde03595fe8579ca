//go:build unix

package agents

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/pebbletest"
	"github.com/edgeplane/edgeplane/internal/testproc"
)

// The README's "Your first tunnel" runs here as a newcomer would run it: the snippets marked
// `<!-- snippet: NAME -->` in README.md are read from the file, not copied, so an edit that breaks
// one fails this test. Only the ports change (each listener of the test's server is on a port of
// its own, and the app's on a free one), and `go run ./cmd/edgeplane` is the built binary.

// readmeSnippet is a fenced code block of README.md marked as a snippet.
type readmeSnippet struct {
	lang, text string
	line       int // where the block starts, for messages
}

var snippetMarkRE = regexp.MustCompile(`^<!-- snippet: ([a-z0-9-]+) -->$`)

// readmeSnippets returns the README's marked snippets by name. A marker must be followed at once
// by a fenced block with a language, and a name may be used once.
func readmeSnippets(t *testing.T) map[string]readmeSnippet {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]readmeSnippet{}
	sc := bufio.NewScanner(f)
	n, name := 0, ""
	var cur *readmeSnippet
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			out[name], cur, name = *cur, nil, ""
		case cur != nil:
			cur.text += line + "\n"
		case name != "":
			lang, ok := strings.CutPrefix(line, "```")
			if !ok || lang == "" {
				t.Fatalf("README.md:%d: the snippet %q is not followed by a fenced block with a language", n, name)
			}
			cur = &readmeSnippet{lang: lang, line: n}
		default:
			if m := snippetMarkRE.FindStringSubmatch(line); m != nil {
				if _, dup := out[m[1]]; dup {
					t.Fatalf("README.md:%d: a second snippet named %q", n, m[1])
				}
				name = m[1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if name != "" {
		t.Fatalf("README.md: the snippet %q does not end", name)
	}
	return out
}

// appPage is what the README's app serves.
const appPage = "hello from the app\n"

// readmePortRE matches the default ports the README's snippets use: the API, the agent listener,
// public HTTP and HTTPS, and the app's.
var readmePortRE = regexp.MustCompile(`\b(8080|4443|8081|8443|3000)\b`)

// TestReadmeSnippets: the README's walkthrough, run against a real server: the app on its port,
// the credential and the CA from the setup snippet, then each agent snippet in turn (ngrok-go v2
// built as its own module, the Node SDK, the ngrok agent 2.x), each followed by the README's
// public requests, which must reach the app through the agent; and each agent must keep running
// until it is stopped.
func TestReadmeSnippets(t *testing.T) {
	snippets := readmeSnippets(t)
	want := map[string]string{"app": "sh", "setup": "sh", "agent-go": "go", "agent-node": "js", "agent-ngrok2": "sh", "request": "sh"}
	for name, lang := range want {
		s, ok := snippets[name]
		if !ok {
			t.Fatalf("README.md has no snippet %q", name)
		}
		if s.lang != lang {
			t.Errorf("README.md:%d: the snippet %q is %q, want %q", s.line, name, s.lang, lang)
		}
		// An agent given "localhost" makes the 2.x agent try DNS over HTTPS when it reconnects.
		if strings.Contains(s.text, "localhost") {
			t.Errorf("README.md:%d: the snippet %q names localhost; use 127.0.0.1", s.line, name)
		}
	}
	for _, name := range []string{"agent-go", "agent-node", "agent-ngrok2"} {
		if s := snippets[name].text; !strings.Contains(s, "127.0.0.1:4443") || !strings.Contains(s, "127.0.0.1:3000") {
			t.Errorf("the snippet %q does not connect to 127.0.0.1:4443 and forward to 127.0.0.1:3000", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("skipped: curl is not installed, and the README's snippets use it")
	}

	w := start(t)
	dir := t.TempDir()
	appPort := strconv.Itoa(pebbletest.FreePort(t))
	ports := map[string]string{"8080": portOf(t, w.api), "4443": portOf(t, w.agent), "8081": portOf(t, w.http),
		"8443": portOf(t, w.https), "3000": appPort}
	localize := func(s string) string {
		s = readmePortRE.ReplaceAllStringFunc(s, func(p string) string { return ports[p] })
		return strings.ReplaceAll(s, "go run ./cmd/edgeplane", binPath)
	}

	// 1. The app: the README's, or where python3 is missing a Go server doing the same.
	appAddr := "127.0.0.1:" + appPort
	if _, err := exec.LookPath("python3"); err == nil {
		startSnippet(t, dir, nil, "app", localize(snippets["app"].text))
	} else {
		t.Logf("python3 is not installed: a Go server stands in for the README's app on %s", appAddr)
		ln, err := net.Listen("tcp", appAddr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, appPage)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
	}
	eventually(t, 5*time.Second, "the app listening on "+appAddr, func() bool {
		c, err := net.Dial("tcp", appAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	// 2. The credential and the CA. The README runs it in the repository, where serve's
	// edgeplane.db is; here EDGEPLANE_DB names the test server's database.
	setup := localize(snippets["setup"].text) + "printf 'NGROK_AUTHTOKEN=%s\\n' \"$NGROK_AUTHTOKEN\"\n"
	cmd := exec.Command("sh", "-c", setup)
	cmd.Dir, cmd.Env = dir, testproc.CleanEnv("TOKEN="+w.token, "EDGEPLANE_DB="+w.db)
	out, err := cmd.CombinedOutput()
	authtoken, _ := strings.CutPrefix(strings.TrimSpace(string(out)), "NGROK_AUTHTOKEN=")
	if err != nil || authtoken == "" || strings.ContainsAny(authtoken, " \n") {
		t.Fatalf("the setup snippet: %v; output:\n%s", err, out)
	}
	if ca, err := os.ReadFile(filepath.Join(dir, "edgeplane-ca.pem")); err != nil || string(ca) != string(w.caPEM) {
		t.Fatalf("the setup snippet did not write edgeplane's CA to edgeplane-ca.pem: %v", err)
	}
	agentEnv := []string{"NGROK_AUTHTOKEN=" + authtoken}
	// The agents run in a directory of their own holding the CA, as the README says.
	agentDir := filepath.Join(dir, "agent")
	if err := os.Mkdir(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agentDir, "edgeplane-ca.pem"), w.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}

	// 3 and 4, for each agent in turn: they all publish the same name.
	agents := []struct {
		name    string
		prepare func(t *testing.T) (argv []string, env []string) // skips the test when the agent is not at hand
	}{
		{"agent-go", func(t *testing.T) ([]string, []string) {
			return []string{buildReadmeGo(t, localize(snippets["agent-go"].text))}, nil
		}},
		{"agent-node", func(t *testing.T) ([]string, []string) {
			modules := filepath.Join(npmInstall(t), "node_modules")
			node, err := exec.LookPath("node")
			if err != nil {
				t.Skip("skipped: node is not installed")
			}
			if err := os.Symlink(modules, filepath.Join(agentDir, "node_modules")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(agentDir, "agent.js"), []byte(localize(snippets["agent-node"].text)), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{node, "agent.js"}, nil
		}},
		{"agent-ngrok2", func(t *testing.T) ([]string, []string) {
			bin := ngrokAgent(t)
			return []string{"sh", "-c", localize(snippets["agent-ngrok2"].text)},
				[]string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
		}},
	}
	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			argv, env := a.prepare(t)
			p := startProcess(t, agentDir, append(env, agentEnv...), argv...)
			eventually(t, 10*time.Second, a.name+": the app through the public HTTPS listener", func() bool {
				if p.exited() {
					t.Fatalf("%s exited; its output:\n%s", a.name, p.out)
				}
				st, body, err := tryGet(w.httpsClient(), "https://app.edgeplane.app/")
				return err == nil && st == 200 && body == appPage
			})
			req := exec.Command("sh", "-c", localize(snippets["request"].text))
			req.Dir = agentDir
			out, err := req.Output()
			pages := strings.Count(string(out), appPage)
			if err != nil || pages < 1 {
				t.Errorf("the request snippet: %v; output:\n%s", err, out)
			}
			if a.name == "agent-ngrok2" && pages != 2 {
				t.Errorf("the request snippet through the 2.x agent's http and https endpoints; output:\n%s", out)
			}
			if p.exited() {
				t.Fatalf("%s exited after the requests; its output:\n%s", a.name, p.out)
			}
			// Each says where it forwards; the 2.x agent, without a terminal, only with -log=stdout.
			said := "forwarding https://app.edgeplane.app"
			if a.name == "agent-ngrok2" {
				said = `msg="started tunnel" obj=tunnels name=command_line addr=http://127.0.0.1:` + appPort + ` url=https://app.edgeplane.app`
			}
			if !strings.Contains(p.out.String(), said) {
				t.Errorf("%s did not say %q; its output:\n%s", a.name, said, p.out)
			}
			p.stop()
			eventually(t, 5*time.Second, a.name+": its tunnels gone from the API", func() bool {
				var tunnels struct{ Tunnels []any }
				return w.call("GET", "/tunnels", nil, &tunnels) == 200 && len(tunnels.Tunnels) == 0
			})
		})
	}
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// buildReadmeGo builds the README's Go program as a module of its own, as the README tells a
// reader to: its go.mod requires what this repository's does, so the build uses the versions (and
// the module cache) of the repository's own ngrok-go v2 tests.
func buildReadmeGo(t *testing.T, src string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipped: the go command is not on PATH")
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("../../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	modDir := t.TempDir()
	gomod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(mod), "module readmeagent")
	for name, data := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": src} {
		if err := os.WriteFile(filepath.Join(modDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(modDir, "agent")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Dir = modDir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the README's Go program: %v\n%s", err, out)
	}
	return bin
}

// snippetProcess is a process a snippet started, in a process group of its own, so that stopping
// it stops what its shell started too.
type snippetProcess struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

func (p *snippetProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after 5 s.
func (p *snippetProcess) stop() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// startProcess starts argv in dir with the extra environment, and stops it when the test ends.
func startProcess(t *testing.T, dir string, env []string, argv ...string) *snippetProcess {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &snippetProcess{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

// startSnippet runs a shell snippet that keeps running (a server) until the test ends.
func startSnippet(t *testing.T, dir string, env []string, name, text string) *snippetProcess {
	t.Helper()
	p := startProcess(t, dir, env, "sh", "-c", text)
	t.Cleanup(func() {
		if p.exited() && t.Failed() {
			t.Logf("the %s snippet's output:\n%s", name, p.out)
		}
	})
	return p
}
