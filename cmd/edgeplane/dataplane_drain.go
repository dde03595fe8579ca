package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/ingress"
	"github.com/edgeplane/edgeplane/tunnel"
)

// The old process's side of a handover (handover.go) once its successor is ready, and the new
// process's patience with endpoints whose agents are on their way to it.

// listenForHandover starts a handover on each SIGUSR2, one at a time: a signal while one is
// under way is refused with a log line. The successor's pid is sent on done once it is ready;
// stop ends the listening.
func listenForHandover(h *handover, done chan<- int) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case <-quit:
				return
			case <-sig:
			}
			if err := h.begin(); err != nil {
				h.log.Warn("handover refused: SIGUSR2 while a handover is under way", "err", err)
				continue
			}
			h.log.Info("handover: starting a new process on this process's sockets")
			sdNotify(reloading())
			go func() {
				pid, err := h.start()
				if err != nil {
					h.log.Error("handover failed: this process goes on serving", "err", err)
					sdNotify("READY=1")
					h.failed()
					return
				}
				// Under systemd (NotifyAccess=main), only the main process may name its successor.
				sdNotify(fmt.Sprintf("MAINPID=%d\nREADY=1", pid))
				done <- pid // the claim is kept: this process drains and exits
			}()
		}
	}()
	return func() {
		signal.Stop(sig)
		close(quit)
	}
}

// drainAfterHandover stops this process accepting anything (its successor accepts on the same
// sockets), lets the API's and the public listeners' requests in flight finish, ends the agents'
// sessions as their streams finish, and returns, for at most --drain-timeout.
func drainAfterHandover(cfg *serveConfig, log *slog.Logger, pid int, api, metrics *http.Server, dp *dataPlane) error {
	signal.Reset(os.Interrupt, syscall.SIGTERM) // a SIGINT or SIGTERM now ends the process at once
	log.Info("handover: the new process serves; this one stops accepting and drains", "pid", pid, "drain_timeout", cfg.drainTimeout)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = api.Shutdown(ctx)
	}()
	if metrics != nil {
		_ = metrics.Close()
	}
	cut := dp.drain(ctx)
	wg.Wait()
	if cut > 0 || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		log.Warn("handover: the drain timeout ended what was still in flight", "sessions_cut", cut, "drain_timeout", cfg.drainTimeout)
	}
	log.Info("handover: drained; exiting", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// drainSettle is how long after the public listeners stop accepting the agents' sessions start
// to end: a request whose head was arriving then has opened its stream to the agent by now,
// and that stream holds its session until the response is done.
const drainSettle = 300 * time.Millisecond

// drainIdlePoll is how often a drain closes the proxy's idle streams to agents.
const drainIdlePoll = 10 * time.Millisecond

// drain is the data plane's part: no new agent, peer or public connection; the public HTTP
// requests in flight finish; each agent session ends once it has no stream open (its agent
// reconnects to the successor at once). It returns how many sessions the deadline cut.
func (d *dataPlane) drain(ctx context.Context) (cut int) {
	if d.gw == nil {
		return 0
	}
	for _, ln := range []net.Listener{d.agentLn, d.peerLn} {
		if ln != nil {
			ln.Close()
		}
	}
	pubDone := make(chan struct{})
	go func() {
		d.pub.Drain(ctx)
		close(pubDone)
	}()
	// The other replicas keep connections to this replica's agents open between requests; each
	// is a stream that would hold its agent's session here until ctx ends, while the successor,
	// whose link address is this replica's, cannot reach it. Marked draining, they close those
	// connections after each request and prefer the agent's new place once it has one.
	if d.link != nil {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a database that is down must not take the drain's time
		err := d.st.DrainReplica(mctx, d.replica)
		cancel()
		if err != nil && d.log.Load() != nil {
			d.log.Load().Warn("handover: cannot mark this replica draining; the other replicas' connections to its agents may hold them until the drain timeout", "err", err)
		}
	}
	settle := time.NewTimer(drainSettle)
	defer settle.Stop()
	select {
	case <-pubDone:
	case <-settle.C:
	case <-ctx.Done():
	}
	// A TCP or TLS connection accepted before the listeners closed, or an HTTP request received
	// before, may still be looking for its agent (a request's traffic policy or sign-in may take
	// longer than drainSettle): its stream, once open, holds the agent's session.
	d.pub.AwaitRouted(ctx)
	// The proxy's idle streams to agents, kept for a next request, would hold their sessions
	// open: close them as the requests in flight finish.
	gwDone := make(chan struct{})
	go func() {
		t := time.NewTicker(drainIdlePoll)
		defer t.Stop()
		for {
			d.pub.CloseIdleUpstreams()
			select {
			case <-gwDone:
				return
			case <-t.C:
			}
		}
	}()
	cut = d.gw.Drain(ctx)
	close(gwDone)
	<-pubDone
	return cut
}

// Waiting for an endpoint. While an agent moves from one process to another (a handover, a
// replica's rolling restart, a replica lost), its endpoint is offline for the time its agent
// takes to reconnect and bind again, typically well under half a second, seconds on a starved
// machine. A public request for an endpoint that is offline now waits for it, rather than being
// answered ERR_NGROK_3200 at once, when it is expected back: while the store's rows say its
// agent is moving (tunnel.Gateway.Moving, and LabeledMoving for an edge's tunnel group: a row of
// it on a draining replica, or taken over by an agent that reconnected here and has not bound
// it again), up to tunnel.MoveWait, whose rows end sooner when the agent does not come back;
// otherwise up to handoverWait when this process took over from a process that had it online
// (handover.go) and it has not been served here since, or up to endpointWait when this process
// served it less than recentWindow ago (its agent may be moving from another replica, or gone
// with a replica that died). A name nobody served gets its answer at once, and so does one
// that did not come back within one wait.
const (
	endpointWait     = 750 * time.Millisecond
	handoverWait     = 2 * time.Second
	endpointWaitPoll = 15 * time.Millisecond
	recentWindow     = 30 * time.Second
	// maxRecent bounds the names remembered; past it the memory starts again.
	maxRecent = 1 << 16
)

// endpointWaiter remembers the endpoints this process served lately.
type endpointWaiter struct {
	mu   sync.RWMutex
	seen map[string]time.Time
	// announced holds the endpoints the handover announced that have not been served here yet.
	announced map[string]bool
	// moveWait bounds a wait that the rows prolong (tunnel.MoveWait; tests shorten it).
	moveWait time.Duration
}

// newEndpointWaiter starts with the endpoints a handover said are coming (keys as onlineKeys
// writes them).
func newEndpointWaiter(expected []string) *endpointWaiter {
	w := &endpointWaiter{seen: map[string]time.Time{}, announced: map[string]bool{}, moveWait: tunnel.MoveWait}
	now := time.Now()
	for _, k := range expected {
		if len(w.seen) < maxRecent {
			w.seen[k] = now
			w.announced[k] = true
		}
	}
	return w
}

// served records that key was online now; it writes at most once a second per key.
func (w *endpointWaiter) served(key string) {
	now := time.Now()
	w.mu.RLock()
	last, ok := w.seen[key]
	w.mu.RUnlock()
	if ok && now.Sub(last) < time.Second {
		return
	}
	w.mu.Lock()
	if len(w.seen) >= maxRecent {
		clear(w.seen)
	}
	w.seen[key] = now
	delete(w.announced, key) // its move is over
	w.mu.Unlock()
}

// recent lists the keys served less than recentWindow ago.
func (w *endpointWaiter) recent() []string {
	now := time.Now()
	w.mu.RLock()
	defer w.mu.RUnlock()
	keys := make([]string, 0, len(w.seen))
	for k, at := range w.seen {
		if now.Sub(at) < recentWindow {
			keys = append(keys, k)
		}
	}
	return keys
}

// limit is how long an offline key is waited for: handoverWait for one the handover announced
// and not served since, endpointWait otherwise.
func (w *endpointWaiter) limit(key string) time.Duration {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.announced[key] {
		return handoverWait
	}
	return endpointWait
}

// expected reports whether an offline key is worth waiting for.
func (w *endpointWaiter) expected(key string) bool {
	now := time.Now()
	w.mu.RLock()
	last, ok := w.seen[key]
	w.mu.RUnlock()
	return ok && now.Sub(last) < recentWindow
}

// mover says whether the rows show an endpoint's agent on its way (moving), and asks for a
// fresh view of them while a request waits (poll). The zero value knows of no move.
type mover struct {
	moving func() bool
	poll   func()
}

func (m mover) isMoving() bool { return m.moving != nil && m.moving() }

// await returns find's answer, waiting for a non-empty one when key is expected back: up to
// its limit, and past it while m says the rows show its agent on its way (at most
// tunnel.MoveWait in all).
func await[T any](w *endpointWaiter, key string, m mover, find func() (T, bool)) T {
	v, ok := find()
	if ok {
		w.served(key)
		return v
	}
	if !w.expected(key) && !m.isMoving() {
		return v
	}
	start := time.Now()
	limit := w.limit(key)
	for {
		if m.poll != nil {
			m.poll() // the wait ends as soon as the directory sees the bind
		}
		time.Sleep(endpointWaitPoll)
		if v, ok = find(); ok {
			w.served(key)
			return v
		}
		waited := time.Since(start)
		if waited >= w.moveWait || (waited >= limit && !m.isMoving()) {
			break
		}
	}
	// Not back in time: the next lookups (the same request's, past its TLS handshake, and the
	// next requests') are answered at once, until the endpoint is served again or its rows say
	// it is moving.
	w.forget(key)
	return v
}

// forget stops expecting key.
func (w *endpointWaiter) forget(key string) {
	w.mu.Lock()
	delete(w.seen, key)
	delete(w.announced, key)
	w.mu.Unlock()
}

// onlineKeys lists the endpoints online on this replica and those it served lately (other
// replicas' agents', with a link), as endpointWaiter's keys: a successor waits for them too.
func (d *dataPlane) onlineKeys() []string {
	if d.gw == nil {
		return nil
	}
	keys := d.waiter.recent()
	d.gw.EachLocal(func(proto, host, account string, labels map[string]string) {
		switch {
		case proto == "":
			keys = append(keys, labeledKey(account, labels))
		case host != "":
			keys = append(keys, proto+"://"+host)
		}
	})
	return keys
}

// setLookups gives the public listeners this replica's view of the endpoints, patient with
// those expected back (endpointWaiter).
func (d *dataPlane) setLookups(w *endpointWaiter) {
	d.waiter = w
	d.pub.SetLookup(func(proto, host string) ingress.Endpoint {
		m := mover{moving: func() bool { return d.gw.Moving(proto, host) }, poll: d.gw.PollSoon}
		return await(w, proto+"://"+host, m, func() (ingress.Endpoint, bool) {
			if t := d.gw.Endpoint(proto, host); t != nil {
				return t, true
			}
			return nil, false
		})
	})
	d.pub.SetLabeled(func(account string, labels map[string]string) []ingress.Endpoint {
		m := mover{moving: func() bool { return d.gw.LabeledMoving(account, labels) }, poll: d.gw.PollSoon}
		return await(w, labeledKey(account, labels), m, func() ([]ingress.Endpoint, bool) {
			tunnels := d.gw.Labeled(account, labels)
			out := make([]ingress.Endpoint, len(tunnels))
			for i, t := range tunnels {
				out[i] = t
			}
			return out, len(out) > 0
		})
	})
}

// labeledKey names a tunnel group: its account and its labels, sorted.
func labeledKey(account string, labels map[string]string) string {
	kv := make([]string, 0, len(labels))
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return "labels:" + account + ":" + strings.Join(kv, "&")
}
