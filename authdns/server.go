// Package authdns is edgeplane's authoritative DNS server for its CNAME zone (--cname-zone),
// on UDP and TCP, built on github.com/miekg/dns. It answers the names edgeplane hands out in
// reserved domains: A and AAAA records for the cname_target names (the operator's addresses),
// TXT records at the acme_challenge_cname_target names while a DNS-01 challenge of a wildcard
// domain's certificate is pending there (read from the store, so any replica answers a job
// another runs), and SOA and NS for the zone. It is no resolver: a name outside the zone is
// REFUSED, nothing is looked up elsewhere, and answers stay small.
package authdns

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/edgeplane/edgeplane/internal/netx"
)

// Challenges finds the answer of a pending DNS-01 challenge.
type Challenges interface {
	// DNS01 returns the TXT value to publish at name (lowercase, without the final dot), and
	// whether a challenge is pending there. An error means nothing is known: the query gets
	// SERVFAIL, never a negative answer a resolver would cache.
	DNS01(ctx context.Context, name string) (value string, ok bool, err error)
}

// Config is what the server needs.
type Config struct {
	// Zone is the zone served, such as "cname.edgeplane.app" (any case, with or without the
	// final dot).
	Zone string
	// Addresses answer the A and AAAA queries for the names directly under the zone (the
	// cname_target names) and for the zone's name server, ns.<zone>.
	Addresses []netip.Addr
	// Challenges are the pending DNS-01 challenges, answered under acme.<zone>.
	Challenges Challenges
	// Logger receives the server's failures; nil discards.
	Logger *slog.Logger
	// ReadTimeout bounds reading one TCP query, its length and its bytes (default 2 s);
	// IdleTimeout the wait for the next query on the same TCP connection (default 5 s).
	ReadTimeout, IdleTimeout time.Duration
}

// Limits of what one client, and all of them together, can make the server do.
const (
	// maxLookups bounds the challenge lookups in progress at once: a flood of queries for
	// acme.<zone> names gets SERVFAIL beyond it rather than queueing work for the store.
	maxLookups = 32
	// lookupTimeout bounds one challenge lookup.
	lookupTimeout = 2 * time.Second
	// maxTCP and maxTCPPerAddr bound the TCP connections open at once, in all and from one
	// address (an IPv4 address or an IPv6 /64).
	maxTCP, maxTCPPerAddr = 256, 16
	// The defaults of Config.ReadTimeout and Config.IdleTimeout; writeTimeout bounds writing an
	// answer, and maxTCPQueries closes a TCP connection after that many queries.
	readTimeout, idleTimeout, writeTimeout = 2 * time.Second, 5 * time.Second, 2 * time.Second
	maxTCPQueries                          = 64
	// udpSize is the largest UDP answer sent to a client that announces a larger buffer with
	// EDNS(0) (the DNS flag day 2020 value, below common path MTUs); a client without EDNS
	// gets at most 512 bytes. A larger answer is truncated (TC set) and asked again over TCP.
	udpSize = 1232
)

// Server is a running DNS server.
type Server struct {
	zone       string // lowercase, with the final dot
	answers    answerer
	log        *slog.Logger
	read, idle time.Duration

	mu      sync.Mutex
	servers []*dns.Server
	closed  bool
}

// New returns a server for cfg; Serve starts it.
func New(cfg Config) *Server {
	zone := dns.CanonicalName(cfg.Zone)
	s := &Server{zone: zone, log: cfg.Logger, read: cfg.ReadTimeout, idle: cfg.IdleTimeout}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.read <= 0 {
		s.read = readTimeout
	}
	if s.idle <= 0 {
		s.idle = idleTimeout
	}
	s.answers = answerer{zone: zone, challenges: cfg.Challenges, sem: make(chan struct{}, maxLookups)}
	for _, a := range cfg.Addresses {
		if a.Unmap().Is4() {
			s.answers.v4 = append(s.answers.v4, a.Unmap())
		} else {
			s.answers.v6 = append(s.answers.v6, a)
		}
	}
	return s
}

// Serve answers queries on pc (UDP) and ln (TCP) until Close; either may be nil. It returns at
// once; the server's goroutines stop with Close.
func (s *Server) Serve(pc net.PacketConn, ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if pc != nil {
		s.start(&dns.Server{PacketConn: pc, Handler: s, UDPSize: udpSize, ReadTimeout: s.read, WriteTimeout: writeTimeout})
	}
	if ln != nil {
		ln = netx.Limit(ln, netx.Limits{Max: maxTCP, PerAddr: maxTCPPerAddr})
		idle := s.idle
		s.start(&dns.Server{Listener: ln, Handler: s, ReadTimeout: s.read, WriteTimeout: writeTimeout,
			IdleTimeout: func() time.Duration { return idle }, MaxTCPQueries: maxTCPQueries})
	}
}

// start runs srv, logging why it stopped when it was not closed.
func (s *Server) start(srv *dns.Server) {
	s.servers = append(s.servers, srv)
	go func() {
		err := srv.ActivateAndServe()
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if err != nil && !closed && !errors.Is(err, net.ErrClosed) {
			s.log.Error("dns: the server stopped", "err", err)
		}
	}()
}

// Close stops the server and closes its sockets.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	for _, srv := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if srv.ShutdownContext(ctx) != nil { // not started yet: its sockets close it
			if srv.PacketConn != nil {
				srv.PacketConn.Close()
			}
			if srv.Listener != nil {
				srv.Listener.Close()
			}
		}
		cancel()
	}
}

// ServeDNS answers one query (dns.Handler). miekg/dns has already ignored responses and
// refused, with FORMERR or NOTIMP, messages that are not a query of one question.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := s.answers.answer(r)
	limit := dns.MaxMsgSize
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		limit = dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			limit = min(max(int(opt.UDPSize()), dns.MinMsgSize), udpSize)
		}
	}
	m.Truncate(limit)
	_ = w.WriteMsg(m)
}

// isLabel reports whether s is one DNS label of letters, digits and hyphens, the only names
// edgeplane hands out in its zone.
func isLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// relative returns name (lowercase, final dot) relative to zone without the dot between them,
// and whether name is in zone: "x.acme.z." in "z." is "x.acme"; the zone itself is "".
func relative(name, zone string) (string, bool) {
	if name == zone {
		return "", true
	}
	rel, ok := strings.CutSuffix(name, "."+zone)
	return rel, ok
}
