package tunnel

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
)

// tcpPorts owns this replica's public listeners of tcp endpoints. A port is open while an
// endpoint of its address is online here (a local bind holds it) or on another replica (the
// directory holds it): every replica takes the connections of every tcp endpoint, so a load
// balancer may send them to any. One listener serves both; each connection is carried to a bind
// chosen among the local and remote ones (Gateway.serveTCP).
//
// The listener's connections count against one account (ingress.Server.ListenTCP), which must
// be that of the endpoint it serves, or one account's traffic would fill another's share of the
// public connections. Its holders can disagree for a moment: a random port's bind holds the
// port before its row is written (the store may then refuse it, another account's endpoint of
// the address being online elsewhere), and the directory's view may lag the store. So every
// hold records its account, and the listener follows the strongest: a local bind whose row the
// store accepted (the freshest word on who holds the address; the latest such, when an unbind
// has not let go yet), else the endpoint online on another replica, else a random bind still
// choosing its port. A random bind does not take a port open for another account at all
// (acquireRandom): it tries another. The account is moved on the open socket (SetAccount),
// never by closing and binding again, which would reset the connections in its backlog and
// fail for a socket a handover passed on while the old process still holds it.
type tcpPorts struct {
	// listen opens a listener on port of the TCP listen host for an account's endpoint
	// (ingress.Server.ListenTCP, which counts its connections against the account).
	listen func(port int, account string, serve func(net.Conn)) (TCPListener, error)
	// serve carries one connection of the endpoint at addr.
	serve func(addr string, c net.Conn)

	mu   sync.Mutex
	open map[string]*tcpPort // by address
	seq  uint64              // orders the confirmations of local holds
}

// tcpPort is one open listener and who holds it: local handles, and the directory.
type tcpPort struct {
	l       TCPListener
	account string        // the account its connections count against
	local   []*portHandle // the local binds' holds
	remote  string        // the account of the endpoint online on another replica; "" for none
}

// errPortOtherAccount refuses a random port's bind a port open for another account's endpoint.
var errPortOtherAccount = errors.New("the port serves another account's endpoint")

func newTCPPorts(listen func(int, string, func(net.Conn)) (TCPListener, error), serve func(string, net.Conn)) *tcpPorts {
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

// acquire holds the listener of addr for a local bind of account whose row the store has
// accepted, opening it unless it is open already; the listener then serves account. Closing
// the handle lets go of it.
func (p *tcpPorts) acquire(addr, account string) (*portHandle, error) {
	return p.hold(addr, account, true)
}

// acquireRandom holds the listener of addr for a random port's bind of account that has not
// written its row yet: it is refused a port open for another account (errPortOtherAccount),
// and confirm makes the hold acquire's once the row is written.
func (p *tcpPorts) acquireRandom(addr, account string) (*portHandle, error) {
	return p.hold(addr, account, false)
}

func (p *tcpPorts) hold(addr, account string, confirmed bool) (*portHandle, error) {
	port, ok := portOf(addr)
	if !ok {
		return nil, &net.AddrError{Err: "not host:port", Addr: addr}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.open[addr]
	if o != nil && !confirmed && o.account != account {
		return nil, errPortOtherAccount
	}
	if o == nil {
		l, err := p.listen(port, account, func(c net.Conn) { p.serve(addr, c) })
		if err != nil {
			return nil, err
		}
		o = &tcpPort{l: l, account: account}
		p.open[addr] = o
	}
	h := &portHandle{p: p, addr: addr, account: account}
	if confirmed {
		p.seq++
		h.confirmed = p.seq
	}
	o.local = append(o.local, h)
	p.followLocked(o)
	return h, nil
}

// portHandle is a local bind's hold on a listener.
type portHandle struct {
	p       *tcpPorts
	addr    string
	account string
	// confirmed orders the holds whose rows the store accepted; 0 while the row is not written.
	confirmed uint64
	once      sync.Once
}

// confirm tells the ports that h's bind wrote its row: the listener serves its account.
func (h *portHandle) confirm() {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	if h.confirmed == 0 {
		h.p.seq++
		h.confirmed = h.p.seq
	}
	if o := h.p.open[h.addr]; o != nil {
		h.p.followLocked(o)
	}
}

func (h *portHandle) Close() error {
	h.once.Do(func() {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		if o := h.p.open[h.addr]; o != nil {
			if i := slices.Index(o.local, h); i >= 0 {
				o.local = slices.Delete(o.local, i, i+1)
			}
			if !h.p.closeIdleLocked(h.addr, o) {
				h.p.followLocked(o)
			}
		}
	})
	return nil
}

// followLocked makes o's listener serve the account of its strongest holder (see tcpPorts);
// mu is held.
func (p *tcpPorts) followLocked(o *tcpPort) {
	want, best := "", uint64(0)
	for _, h := range o.local {
		if h.confirmed > best {
			want, best = h.account, h.confirmed
		}
	}
	if want == "" {
		want = o.remote
	}
	if want == "" && len(o.local) > 0 {
		want = o.local[0].account
	}
	if want != "" && want != o.account {
		o.l.SetAccount(want)
		o.account = want
	}
}

// closeIdleLocked closes a listener nobody holds and reports whether it did; mu is held.
func (p *tcpPorts) closeIdleLocked(addr string, o *tcpPort) bool {
	if len(o.local) > 0 || o.remote != "" {
		return false
	}
	o.l.Close()
	delete(p.open, addr)
	return true
}

// setRemote makes the addresses of the tcp endpoints online on other replicas (with the
// account of each) the directory's holds: it opens a listener for each that has none and lets
// go of the others. It returns the addresses whose listener could not be opened, with why
// (another program holds the port): the directory logs them and asks again at its next poll.
func (p *tcpPorts) setRemote(addrs map[string]string) map[string]error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, o := range p.open {
		if _, want := addrs[addr]; o.remote != "" && !want {
			o.remote = ""
			if !p.closeIdleLocked(addr, o) {
				p.followLocked(o)
			}
		}
	}
	var failed map[string]error
	for addr, account := range addrs {
		if account == "" {
			continue // every row has its account; a hold needs one
		}
		if o := p.open[addr]; o != nil {
			o.remote = account
			p.followLocked(o)
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
		p.open[addr] = &tcpPort{l: l, account: account, remote: account}
	}
	return failed
}

// held reports whether a listener of addr is open, for tests.
func (p *tcpPorts) held(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open[addr] != nil
}
