package agents

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
)

// latencyRTT is the round trip of the relay between the agents and edgeplane in
// TestBulkAcrossLatency: an agent in a neighbouring region. A stream whose window stays at the
// agents' 256 KiB carries at most 256 KiB per round trip there, 6.5 MB/s.
const latencyRTT = 40 * time.Millisecond

// fixedWindowCeiling is the most MB/s a stream with the agents' 256 KiB window carries across
// latencyRTT, whatever the machine.
var fixedWindowCeiling = float64(256<<10) / latencyRTT.Seconds() / 1e6

// TestBulkAcrossLatency: two accounts' ngrok-go agents reach edgeplane through a relay with a
// 40 ms round trip and download 32 MiB each at the same time, checksummed, once with the proxy
// window budget at 0 (every window 256 KiB) and once at edgeplane's default. With the budget the
// windows grow, the budget in use never passes the budget, and no account holds more than one
// stream's growth (4 MiB less the base): the bounds on memory per stream, per account and per
// process. The rates are logged, not asserted (on a loaded machine the CPU, not the window, may
// bound them; docs/performance.md has measured pairs). The Node SDK (ngrok-rust's muxado, which
// drops credit past its own window) downloads through the same relay first, whole, and takes
// none of the budget.
func TestBulkAcrossLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: about a minute of downloads across a delayed link")
	}
	const size = 32 << 20
	const maxGrowth = 4<<20 - 256<<10 // one stream's window beyond the agents' 256 KiB
	want := bulkDigest(size)
	for _, budget := range []string{"0", ""} {
		var args []string
		if budget != "" {
			args = []string{"--agent-window-budget-mib", budget}
		}
		w := start(t, args...)
		relay := newDelayRelay(t, w.agent, latencyRTT)
		b := w.asAccount("latency-b")
		_, tokenA := w.credential()
		_, tokenB := b.credential()
		limit := w.metrics().value(`edgeplane_agent_window_budget_bytes`)
		if (budget == "0") != (limit == 0) {
			t.Fatalf("--agent-window-budget-mib %q: the budget is %v bytes", budget, limit)
		}

		if limit > 0 && npmUsable(t) {
			if ev := w.runNodeSDKVia(relay.addr, "forward", tokenA, "latency-node.edgeplane.app")[0]; ev.Event != "endpoint" {
				t.Fatalf("Node SDK through the relay: %+v", ev)
			}
			const nodeSize = 8 << 20
			rate, err := bulkGet(w, "latency-node.edgeplane.app", nodeSize, bulkDigest(nodeSize))
			if err != nil {
				t.Fatalf("Node SDK through the relay: %v", err)
			}
			t.Logf("budget %v: the Node SDK's download across %v: %.1f MB/s (a 256 KiB window carries at most %.1f)", limit, latencyRTT, rate, fixedWindowCeiling)
			if held := w.metrics().value(`edgeplane_agent_window_held_peak_bytes`); held != 0 {
				t.Errorf("the Node SDK's download took %v bytes of the budget; its agent drops such credit", held)
			}
		}

		hosts := map[string]string{"A": "latency-a.edgeplane.app", "B": "latency-b.edgeplane.app"}
		for acct, token := range map[string]string{"A": tokenA, "B": tokenB} {
			ctx, cancel := context.WithCancel(context.Background())
			sess, err := w.connect(ctx, token, ngrok.WithServer(relay.addr))
			if err != nil {
				cancel()
				t.Fatalf("account %s through the relay: %v", acct, err)
			}
			t.Cleanup(func() { sess.Close(); cancel() })
			if err := listenBulk(t, sess, hosts[acct]); err != nil {
				t.Fatalf("account %s: %v", acct, err)
			}
		}
		before := vmHWM(t, w.proc.Cmd.Process.Pid)
		type result struct {
			acct string
			rate float64
			err  error
		}
		results := make(chan result, len(hosts))
		for acct, host := range hosts {
			go func() {
				rate, err := bulkGet(w, host, size, want)
				results <- result{acct, rate, err}
			}()
		}
		rates := map[string]float64{}
		for range hosts {
			r := <-results
			if r.err != nil {
				t.Fatalf("budget %v, account %s: %v", limit, r.acct, r.err)
			}
			rates[r.acct] = r.rate
		}
		m := w.metrics()
		peak, accountPeak := m.value(`edgeplane_agent_window_held_peak_bytes`), m.value(`edgeplane_agent_window_account_peak_bytes`)
		t.Logf("budget %v bytes: across %v, account A %.1f MB/s and B %.1f MB/s at once (a 256 KiB window carries at most %.1f); "+
			"budget held at most %v bytes, one account %v; edgeplane's peak RSS %d → %d MiB",
			limit, latencyRTT, rates["A"], rates["B"], fixedWindowCeiling, peak, accountPeak, before>>20, vmHWM(t, w.proc.Cmd.Process.Pid)>>20)
		if limit == 0 {
			continue
		}
		switch {
		case peak == 0:
			t.Errorf("no window grew")
		case peak > limit:
			t.Errorf("the budget of %v bytes held %v", limit, peak)
		case accountPeak > maxGrowth:
			t.Errorf("an account with one download held %v bytes of the budget, past one stream's growth (%d)", accountPeak, maxGrowth)
		}
		// The two grown streams were closed when their answers ended (a stream holding budget
		// is not kept idle); whatever a stream still holds stays within its growth.
		if held := m.value(`edgeplane_agent_window_held_bytes`); held > 2*maxGrowth {
			t.Errorf("after the downloads, %v bytes of the budget are held, past the two streams' growth", held)
		}
	}
}

// bulkGet downloads /bulk/size from host through edgeplane's TLS listener, checks its digest
// and returns its rate in MB/s.
func bulkGet(w *world, host string, size int, want string) (float64, error) {
	client := w.httpsClient()
	client.Timeout = 3 * time.Minute
	start := time.Now()
	resp, err := client.Get(fmt.Sprintf("https://%s/bulk/%d", host, size))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	el := time.Since(start)
	switch got := hex.EncodeToString(h.Sum(nil)); {
	case err != nil:
		return 0, fmt.Errorf("%d bytes, then %v", n, err)
	case resp.StatusCode != 200 || n != int64(size) || got != want:
		return 0, fmt.Errorf("%d, %d bytes, digest %s, want %d bytes, %s", resp.StatusCode, n, got, size, want)
	}
	return float64(size) / el.Seconds() / 1e6, nil
}

// vmHWM is a process's peak resident memory (VmHWM in /proc), in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
