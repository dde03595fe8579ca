package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
	"golang.org/x/sys/unix"
)

// echoConnsAs answers every connection of l with prefix and what it read up to its end, so a
// test can tell which account's agent answered.
func echoConnsAs(l net.Listener, prefix string) {
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: l}.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(io.LimitReader(c, 1<<16))
				_, _ = c.Write([]byte(prefix + string(b)))
			}()
		}
	}()
}

// shareAttempt binds addr as another program of the same user could, with SO_REUSEPORT (which
// Linux lets share a port among sockets of one user that all set it), and reports whether it
// got the port: then it would have taken a share of the port's connections.
func shareAttempt(addr string) (bool, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err == nil {
		ln.Close()
		return true, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return false, nil
	}
	return false, err
}

// connLoop connects to each target, one connection after another, until stop, and counts the
// connections answered by the target's own account and the others (refused, cut, or answered
// by anybody else); beside it a same-user program tries to share the targets' ports.
type connLoop struct {
	ok, failed, shared atomic.Int64
	mu                 sync.Mutex
	errs, shares       []string
	quit               chan struct{}
	wg                 sync.WaitGroup
}

func startConnLoop(targets map[string]string, answer func(addr string) string) *connLoop {
	l := &connLoop{quit: make(chan struct{})}
	note := func(to *[]string, format string, a ...any) {
		l.mu.Lock()
		if len(*to) < 5 {
			*to = append(*to, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, a...))
		}
		l.mu.Unlock()
	}
	for addr, want := range targets {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.quit:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if got := answer(addr); got != want {
					l.failed.Add(1)
					note(&l.errs, "%s answered %q, want %q", addr, got, want)
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for addr := range targets {
				if got, err := shareAttempt(addr); got || err != nil {
					l.shared.Add(1)
					note(&l.shares, "a same-user SO_REUSEPORT socket on %s: bound=%v err=%v", addr, got, err)
				}
			}
		}
	}()
	return l
}

// made counts the connections made so far.
func (l *connLoop) made() int64 { return l.ok.Load() + l.failed.Load() }

// stop ends the loop and fails the test if any connection failed or the port was shared.
func (l *connLoop) stop(t *testing.T) {
	t.Helper()
	close(l.quit)
	l.wg.Wait()
	t.Logf("connection loop: %d answered, %d failed, %d shares", l.ok.Load(), l.failed.Load(), l.shared.Load())
	if l.failed.Load() > 0 || l.shared.Load() > 0 || l.ok.Load() == 0 {
		t.Errorf("connection loop: %d failed of %d, port shared %d times; first failures:\n%s",
			l.failed.Load(), l.made(), l.shared.Load(), strings.Join(append(l.errs, l.shares...), "\n"))
	}
}

// TCP endpoints on a random port and TCP edges on reserved addresses, of two accounts, keep
// their ports across a handover, each still answered by its own account's agent: the old
// process passes its listening sockets to the new one, which takes them for the binds the
// agents send again with the address they were given (no other account may bind that address)
// and for its edges. A connection loop runs through the handover: not one connection is
// refused or answered by anybody else, and a same-user program trying SO_REUSEPORT on the
// ports never gets a share of them, before, during or after the handover.
func TestHandoverKeepsRandomTCPEndpoints(t *testing.T) {
	w := start(t, "--drain-timeout", "10s", "--tcp-port-range", "25100-25499", "--tcp-addr-host", "127.0.0.1")
	wb := w.asAccount("team-b")
	_, tokenA := w.credential()
	_, tokenB := wb.credential()
	ctx := context.Background()
	listen := func(token, prefix string, opts config.Tunnel) ngrok.Tunnel {
		tun, err := w.mustConnect(token).Listen(ctx, opts)
		if err != nil {
			t.Fatalf("listen %s: %v", prefix, err)
		}
		t.Cleanup(func() { _ = tun.Close() })
		echoConnsAs(tun, prefix)
		return tun
	}
	endpoint := func(token, prefix string) string {
		return strings.TrimPrefix(listen(token, prefix, config.TCPEndpoint()).URL(), "tcp://")
	}
	// edge serves a TCP edge on a reserved address of account aw with a labeled tunnel.
	edge := func(aw *world, token, prefix string) string {
		label := strings.TrimSuffix(prefix, ":")
		listen(token, prefix, config.LabeledTunnel(config.WithLabel("edge", label)))
		group := aw.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": label}})
		// An address whose port no other program on the host holds now (other tests' servers
		// use the same range): the edge's listener, refused, would be tried again only at the
		// plan's next change.
		var ra struct{ Addr string }
		for try := 0; ; try++ {
			if st := aw.call("POST", "/reserved_addrs", map[string]any{}, &ra); st != 201 {
				t.Fatalf("reserve an address for %s: %d", prefix, st)
			}
			probe, err := net.Listen("tcp", ra.Addr)
			if err == nil {
				probe.Close()
				break
			}
			if try == 10 {
				t.Fatalf("no reserved address of a free port: %v", err)
			}
		}
		aw.mustCreate("/edges/tcp", map[string]any{"hostports": []string{ra.Addr}, "backend": map[string]any{"backend_id": group}})
		return ra.Addr
	}
	addrA, addrB := endpoint(tokenA, "a:"), endpoint(tokenB, "b:")
	if addrA == addrB {
		t.Fatalf("both accounts were given %s", addrA)
	}
	edgeA, edgeB := edge(w, tokenA, "edge-a:"), edge(wb, tokenB, "edge-b:")
	t.Cleanup(func() {
		if t.Failed() { // a port another program on the host holds, say
			for _, line := range strings.Split(w.proc.Stderr.String(), "\n") {
				if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
					t.Log(line)
				}
			}
		}
	})
	targets := map[string]string{addrA: "a:ping", addrB: "b:ping", edgeA: "edge-a:ping", edgeB: "edge-b:ping"}
	answer := func(addr string) string {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "dial: " + err.Error()
		}
		return pingConn(t, c)
	}
	for addr, want := range targets {
		eventually(t, 20*time.Second, addr+" answers "+want, func() bool { return answer(addr) == want })
	}

	loop := startConnLoop(targets, answer)
	waitMade := func(what string, n int64) {
		base := loop.made()
		eventually(t, 20*time.Second, fmt.Sprintf("%d more connections %s", n, what), func() bool { return loop.made() >= base+n })
	}
	waitMade("before the handover", 20)
	newRestarter(w).handover(t)
	if !strings.Contains(w.proc.Stderr.String(), `msg="handover: inherited TCP ports" ports=4`) {
		t.Errorf("the new process did not say it inherited the 4 TCP ports")
	}
	waitMade("after the handover", 40)
	loop.stop(t)
	for addr, want := range targets {
		for i := 0; i < 5; i++ {
			if got := answer(addr); got != want {
				t.Fatalf("connection %d to %s after the handover: %q, want %q", i, addr, got, want)
			}
		}
	}
	// Another account's agent cannot take a port by the URL it was given: ngrok-go v2 binds
	// with the URL.
	if ev := w.gov2Agent(tokenB, "-url", "tcp://"+addrA); ev.Event != "error" || ev.Code != "ERR_NGROK_307" {
		t.Errorf("account b's ngrok-go v2 agent binding %s: %+v; want ERR_NGROK_307", addrA, ev)
	}
	if got := answer(addrA); got != "a:ping" {
		t.Errorf("%s answers %q after account b's try, want a:ping", addrA, got)
	}
}
