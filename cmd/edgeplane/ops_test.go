package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// export while serving, import into a new file, serve that: the same answers, the same keys.
func TestExportImportThroughTheBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	p := startServer(t, src, "--base-url", "https://api.example.test")
	token, _ := bootstrapToken(t, p.Stderr.String())
	id := createIPPolicy(t, p, token)
	_, before := call(t, "GET", p.url("/ip_policies/"+id), token, "")

	backup, stderr, code := runBin(t, nil, "export", "--db", src)
	if code != 0 || !strings.HasPrefix(backup, `{"format":"edgeplane-backup"`) {
		t.Fatalf("export: exit %d, stderr %s, out %.100s", code, stderr, backup)
	}
	dst := filepath.Join(dir, "dst.db")
	if out, code := runStdin(t, backup, "import", "--db", dst); code != 0 {
		t.Fatalf("import: exit %d: %s", code, out)
	}
	if out, code := runStdin(t, backup, "import", "--db", dst); code == 0 || !strings.Contains(out, "not empty") {
		t.Fatalf("a second import into the same database: exit %d: %s", code, out)
	}
	q := startServer(t, dst, "--base-url", "https://api.example.test")
	if _, again := bootstrapToken(t, q.Stderr.String()); again {
		t.Fatal("a restored database was bootstrapped again")
	}
	status, after := call(t, "GET", q.url("/ip_policies/"+id), token, "")
	if status != 200 || !bytes.Equal(before, after) {
		t.Fatalf("after restore: %d\n%s\nwant\n%s", status, after, before)
	}
}

func runStdin(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv()
	cmd.Dir = t.TempDir()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), exitCode(t, err)
}

// JSON request logs carry the fields operators filter on, and never a token.
func TestJSONRequestLog(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--log-format", "json", "--log-level", "info")
	token, _ := bootstrapToken(t, p.Stderr.String())
	id := createIPPolicy(t, p, token)
	getIPPolicy(t, p, token, id)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Stderr.String(), `"route":"GET /ip_policies/{id}"`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var found bool
	for _, line := range strings.Split(p.Stderr.String(), "\n") {
		if !strings.Contains(line, `"msg":"request"`) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		if rec["route"] == "GET /ip_policies/{id}" {
			found = true
			for _, k := range []string{"operation_id", "method", "status", "duration_ms", "account_id"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("request log lacks %s: %s", k, line)
				}
			}
			if rec["account_id"] == "" || rec["status"] != float64(200) {
				t.Errorf("request log: %s", line)
			}
		}
	}
	if !found {
		t.Fatalf("no request line for GET /ip_policies/{id}:\n%s", p.Stderr)
	}
	secret := token[strings.Index(token, "_")+1:]
	if strings.Count(p.Stderr.String(), secret) != 1 { // once: the bootstrap message itself
		t.Fatal("the token's secret appears in the log beyond the one-time bootstrap message")
	}
	for _, bad := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		if _, stderr, code := runBin(t, nil, append([]string{"serve", "--db", filepath.Join(t.TempDir(), "x.db"), "--listen", "127.0.0.1:0"}, bad...)...); code == 0 || !strings.Contains(stderr, bad[0]) {
			t.Errorf("%v: exit %d, %s", bad, code, stderr)
		}
	}
}

func TestMetricsListen(t *testing.T) {
	t.Parallel()
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--metrics-listen", "127.0.0.1:0")
	ln := metricsListenAddr(t, p)
	res, err := client.Get("http://" + ln + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "edgeplane_http_requests_in_flight") {
		t.Fatalf("/metrics on --metrics-listen: %d", res.StatusCode)
	}
	if res, err := client.Get(p.url("/metrics")); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics on the main listener with --metrics-listen set: %v %v", err, res)
	}
}

var metricsListeningRE = regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)

// metricsListenAddr is the address the server's --metrics-listen 127.0.0.1:0 was given, from its log
// (written before the API listens, so before startServer returns). A port picked beforehand and
// bound by the server later may be taken meanwhile by any test's outgoing connection.
func metricsListenAddr(t *testing.T, p *proc) string {
	t.Helper()
	m := metricsListeningRE.FindStringSubmatch(p.Stderr.String())
	if m == nil {
		t.Fatalf("no metrics listening line; stderr:\n%s", p.Stderr)
	}
	return m[1]
}
