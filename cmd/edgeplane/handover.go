package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A handover restarts serve without closing its sockets: on SIGUSR2 the running process starts
// a new one (the same executable path, so an upgraded binary takes over) with its listening
// sockets as inherited file descriptors, named in inheritEnv, and a pipe the new process
// writes "ready" to once it serves. Only then does the old one stop accepting, end its agents'
// sessions as their streams finish (they reconnect to the new process on the same socket at
// once) and drain the requests in flight, for up to --drain-timeout. TCP endpoints' and edges'
// ports are passed on too, in a list of their own (handover_tcp.go). docs/operations.md
// describes it; docs/decisions.md says why inherited sockets rather than SO_REUSEPORT.

// inheritEnv names, for a process started by a handover, the listening sockets it inherits and
// its readiness pipe: a comma-separated list of NAME=FD, such as "api=3,agent=4,ready=5".
const inheritEnv = "EDGEPLANE_INHERITED_FDS"

// readyName is the entry of inheritEnv naming the readiness pipe; endpointsName the pipe on
// which the old process writes the endpoints online on it, one a line, whose agents are about
// to reconnect to the new one (its public listeners wait a moment for them: endpointWaiter).
const (
	readyName     = "ready"
	endpointsName = "endpoints"
	// maxEndpointsList bounds what the new process reads of that list.
	maxEndpointsList = 16 << 20
)

// inheritable are the listeners a handover passes on, by the name inheritEnv gives them. TCP
// endpoints' and edges' ports are not among them: they open and close with their binds and
// edges, and are passed on by port (inheritTCPEnv).
var inheritable = map[string]string{
	"api": "listen", "metrics": "metrics-listen", "agent": "agent-listen",
	"http": "http-listen", "https": "https-listen", "peer": "peer-listen",
}

// handoverReadyTimeout bounds how long the old process waits for its successor to be ready (it
// opens the database, builds the routing plan and starts every listener); past it the successor
// is killed and the old process goes on serving.
const handoverReadyTimeout = 60 * time.Second

// sockets inherited from the process this one takes over from, or none.
type inherited struct {
	lns   map[string]net.Listener
	ready *os.File
	// expected are the endpoints the old process had online (endpointsName).
	expected []string
	// tcp holds the TCP endpoints' and edges' sockets (inheritTCPEnv) until their ports open
	// here; warnings are its entries that were ignored, for the log.
	tcp      *tcpPool
	warnings []string
}

// parseInherited reads inheritEnv's value: every entry must name a known listener or the
// readiness pipe once, with a descriptor that is open and (for a listener) a listening TCP
// socket. Anything else is refused before a socket or the database is touched: a successor that
// started without a socket it was given would leave that port unserved. Then it reads tcp,
// inheritTCPEnv's value (parseInheritedTCP), whose bad entries are only ignored.
func parseInherited(v, tcp string) (*inherited, error) {
	in := &inherited{lns: map[string]net.Listener{}, tcp: &tcpPool{}}
	if v == "" {
		if tcp != "" {
			in.warnings = append(in.warnings, fmt.Sprintf("%s ignored: no %s", inheritTCPEnv, inheritEnv))
		}
		return in, nil
	}
	// The descriptors given are closed once all are parsed (FileListener makes its own copy):
	// a number freed earlier could be reused by a copy, then named by a later entry.
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	fail := func(format string, a ...any) (*inherited, error) {
		in.close()
		return nil, fmt.Errorf("%s=%q: %s", inheritEnv, v, fmt.Sprintf(format, a...))
	}
	fds := map[int]bool{}
	for _, entry := range strings.Split(v, ",") {
		name, fdText, ok := strings.Cut(entry, "=")
		fd, err := strconv.Atoi(fdText)
		switch {
		case !ok || err != nil:
			return fail("%q is not NAME=FD", entry)
		case inheritable[name] == "" && name != readyName && name != endpointsName:
			return fail("%q names no listener (api, metrics, agent, http, https, peer) nor a pipe (ready, endpoints)", name)
		case in.lns[name] != nil || (name == readyName && in.ready != nil):
			return fail("%s is given twice", name)
		case fd < 3 || fds[fd]:
			return fail("%s=%d: a descriptor must be 3 or more and given once", name, fd)
		}
		fds[fd] = true
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return fail("%s=%d: descriptor not open: %v", name, fd, err)
		}
		if isPipe := st.Mode&syscall.S_IFMT == syscall.S_IFIFO; isPipe != (name == readyName || name == endpointsName) {
			if isPipe {
				return fail("%s=%d: a pipe, not a listening socket", name, fd)
			}
			return fail("%s=%d: not a pipe", name, fd)
		}
		f := os.NewFile(uintptr(fd), name)
		if name == readyName {
			in.ready = f
			continue
		}
		if name == endpointsName {
			b, err := io.ReadAll(io.LimitReader(f, maxEndpointsList))
			f.Close()
			if err != nil {
				return fail("%s=%d: %v", name, fd, err)
			}
			for _, k := range strings.Split(string(b), "\n") {
				if k != "" {
					in.expected = append(in.expected, k)
				}
			}
			continue
		}
		files = append(files, f)
		ln, err := net.FileListener(f)
		if err != nil {
			return fail("%s=%d: not a listening socket: %v", name, fd, err)
		}
		if _, ok := ln.(*net.TCPListener); !ok {
			ln.Close()
			return fail("%s=%d: not a TCP listener", name, fd)
		}
		in.lns[name] = ln
	}
	if in.ready == nil {
		return fail("no %s=FD: the process handing over waits on it", readyName)
	}
	var tcpFiles []*os.File
	in.tcp.lns, tcpFiles, in.warnings = parseInheritedTCP(tcp, fds)
	files = append(files, tcpFiles...)
	return in, nil
}

// take returns the inherited listener of name, once, or nil.
func (in *inherited) take(name string) net.Listener {
	if in == nil {
		return nil
	}
	ln := in.lns[name]
	delete(in.lns, name)
	return ln
}

// close releases what was not taken: a listener this configuration turned off.
func (in *inherited) close() {
	if in == nil {
		return
	}
	for name, ln := range in.lns {
		ln.Close()
		delete(in.lns, name)
	}
	if in.ready != nil {
		in.ready.Close()
	}
	in.tcp.close()
}

// signalReady tells the process handing over that this one serves.
func (in *inherited) signalReady() error {
	if in == nil || in.ready == nil {
		return nil
	}
	_, err := io.WriteString(in.ready, "ready\n")
	in.ready.Close()
	in.ready = nil
	return err
}

// socketSet opens serve's listeners, from inherited sockets where the process it takes over
// from gave them, and remembers each raw TCP listener by name for the next handover.
type socketSet struct {
	in  *inherited
	mu  sync.Mutex
	raw map[string]*net.TCPListener
}

// listen returns the listener of name (inheritable's key) on addr: the inherited one if any,
// else a new one.
func (s *socketSet) listen(name, addr string) (net.Listener, error) {
	ln := s.in.take(name)
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("--%s: %w", inheritable[name], err)
		}
	}
	if tl, ok := ln.(*net.TCPListener); ok {
		s.mu.Lock()
		if s.raw == nil {
			s.raw = map[string]*net.TCPListener{}
		}
		s.raw[name] = tl
		s.mu.Unlock()
	}
	return ln, nil
}

// handover starts a successor with this process's listeners and waits until it is ready. It
// refuses a second handover while one is under way; after a failed one (the successor exited,
// or was not ready in time) this process goes on serving and may try again.
type handover struct {
	socks *socketSet
	log   *slog.Logger
	// endpoints lists the endpoints online here, for the successor (endpointsName).
	endpoints func() []string
	// tcp returns the TCP endpoints' and edges' listeners open here, by port (inheritTCPEnv).
	tcp  func() map[int]*net.TCPListener
	mu   sync.Mutex
	busy bool
}

// errHandoverBusy refuses a handover while another is under way.
var errHandoverBusy = errors.New("a handover is already under way")

// begin claims the handover, or refuses it while one is under way.
func (h *handover) begin() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy {
		return errHandoverBusy
	}
	h.busy = true
	return nil
}

// failed releases the claim after a handover that did not happen.
func (h *handover) failed() {
	h.mu.Lock()
	h.busy = false
	h.mu.Unlock()
}

// start runs the successor and returns its pid once it wrote "ready".
//
// It forks with syscall.ForkExec and raw descriptors rather than os/exec's ExtraFiles: those
// call os.File.Fd, which puts a socket in blocking mode, and the mode belongs to the socket,
// shared with this process's listener; a successor that failed before making it non-blocking
// again would leave this process's accept loops in blocking system calls that Close cannot end.
func (h *handover) start() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find this executable: %w", err)
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	h.socks.mu.Lock()
	names := make([]string, 0, len(h.socks.raw))
	for name := range h.socks.raw {
		names = append(names, name)
	}
	sort.Strings(names)
	var entries []string
	for _, name := range names {
		fd, err := dupListener(h.socks.raw[name])
		if err != nil {
			h.socks.mu.Unlock()
			return 0, fmt.Errorf("pass the %s listener: %w", name, err)
		}
		entries = append(entries, fmt.Sprintf("%s=%d", name, 3+len(fds)))
		fds = append(fds, fd)
	}
	h.socks.mu.Unlock()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	defer pw.Close()
	er, ew, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer er.Close()
	entries = append(entries, fmt.Sprintf("%s=%d", endpointsName, 3+len(fds)), fmt.Sprintf("%s=%d", readyName, 4+len(fds)))
	files := []uintptr{0, 1, 2}
	for _, fd := range fds {
		files = append(files, uintptr(fd))
	}
	files = append(files, er.Fd(), pw.Fd())
	var tcpFDs []int
	var tcpList string
	if h.tcp != nil {
		var skipped int
		tcpFDs, tcpList, skipped = passTCP(h.tcp(), len(files))
		if skipped > 0 {
			h.log.Warn("handover: too many TCP ports to pass on; the new process binds the rest once this one lets go of them", "passed", len(tcpFDs), "not_passed", skipped)
		}
	}
	fds = append(fds, tcpFDs...) // closed here once forked
	for _, fd := range tcpFDs {
		files = append(files, uintptr(fd))
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, inheritEnv+"=") && !strings.HasPrefix(kv, inheritTCPEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, inheritEnv+"="+strings.Join(entries, ","), inheritTCPEnv+"="+tcpList)
	pid, err := syscall.ForkExec(exe, append([]string{os.Args[0]}, os.Args[1:]...), &syscall.ProcAttr{Env: env, Files: files})
	if err != nil {
		ew.Close()
		return 0, fmt.Errorf("start %s: %w", exe, err)
	}
	pw.Close()
	proc, _ := os.FindProcess(pid)
	exited := make(chan error, 1)
	go func() { // reaps a successor that fails; one that serves outlives this process
		st, err := proc.Wait()
		if err == nil {
			err = errors.New(st.String())
		}
		exited <- err
	}()
	go func() {
		defer ew.Close()
		var list []string
		if h.endpoints != nil {
			list = h.endpoints()
		}
		_, _ = io.WriteString(ew, strings.Join(list, "\n"))
	}()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(io.LimitReader(pr, 64)).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("it wrote %q instead of ready", line)
		}
		ready <- err
	}()
	timer := time.NewTimer(handoverReadyTimeout)
	defer timer.Stop()
	select {
	case err := <-ready:
		if err == nil {
			return pid, nil
		}
		_ = proc.Kill()
		return 0, fmt.Errorf("the new process (pid %d) exited before it was ready: %v", pid, <-exited)
	case <-timer.C:
		_ = proc.Kill()
		return 0, fmt.Errorf("the new process (pid %d) was not ready within %s", pid, handoverReadyTimeout)
	}
}

// dupListener returns a new descriptor (close-on-exec) of ln's socket, leaving the socket's
// mode alone.
func dupListener(ln *net.TCPListener) (int, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	return nfd, derr
}

// sdNotify sends state to systemd's notification socket when serve runs under a unit of
// Type=notify (NOTIFY_SOCKET is set): READY=1 once serving, RELOADING=1 when a handover starts,
// then the successor's MAINPID and READY=1 once it serves. It is one datagram; without the
// variable it does nothing.
func sdNotify(state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}

// reloading is the RELOADING=1 notification, with the monotonic time systemd 253 and later ask
// to come with it.
func reloading() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return "RELOADING=1"
	}
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000)
}
