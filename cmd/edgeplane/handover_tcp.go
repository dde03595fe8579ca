package main

import (
	"fmt"
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

// TCP endpoints' and edges' ports in a handover. They open and close with their binds and
// edges, so they are not among the fixed listeners (inheritable): the old process passes the
// ones open when it starts its successor in a list of their own, and the successor keeps them
// in a pool (tcpPool) from which ingress.Server.ListenTCP takes a port's socket when a bind or
// edge opens that port, rather than binding it. Both processes then hold the same socket: no
// other socket shares the port at any time (nothing sets SO_REUSEPORT), and no connection is
// refused while agents move (a connection made between the old process's drain and the new
// one's bind waits in the socket's backlog).

// inheritTCPEnv names, for a process started by a handover, the inherited listening sockets
// of TCP endpoints' and edges' ports: a comma-separated list of PORT=FD, such as
// "24017=9,24018=10". Unlike inheritEnv's entries, a bad one is ignored with a log line: the
// port is then bound anew once the old process lets go of it.
const inheritTCPEnv = "EDGEPLANE_INHERITED_TCP"

// maxInheritedTCP bounds the ports a handover passes on and a successor takes. It keeps the
// list (at most 12 bytes an entry) under Linux's 128 KiB limit on one environment string; the
// ports past it are bound anew by the successor once the old process, draining, closes them.
const maxInheritedTCP = 8192

// tcpSpanMargin is added to the ready timeout and the drain timeout to make the span within
// which the successor keeps the TCP sockets it inherited for their binds and edges.
const tcpSpanMargin = 30 * time.Second

// parseInheritedTCP reads inheritTCPEnv's value. Every entry must name a port (1-65535, once)
// and a descriptor (3 or more, not named by inheritEnv) holding a listening TCP socket bound to
// that port; anything else is ignored, with a line in warnings, and its descriptor closed when
// it is a socket (a descriptor of anything else is left alone: it may be this process's own).
// The descriptors parsed are returned in files, to close once every entry is parsed: closing
// one earlier would free its number for a copy made of a later one.
func parseInheritedTCP(v string, fds map[int]bool) (lns map[int]net.Listener, files []*os.File, warnings []string) {
	lns = map[int]net.Listener{}
	if v == "" {
		return lns, nil, nil
	}
	entries := strings.Split(v, ",")
	if len(entries) > maxInheritedTCP {
		warnings = append(warnings, fmt.Sprintf("%s: %d entries, only the first %d are taken", inheritTCPEnv, len(entries), maxInheritedTCP))
		entries = entries[:maxInheritedTCP]
	}
	for _, entry := range entries {
		ignore := func(format string, a ...any) {
			warnings = append(warnings, fmt.Sprintf("%s: %q ignored: %s", inheritTCPEnv, entry, fmt.Sprintf(format, a...)))
		}
		portText, fdText, ok := strings.Cut(entry, "=")
		port, perr := strconv.Atoi(portText)
		fd, ferr := strconv.Atoi(fdText)
		switch {
		case !ok || perr != nil || ferr != nil:
			ignore("not PORT=FD")
			continue
		case port < 1 || port > 65535:
			ignore("no such port")
			continue
		case lns[port] != nil:
			ignore("port %d is given twice", port)
			continue
		case fd < 3 || fds[fd]:
			ignore("a descriptor must be 3 or more and given once")
			continue
		}
		fds[fd] = true
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			ignore("descriptor not open: %v", err)
			continue
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
			ignore("not a socket")
			continue
		}
		f := os.NewFile(uintptr(fd), "tcp:"+portText)
		files = append(files, f)
		if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
			ignore("not a listening socket")
			continue
		}
		ln, err := net.FileListener(f)
		if err != nil {
			ignore("not a listening socket: %v", err)
			continue
		}
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			ln.Close()
			ignore("not a TCP listener")
			continue
		}
		if got := tl.Addr().(*net.TCPAddr).Port; got != port {
			ln.Close()
			ignore("the socket listens on port %d", got)
			continue
		}
		lns[port] = tl
	}
	return lns, files, warnings
}

// tcpPool holds the TCP sockets a handover passed on until a bind or edge of their port takes
// them (ingress.InheritedPorts), or the handover's span ends: then the rest are closed, their
// endpoints not back (the old process has exited by then).
type tcpPool struct {
	mu     sync.Mutex
	lns    map[int]net.Listener
	closed bool
	timer  *time.Timer
}

// Take returns port's inherited listener, once, or nil.
func (p *tcpPool) Take(port int) net.Listener {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ln := p.lns[port]
	delete(p.lns, port)
	return ln
}

// expireAfter closes what is not taken within span; onExpire is told how many that was.
func (p *tcpPool) expireAfter(span time.Duration, onExpire func(n int)) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.lns) == 0 {
		return
	}
	p.timer = time.AfterFunc(span, func() {
		if n := p.close(); n > 0 && onExpire != nil {
			onExpire(n)
		}
	})
}

// close closes every listener not taken and returns how many there were.
func (p *tcpPool) close() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	n := len(p.lns)
	for port, ln := range p.lns {
		ln.Close()
		delete(p.lns, port)
	}
	return n
}

// size reports how many listeners wait to be taken.
func (p *tcpPool) size() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lns)
}

// passTCP duplicates the TCP endpoints' and edges' listening sockets for a successor, at most
// maxInheritedTCP of them by port order, and returns their descriptors with inheritTCPEnv's
// value for descriptors numbered from first on. A listener closed meanwhile (its endpoint went
// offline) is left out. skipped counts the ports not passed on.
func passTCP(lns map[int]*net.TCPListener, first int) (fds []int, value string, skipped int) {
	ports := make([]int, 0, len(lns))
	for port := range lns {
		ports = append(ports, port)
	}
	sort.Ints(ports)
	var entries []string
	for _, port := range ports {
		if len(fds) == maxInheritedTCP {
			skipped++
			continue
		}
		fd, err := dupListener(lns[port])
		if err != nil {
			continue
		}
		entries = append(entries, fmt.Sprintf("%d=%d", port, first+len(fds)))
		fds = append(fds, fd)
	}
	return fds, strings.Join(entries, ","), skipped
}

// pending returns the listeners not taken yet, by port: a handover passes them on too.
func (p *tcpPool) pending() map[int]*net.TCPListener {
	out := map[int]*net.TCPListener{}
	if p == nil {
		return out
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, ln := range p.lns {
		if tl, ok := ln.(*net.TCPListener); ok {
			out[port] = tl
		}
	}
	return out
}

// holds reports whether port's inherited socket waits to be taken (tunnel.Config.Awaited).
func (p *tcpPool) holds(port int) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lns[port] != nil
}
