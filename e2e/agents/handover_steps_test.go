package agents

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"golang.ngrok.com/ngrok/config"
)

// TestHandoverStepsPostgres measures what an agent's move to a successor is made of on
// PostgreSQL: EDGEPLANE_HANDOVER_AGENTS ngrok-go agents (half of account A, half of account B,
// one HTTP endpoint each) are served by one process, which hands over (SIGUSR2) while
// EDGEPLANE_HANDOVER_BUSY busy loops (default 2) hold the cores; the successor's log lines of
// the agents' arrival carry the time of each step (tunnel/session.go), and the test logs their
// distribution. It asserts only that every agent of both accounts is back on its own endpoint:
// the numbers are a measurement, read from the log (docs/performance.md), never a pass mark.
// It runs only when EDGEPLANE_HANDOVER_AGENTS is set: it is slow, and meant for a quiet run.
func TestHandoverStepsPostgres(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EDGEPLANE_HANDOVER_AGENTS"))
	if n <= 0 {
		t.Skip("set EDGEPLANE_HANDOVER_AGENTS to the number of agents to measure a handover's steps")
	}
	busy := 2
	if s := os.Getenv("EDGEPLANE_HANDOVER_BUSY"); s != "" {
		busy, _ = strconv.Atoi(s)
	}
	dsn := testdb.Postgres(t) // skips without EDGEPLANE_TEST_POSTGRES
	w := startOn(t, dsn, []string{testdb.SecretKeyEnvVar()}, "")
	b := w.asAccount("handover-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	urls := map[string]string{} // url -> the body its own account's agent answers
	for i := range n {
		acct, token := "a", tokenA
		if i%2 == 1 {
			acct, token = "b", tokenB
		}
		host := fmt.Sprintf("move%d-%s.edgeplane.app", i, acct)
		tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host), config.WithScheme(config.SchemeHTTP)))
		if err != nil {
			t.Fatalf("agent %d: listen %s: %v", i, host, err)
		}
		body := "account " + acct + " " + host
		serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte(body)) }))
		urls["http://"+host+"/"] = body
	}
	for i := range busy {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("busy loop %d: %v", i, err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = cmd.Wait() })
	}
	from := len(w.proc.Stderr.String())
	sent, draining := newRestarter(w).handover(t)
	online := func() int { return strings.Count(w.proc.Stderr.String()[from:], `msg="tunnel online"`) }
	deadline := time.Now().Add(120 * time.Second)
	for online() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tunnels online on the successor within 120s; stderr:\n%s", online(), n, lastBytes(w.proc.Stderr.String(), 6000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every endpoint answers with its own account's agent.
	for url, want := range urls {
		eventually(t, 20*time.Second, url+" served by its own agent", func() bool {
			st, body, err := tryGet(w.httpClient(), url)
			return err == nil && st == 200 && body == want
		})
	}
	steps := map[string][]time.Duration{}
	var last time.Time
	for _, m := range stepRE.FindAllStringSubmatch(w.proc.Stderr.String()[from:], -1) {
		kind := map[string]string{"agent session started": "session", "tunnel online": "bind"}[m[2]]
		if kind == "" {
			continue
		}
		if at, err := time.Parse("15:04:05.999999999", m[1]); err == nil {
			d := draining.UTC()
			at = time.Date(d.Year(), d.Month(), d.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.UTC)
			if at.After(last) {
				last = at
			}
			// When the agent's session started (or its bind went online), counted from the
			// old process's drain: the agents' reconnecting is in it, not only the store.
			steps[kind+" after_drain"] = append(steps[kind+" after_drain"], at.Sub(draining.UTC()))
		}
		for _, a := range stepAttrRE.FindAllStringSubmatch(m[4], -1) {
			if d, err := time.ParseDuration(a[2]); err == nil {
				steps[kind+" "+a[1]] = append(steps[kind+" "+a[1]], d)
			}
		}
	}
	var names []string
	for k := range steps {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []string
	for _, k := range names {
		out = append(out, fmt.Sprintf("%-24s %s", k, distribution(steps[k])))
	}
	after := w.proc.Stderr.String()[from:]
	t.Logf("handover of %d agents (2 accounts) under %d busy loops: draining %v after SIGUSR2, last tunnel online %v after draining; %d warnings\n%s",
		n, busy, draining.Sub(sent).Round(time.Millisecond), last.Sub(draining.UTC()).Round(time.Millisecond),
		strings.Count(after, " level=WARN "), strings.Join(out, "\n"))
}

// distribution shows the count, median, 90th and 99th percentiles and maximum of ds.
func distribution(ds []time.Duration) string {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v", len(ds), at(0.5), at(0.9), at(0.99), ds[len(ds)-1])
}
