package agents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// bulkSize is the download of TestBulkDownloadEveryClient: enough for a stream whose public
// client keeps up to grow its window to the cap (tunnel/window.go) several times over.
const bulkSize = 48 << 20

// bulkPattern fills p with the bytes of a /bulk answer from offset off on: the i-th is i % 251,
// as the Node app (node/sdk.js) writes them.
func bulkPattern(p []byte, off int) {
	for i := range p {
		p[i] = byte((off + i) % 251)
	}
}

// bulkDigest is the SHA-256 of a /bulk answer of n bytes.
func bulkDigest(n int) string {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for off := 0; off < n; off += len(buf) {
		k := min(len(buf), n-off)
		bulkPattern(buf[:k], off)
		h.Write(buf[:k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bulkHandler answers /bulk/N as the Node app does.
func bulkHandler(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bulk/"))
	if err != nil || n < 0 {
		http.Error(w, "bad size", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	buf := make([]byte, 64<<10)
	for off := 0; off < n; off += len(buf) {
		k := min(len(buf), n-off)
		bulkPattern(buf[:k], off)
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
	}
}

// TestBulkDownloadEveryClient: a large download through each kind of agent arrives whole, with
// edgeplane's auto-tuned proxy stream windows on (--agent-window-budget-mib, on by default): ngrok-go v1 and v2 and the 2.x
// agent binary, whose muxado uses credit beyond its own window and so get grown windows, and the
// Node SDK (ngrok-rust's muxado, which caps its window at its own 256 KiB), kept at 256 KiB. With
// every client allowed to grow, all four completed too, and the Node SDK's window never grew
// past one doubling: credit beyond its window is dropped, not refused. The agents
// belong to two accounts, downloading at the same time, so one account's grown windows share
// the process's budget with the other's streams.
func TestBulkDownloadEveryClient(t *testing.T) {
	w := start(t)
	b := w.asAccount("bulk-b")
	_, tokenA := w.credential()
	_, tokenB := b.credential()
	app := httptest.NewServer(http.HandlerFunc(bulkHandler))
	t.Cleanup(app.Close)
	want := bulkDigest(bulkSize)

	names := map[string]string{}
	sess := w.mustConnect(tokenA)
	if err := listenBulk(t, sess, "bulk-v1.edgeplane.app"); err != nil {
		t.Fatalf("ngrok-go v1 (account A): %v", err)
	}
	names["ngrok-go v1 (A)"] = "bulk-v1.edgeplane.app"
	if ev := b.gov2Agent(tokenB, "-url", "https://bulk-v2.edgeplane.app", "-upstream", app.URL); ev.Event != "endpoint" {
		t.Fatalf("ngrok-go v2 (account B): %+v", ev)
	}
	names["ngrok-go v2 (B)"] = "bulk-v2.edgeplane.app"
	// The Node SDK and the agent binary come from npm: where it cannot install, their
	// downloads are left out and the Go clients' still run.
	if npmUsable(t) {
		if ev := w.runNodeSDK("forward", tokenA, "bulk-node.edgeplane.app")[0]; ev.Event != "endpoint" {
			t.Fatalf("Node SDK (account A): %+v", ev)
		}
		names["Node SDK (A)"] = "bulk-node.edgeplane.app"
		startNgrokAgentBin(t, b, tokenB, "bulk-agent.edgeplane.app", app.URL, false)
		names["agent 2.x (B)"] = "bulk-agent.edgeplane.app"
	}

	client := w.httpsClient()
	client.Timeout = 2 * time.Minute // a stream stalled on credit fails here, not at the test's end
	errs := make(chan error, len(names))
	for who, name := range names {
		go func() {
			resp, err := client.Get(fmt.Sprintf("https://%s/bulk/%d", name, bulkSize))
			if err != nil {
				errs <- fmt.Errorf("%s: %v", who, err)
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			switch got := hex.EncodeToString(h.Sum(nil)); {
			case err != nil:
				errs <- fmt.Errorf("%s: %d bytes, then %v", who, n, err)
			case resp.StatusCode != 200 || n != bulkSize || got != want:
				errs <- fmt.Errorf("%s: %d, %d bytes, digest %s, want %d bytes, %s", who, resp.StatusCode, n, got, bulkSize, want)
			default:
				errs <- nil
			}
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// listenBulk binds an https endpoint for name on sess answering /bulk/N.
func listenBulk(t *testing.T, sess ngrok.Session, name string) error {
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name)))
	if err != nil {
		return err
	}
	serveTunnel(t, tun, http.HandlerFunc(bulkHandler))
	return nil
}

// npmUsable reports whether the Node SDK and the agent binary can run here, logging why not.
func npmUsable(t *testing.T) bool {
	npmOnce.Do(func() { npmErr = npmCIOnce("node") })
	_, nodeErr := exec.LookPath("node")
	switch {
	case npmErr != "":
		t.Logf("the Node SDK and the agent binary are left out: %s", npmErr)
	case nodeErr != nil:
		t.Logf("the Node SDK and the agent binary are left out: node is not installed")
	case runtime.GOOS != "linux" || runtime.GOARCH != "amd64":
		t.Logf("the Node SDK and the agent binary are left out: the agent's npm package is for linux/amd64")
	default:
		return true
	}
	return false
}
