package agents

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestGrownStreamNotKeptIdle: account A downloads through an ngrok-go agent over one keep-alive
// public connection, and the proxy stream's window grows out of the window budget. Once the
// answer is over, the budget is free again (nothing held, no account holding) while A's public
// connection stays open: the stream, which would have waited idle in the proxy's pool for the
// connection's next request holding its share for up to the pool's 30 s, is closed instead.
// A's next request on the same connection is answered (on a new stream). Account B's download
// afterwards grows out of the budget as the only holder: the budget never held more than one
// account's share (half), which it would have with A's idle stream still charged beside B's.
func TestGrownStreamNotKeptIdle(t *testing.T) {
	const budgetMiB = 4
	const limit = budgetMiB << 20
	w := start(t, "--agent-window-budget-mib", fmt.Sprint(budgetMiB), "--public-idle-timeout", "2m")
	b := w.asAccount("pool-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	hosts := map[string]string{"A": "pool-a.edgeplane.app", "B": "pool-b.edgeplane.app"}
	for acct, token := range map[string]string{"A": tokenA, "B": tokenB} {
		if err := listenBulk(t, w.mustConnect(token), hosts[acct]); err != nil {
			t.Fatalf("account %s: %v", acct, err)
		}
	}
	const size = 32 << 20
	want := bulkDigest(size)
	download := func(c *http.Client, acct string) {
		t.Helper()
		resp, err := c.Get(fmt.Sprintf("https://%s/bulk/%d", hosts[acct], size))
		if err != nil {
			t.Fatalf("account %s: %v", acct, err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		if got := hex.EncodeToString(h.Sum(nil)); err != nil || resp.StatusCode != 200 || n != size || got != want {
			t.Fatalf("account %s: %d, %d bytes (%v), digest %s, want %d bytes, %s", acct, resp.StatusCode, n, err, got, size, want)
		}
	}

	// One connection for all of A's requests: its stream would be the one kept for the next.
	a := w.httpsClient()
	a.Timeout = 2 * time.Minute
	a.Transport.(*http.Transport).MaxConnsPerHost = 1
	defer a.CloseIdleConnections()
	for try := 1; ; try++ {
		download(a, "A")
		// A window grows only while the public client keeps up; on a loaded machine it may
		// not in one download.
		if w.metrics().value(`edgeplane_agent_window_account_peak_bytes`) > 0 {
			break
		}
		if try == 5 {
			t.Fatalf("A's window did not grow in %d downloads", try)
		}
	}
	eventually(t, 5*time.Second, "the window budget free with A's connection still open", func() bool {
		m := w.metrics()
		return m.value(`edgeplane_agent_window_held_bytes`) == 0 && m.value(`edgeplane_agent_window_accounts`) == 0
	})
	if st, body, _ := get(t, a, "https://"+hosts["A"]+"/bulk/5"); st != 200 || len(body) != 5 {
		t.Fatalf("A's next request on its connection: %d %q", st, body)
	}

	bc := w.httpsClient()
	bc.Timeout = 2 * time.Minute
	defer bc.CloseIdleConnections()
	download(bc, "B")
	if peak := w.metrics().value(`edgeplane_agent_window_held_peak_bytes`); peak > limit/2 {
		t.Fatalf("the budget held %v bytes at once, more than one account's share (%d): A's idle stream kept its share beside B's", peak, limit/2)
	}
	eventually(t, 5*time.Second, "the window budget free after B's download", func() bool {
		return w.metrics().value(`edgeplane_agent_window_held_bytes`) == 0
	})
}
