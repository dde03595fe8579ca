package testdb

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections on a loopback port to a target, and can be taken down and
// brought back on the same port: a database outage as the application sees it, without stopping
// the shared database server.
type Proxy struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	// gen counts Freeze calls; a connection opened at an earlier gen is frozen.
	gen int
}

// NewProxy starts a proxy to target ("host:port") on 127.0.0.1; it is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.addr }

// Redirect returns dsn with its host:port replaced by the proxy's.
func (p *Proxy) Redirect(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

// Target returns the host:port of a DSN.
func Target(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5432"
	}
	return u.Host
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *Proxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	gen := p.gen
	p.mu.Unlock()
	go func() { p.copy(up, c, gen); up.Close(); c.Close() }()
	p.copy(c, up, gen)
	c.Close()
	up.Close()
}

// copy forwards what src sends to dst until either breaks. Once the connection is frozen, what
// arrives is dropped instead.
func (p *Proxy) copy(dst, src net.Conn, gen int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen(gen) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) frozen(gen int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return gen < p.gen
}

// Freeze makes every open connection stop forwarding, in both directions, while it stays open:
// a database whose connections hang (a host that froze, a half-open TCP connection) rather than
// one that refuses them (Down). Connections opened afterwards work.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
}

// Down closes the listener and every open connection: new connections are refused and existing
// ones break, as when a database host goes away.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Up listens again on the same address.
func (p *Proxy) Up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy up again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
