package agents

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// A handover (SIGUSR2) restarts serve without closing its sockets: these tests run one under a
// request loop with each real client and count the requests that failed.

// Log lines of a handover.
var (
	drainRE   = regexp.MustCompile(`time=(\S+) level=INFO msg="handover: the new process serves; this one stops accepting and drains" pid=(\d+)`)
	drainedRE = regexp.MustCompile(`msg="handover: drained; exiting"`)
	logTimeRE = regexp.MustCompile(`^time=(\S+) `)
)

// restarter hands a world's serve over to a new process, as often as asked.
type restarter struct {
	w   *world
	pid int
}

func newRestarter(w *world) *restarter { return &restarter{w: w, pid: w.proc.Cmd.Process.Pid} }

// handover sends SIGUSR2 and returns once the successor serves and the old process has exited;
// it returns when the signal was sent and when the old process began to drain (from its log).
// The successor is killed when the test ends.
func (r *restarter) handover(t *testing.T) (sent, draining time.Time) {
	t.Helper()
	before := len(drainRE.FindAllString(r.w.proc.Stderr.String(), -1))
	drainedBefore := len(drainedRE.FindAllString(r.w.proc.Stderr.String(), -1))
	sent = time.Now()
	if err := syscall.Kill(r.pid, syscall.SIGUSR2); err != nil {
		t.Fatalf("SIGUSR2 to %d: %v", r.pid, err)
	}
	var m []string
	waitLog(t, r.w, 30*time.Second, "the old process draining", func(out string) bool {
		all := drainRE.FindAllStringSubmatch(out, -1)
		if len(all) > before {
			m = all[before]
			return true
		}
		return false
	})
	pid, _ := strconv.Atoi(m[2])
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	draining = logTime(t, m[1])
	waitLog(t, r.w, 40*time.Second, "the old process drained", func(out string) bool {
		return len(drainedRE.FindAllString(out, -1)) > drainedBefore
	})
	old := r.pid
	deadline := time.Now().Add(10 * time.Second)
	for alive(old) {
		if time.Now().After(deadline) {
			t.Fatalf("the old process %d did not exit after draining", old)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.pid = pid
	return sent, draining
}

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// waitLog waits until cond holds of the server's log.
func waitLog(t *testing.T, w *world, limit time.Duration, what string, cond func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond(w.proc.Stderr.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; stderr:\n%s", what, limit, lastBytes(w.proc.Stderr.String(), 6000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func logTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("log time %q: %v", s, err)
	}
	return ts
}

// onlineAfter returns when the server logged url's tunnel online after the log time from.
func onlineAfter(t *testing.T, w *world, from time.Time, url string) (time.Time, bool) {
	return loggedAfter(t, w, from, `msg="tunnel online"`, "url="+url+" ")
}

// loggedAfter returns the time of the first log line at or after from holding every part.
func loggedAfter(t *testing.T, w *world, from time.Time, parts ...string) (time.Time, bool) {
	for _, line := range strings.Split(w.proc.Stderr.String(), "\n") {
		m := logTimeRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if ts := logTime(t, m[1]); all && !ts.Before(from) {
			return ts, true
		}
	}
	return time.Time{}, false
}

// requestLoop sends requests for url through client, one after another on each of its workers,
// until stop, and counts those answered 200 with want in the body and the others.
type requestLoop struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	quit       chan struct{}
	wg         sync.WaitGroup
}

func startLoop(client *http.Client, url, want string, workers int) *requestLoop {
	l := &requestLoop{quit: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.quit:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if err := fetch(client, url, want); err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 10 {
						l.errs = append(l.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

// waitRequests waits until each of loops has made n more requests (answered or failed) than
// when called: "the loops are under way" and "the loops went on against what changed" as
// conditions, where a fixed pause may pass on a loaded machine before a single request is made.
func waitRequests(t *testing.T, n int64, loops ...*requestLoop) {
	t.Helper()
	made := func(l *requestLoop) int64 { return l.ok.Load() + l.failed.Load() }
	base := make([]int64, len(loops))
	for i, l := range loops {
		base[i] = made(l)
	}
	eventually(t, time.Second, fmt.Sprintf("%d more requests of each loop", n), func() bool {
		for i, l := range loops {
			if made(l) < base[i]+n {
				return false
			}
		}
		return true
	})
}

// stop ends the loop and fails the test if any request failed.
func (l *requestLoop) stop(t *testing.T) {
	t.Helper()
	close(l.quit)
	l.wg.Wait()
	t.Logf("request loop: %d answered, %d failed", l.ok.Load(), l.failed.Load())
	if l.failed.Load() > 0 || l.ok.Load() == 0 {
		t.Errorf("request loop: %d failed of %d; first failures:\n%s", l.failed.Load(), l.ok.Load()+l.failed.Load(), strings.Join(l.errs, "\n"))
	}
}

func fetch(client *http.Client, url, want string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
		return fmt.Errorf("%d %s %q", resp.StatusCode, resp.Header.Get("ngrok-error-code"), lastBytes(string(body), 200))
	}
	return nil
}

// TestHandoverUnderLoad: with each real client serving an endpoint and public requests in a
// loop, serve hands over to a new process (SIGUSR2); the client serves again from the new
// process within 5 s and not one request of the loop fails.
func TestHandoverUnderLoad(t *testing.T) {
	for _, c := range []struct {
		name, url, want string
		start           func(t *testing.T, w *world, token string)
	}{
		{"ngrok-go v1", "https://go1.edgeplane.app/", "hello", func(t *testing.T, w *world, token string) {
			sess := w.mustConnect(token)
			tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("go1.edgeplane.app")))
			if err != nil {
				t.Fatal(err)
			}
			serveTunnel(t, tun, http.HandlerFunc(hello))
		}},
		{"ngrok-go v2", "https://go2.edgeplane.app/", "ngrok-go v2", func(t *testing.T, w *world, token string) {
			if ev := w.gov2Agent(token, "-url", "https://go2.edgeplane.app"); ev.Event != "endpoint" {
				t.Fatalf("gov2agent: %+v", ev)
			}
		}},
		{"Node SDK", "https://node.edgeplane.app/", "node upstream", func(t *testing.T, w *world, token string) {
			events := w.runNodeSDK("forward", token, "node.edgeplane.app")
			if last := events[len(events)-1]; last.Event != "ready" {
				t.Fatalf("node sdk.js: %+v", events)
			}
		}},
		{"ngrok agent 2.x", "https://bin.edgeplane.app/", "hello host=bin.edgeplane.app", func(t *testing.T, w *world, token string) {
			app := httptest.NewServer(http.HandlerFunc(hello))
			t.Cleanup(app.Close)
			startNgrokAgentBin(t, w, token, "bin.edgeplane.app", app.URL, false)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := start(t, "--drain-timeout", "10s")
			_, token := w.credential()
			c.start(t, w, token)
			client := w.httpsClient()
			eventually(t, 2*time.Second, "the endpoint serves", func() bool { return fetch(client, c.url, c.want) == nil })
			loop := startLoop(client, c.url, c.want, 2)
			waitRequests(t, 4, loop)
			r := newRestarter(w)
			sent, draining := r.handover(t)
			var online time.Time
			waitLog(t, w, 10*time.Second, c.url+" online again", func(string) bool {
				var ok bool
				online, ok = onlineAfter(t, w, draining, strings.TrimSuffix(c.url, "/"))
				return ok
			})
			closed, _ := loggedAfter(t, w, draining, `msg="agent session closed"`)
			t.Logf("%s: online again %v after its old session ended, %v after the old process began to drain, %v after SIGUSR2",
				c.name, online.Sub(closed).Round(time.Millisecond), online.Sub(draining).Round(time.Millisecond), online.Sub(sent).Round(time.Millisecond))
			if online.Sub(sent) > 5*time.Second {
				t.Errorf("%s served again %v after the handover began, want within 5s", c.name, online.Sub(sent))
			}
			waitRequests(t, 4, loop) // the loop goes on against the new process alone
			loop.stop(t)
		})
	}
}

// TestHandoverFinishesRequestsInFlight: a request the old process is serving when the handover
// starts (its agent takes 1.5 s to answer) completes whole: its agent's session ends only then,
// and the agent serves again from the new process. A SIGUSR2 to the old process meanwhile is
// refused: a handover is under way.
func TestHandoverFinishesRequestsInFlight(t *testing.T) {
	w := start(t, "--drain-timeout", "10s")
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("slow.edgeplane.app")))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			rw.WriteHeader(200)
			fmt.Fprint(rw, "slow begins;")
			rw.(http.Flusher).Flush()
			time.Sleep(1500 * time.Millisecond)
			fmt.Fprint(rw, " slow done")
			return
		}
		hello(rw, r)
	}))
	client := w.httpsClient()
	eventually(t, 2*time.Second, "the endpoint serves", func() bool { return fetch(client, "https://slow.edgeplane.app/", "hello") == nil })

	result := make(chan error, 1)
	go func() { result <- fetch(w.httpsClient(), "https://slow.edgeplane.app/slow", "slow begins; slow done") }()
	<-started
	r := newRestarter(w)
	old := r.pid
	go func() {
		// While the old process drains (the slow request holds its agent), a second handover
		// is refused.
		waitLog(t, w, 10*time.Second, "the old process draining", func(out string) bool { return drainRE.MatchString(out) })
		_ = syscall.Kill(old, syscall.SIGUSR2)
	}()
	_, draining := r.handover(t)
	if err := <-result; err != nil {
		t.Fatalf("the request in flight during the handover: %v", err)
	}
	if _, ok := loggedAfter(t, w, draining, `msg="agent session closed"`); !ok {
		t.Errorf("the old process did not end the agent's session")
	}
	if !strings.Contains(w.proc.Stderr.String(), `msg="handover refused: SIGUSR2 while a handover is under way"`) {
		t.Errorf("a SIGUSR2 during the drain was not refused; stderr:\n%s", lastBytes(w.proc.Stderr.String(), 4000))
	}
	eventually(t, 5*time.Second, "the agent serves from the new process", func() bool {
		return fetch(client, "https://slow.edgeplane.app/", "hello") == nil
	})
}
