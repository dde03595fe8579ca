package tunnel

import (
	"io"
	"net"
	"strconv"
	"sync"
)

// tcpPorts owns this replica's public listeners of tcp endpoints. A port is open while an
// endpoint of its address is online here (a local bind holds it) or on another replica (the
// directory holds it): every replica takes the connections of every tcp endpoint, so a load
// balancer may send them to any. One listener serves both; each connection is carried to a bind
// chosen among the local and remote ones (Gateway.serveTCP).
type tcpPorts struct {
	// listen opens a listener on port of the TCP listen host for an account's endpoint
	// (ingress.Server.ListenTCP, which counts its connections against the account).
	listen func(port int, account string, serve func(net.Conn)) (io.Closer, error)
	// serve carries one connection of the endpoint at addr.
	serve func(addr string, c net.Conn)

	mu   sync.Mutex
	open map[string]*tcpPort // by address
}

// tcpPort is one open listener and who holds it: local handles, and the directory.
type tcpPort struct {
	l      io.Closer
	local  int
	remote bool
}

func newTCPPorts(listen func(int, string, func(net.Conn)) (io.Closer, error), serve func(string, net.Conn)) *tcpPorts {
	return &tcpPorts{listen: listen, serve: serve, open: map[string]*tcpPort{}}
}

// portOf returns the port of a tcp address host:port.
func portOf(addr string) (int, bool) {
	_, text, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	port, err := strconv.Atoi(text)
	return port, err == nil && port > 0 && port < 65536
}

// acquire holds the listener of addr for a local bind of account, opening it unless it is open
// already (for the same endpoint online on another replica, of the same account: the store
// sees to that); closing the handle lets go of it.
func (p *tcpPorts) acquire(addr, account string) (io.Closer, error) {
	port, ok := portOf(addr)
	if !ok {
		return nil, &net.AddrError{Err: "not host:port", Addr: addr}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.open[addr]
	if o == nil {
		l, err := p.listen(port, account, func(c net.Conn) { p.serve(addr, c) })
		if err != nil {
			return nil, err
		}
		o = &tcpPort{l: l}
		p.open[addr] = o
	}
	o.local++
	return &portHandle{p: p, addr: addr}, nil
}

// portHandle is a local bind's hold on a listener.
type portHandle struct {
	p    *tcpPorts
	addr string
	once sync.Once
}

func (h *portHandle) Close() error {
	h.once.Do(func() {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		if o := h.p.open[h.addr]; o != nil {
			o.local--
			h.p.closeIdleLocked(h.addr, o)
		}
	})
	return nil
}

// closeIdleLocked closes a listener nobody holds; mu is held.
func (p *tcpPorts) closeIdleLocked(addr string, o *tcpPort) {
	if o.local <= 0 && !o.remote {
		o.l.Close()
		delete(p.open, addr)
	}
}

// setRemote makes the addresses of the tcp endpoints online on other replicas (with the
// account of each) the directory's holds: it opens a listener for each that has none and lets
// go of the others. It returns the addresses whose listener could not be opened, with why
// (another program holds the port): the directory logs them and asks again at its next poll.
func (p *tcpPorts) setRemote(addrs map[string]string) map[string]error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, o := range p.open {
		if _, want := addrs[addr]; o.remote && !want {
			o.remote = false
			p.closeIdleLocked(addr, o)
		}
	}
	var failed map[string]error
	for addr, account := range addrs {
		if o := p.open[addr]; o != nil {
			o.remote = true
			continue
		}
		port, ok := portOf(addr)
		if !ok {
			continue
		}
		l, err := p.listen(port, account, func(c net.Conn) { p.serve(addr, c) })
		if err != nil {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[addr] = err
			continue
		}
		p.open[addr] = &tcpPort{l: l, remote: true}
	}
	return failed
}

// held reports whether a listener of addr is open, for tests.
func (p *tcpPorts) held(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open[addr] != nil
}
