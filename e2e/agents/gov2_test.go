package agents

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testproc"
)

// The ngrok-go v2 agent runs as its own process (gov2agent/): linked into this package's test
// binary beside ngrok-go v1, it panics at start (both register internal/pb/middleware.proto).

// gov2Event is one line that gov2agent prints.
type gov2Event struct {
	Event, Stage, Code, Message, URL string
}

// gov2Agent runs gov2agent against the world with token and the extra flags, and returns its
// first event that is an endpoint or an error. The process ends with the test.
func (w *world) gov2Agent(token string, flags ...string) gov2Event {
	w.t.Helper()
	bin, cleanup, err := testproc.Build("./gov2agent")
	if err != nil {
		w.t.Fatalf("build gov2agent: %v", err)
	}
	w.t.Cleanup(cleanup)
	caFile := filepath.Join(w.t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, w.caPEM, 0o600); err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-server", w.agent, "-ca", caFile, "-token", token}, flags...)...)
	stdout, stderr := w.startClient(cmd, "gov2agent")
	events := make(chan gov2Event, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev gov2Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		close(events)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				w.t.Fatalf("gov2agent exited without a result; stderr:\n%s", stderr.String())
			}
			if ev.Event == "endpoint" || ev.Event == "error" {
				return ev
			}
		case <-timeout:
			w.t.Fatalf("gov2agent: no result within 30s; stderr:\n%s", stderr.String())
		}
	}
}

// TestGoV2HTTPSEndpoint: ngrok-go v2 (WithAgentConnectURL, WithAgentConnectCAs, WithAuthtoken)
// opens an https endpoint with WithURL on a name under the service domain, once with
// agent.Listen answering requests itself and once with agent.Forward to a local upstream, and a
// public HTTPS request reaches each end to end.
func TestGoV2HTTPSEndpoint(t *testing.T) {
	w := start(t)
	_, token := w.credential()

	ev := w.gov2Agent(token, "-url", "https://gov2.edgeplane.app")
	if ev.Event != "endpoint" || ev.URL != "https://gov2.edgeplane.app" {
		t.Fatalf("listen: %+v\n%s", ev, w.proc.Stderr)
	}
	st, body, _ := get(t, w.httpsClient(), "https://gov2.edgeplane.app/v2/listen")
	if st != 200 || body != "ngrok-go v2 host=gov2.edgeplane.app xff=127.0.0.1 xfp=https xfh=gov2.edgeplane.app path=/v2/listen" {
		t.Errorf("listener endpoint: %d %q", st, body)
	}

	upstream := httptest.NewServer(http.HandlerFunc(hello))
	t.Cleanup(upstream.Close)
	ev = w.gov2Agent(token, "-url", "https://gov2-fwd.edgeplane.app", "-upstream", upstream.URL)
	if ev.Event != "endpoint" || ev.URL != "https://gov2-fwd.edgeplane.app" {
		t.Fatalf("forward: %+v", ev)
	}
	st, body, _ = get(t, w.httpsClient(), "https://gov2-fwd.edgeplane.app/v2/forward")
	if st != 200 || !strings.HasPrefix(body, "hello host=gov2-fwd.edgeplane.app xff=127.0.0.1 xfp=https xfh=gov2-fwd.edgeplane.app path=/v2/forward") {
		t.Errorf("forwarder endpoint: %d %q", st, body)
	}

	// Both endpoints are listed as https tunnels.
	var tl struct {
		Tunnels []struct {
			PublicURL string `json:"public_url"`
			Proto     string `json:"proto"`
		} `json:"tunnels"`
	}
	if st := w.call("GET", "/tunnels", nil, &tl); st != 200 {
		t.Fatalf("list tunnels: %d", st)
	}
	listed := map[string]string{}
	for _, tn := range tl.Tunnels {
		listed[tn.PublicURL] = tn.Proto
	}
	for _, u := range []string{"https://gov2.edgeplane.app", "https://gov2-fwd.edgeplane.app"} {
		if listed[u] != "https" {
			t.Errorf("/tunnels lists %v, want %s as https", listed, u)
		}
	}
}

// TestGoV2Refusals: ngrok-go v2 gets each refusal with its code: a domain its account did not
// reserve (319), a name outside the credential's ACL (316), and an unknown token (107, returned
// by Connect once its retries run out of time).
func TestGoV2Refusals(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	_, limited := w.credential("bind:allowed.edgeplane.app")
	cases := []struct {
		name, token, url, stage, code string
		flags                         []string
	}{
		{"unreserved domain", token, "https://unreserved.example.com", "listen", "ERR_NGROK_319", nil},
		{"name outside the ACL", limited, "https://other.edgeplane.app", "listen", "ERR_NGROK_316", nil},
		{"unknown token", token[:len(token)-4] + "AAAA", "https://any.edgeplane.app", "connect", "ERR_NGROK_107",
			[]string{"-connect-timeout", "1500ms"}},
	}
	for _, c := range cases {
		ev := w.gov2Agent(c.token, append([]string{"-url", c.url}, c.flags...)...)
		if ev.Event != "error" || ev.Stage != c.stage || ev.Code != c.code {
			t.Errorf("%s: %+v, want a %s error with %s", c.name, ev, c.stage, c.code)
		}
	}
}
