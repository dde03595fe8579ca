package authdns_test

// The DNS server's bounds: what it answers over UDP (truncated to the client's size), what one
// TCP client and all of them can hold, and how many store lookups run at once.

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/edgeplane/edgeplane/authdns"
)

// Answers too large for UDP are truncated to what the client can take (512 bytes without
// EDNS, its buffer up to 1232 with it) with TC set, and given whole over TCP.
func TestTruncation(t *testing.T) {
	t.Parallel()
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.MustParseAddr("2001:db8::"+strconv.FormatInt(int64(i+1), 16)))
	}
	s := start(t, authdns.Config{Addresses: many, Challenges: noStore{}})
	name := "abcdefghijklmnop." + zone + "."
	plain := new(dns.Msg)
	plain.SetQuestion(name, dns.TypeAAAA)
	withEDNS := plain.Copy()
	withEDNS.SetEdns0(4096, false)
	c := &dns.Client{Net: "udp", Timeout: 10 * time.Second, UDPSize: 65535}
	for _, q := range []struct {
		m    *dns.Msg
		size int
	}{{plain, 512}, {withEDNS, 1232}} {
		r, _, err := c.Exchange(q.m, s.udp)
		if err != nil {
			t.Fatal(err)
		}
		r.Compress = true // as sent: Truncate compresses names
		packed, _ := r.Pack()
		if !r.Truncated || len(packed) > q.size || len(r.Answer) == 0 || len(r.Answer) == 100 {
			t.Fatalf("UDP answer of %d bytes with %d records, tc=%v; want at most %d bytes, truncated", len(packed), len(r.Answer), r.Truncated, q.size)
		}
	}
	r := s.exchange(t, "tcp", plain)
	if r.Truncated || len(r.Answer) != 100 {
		t.Fatalf("TCP answer: %d records, tc=%v; want all 100", len(r.Answer), r.Truncated)
	}
}

// A TCP client is held to its bounds: one that sends nothing, or a length and then too few
// bytes, is closed after the read timeout; one address holds at most 16 connections (more are
// closed at once) while another is served.
func TestTCPBounds(t *testing.T) {
	t.Parallel()
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		s := start(t, authdns.Config{Addresses: addrs, Challenges: noStore{}, ReadTimeout: 300 * time.Millisecond})
		for _, send := range [][]byte{nil, {0xff, 0xff, 1, 2, 3}} {
			c, err := net.Dial("tcp", s.tcp)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(send); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := c.Read(make([]byte, 1))
			c.Close()
			if n != 0 || err == nil || isTimeout(err) {
				t.Fatalf("a client that sent %d bytes: read %d, %v; want the server to close the connection", len(send), n, err)
			}
		}
	})
	t.Run("per address", func(t *testing.T) {
		t.Parallel()
		s := start(t, authdns.Config{Addresses: addrs, Challenges: noStore{}, ReadTimeout: time.Minute, IdleTimeout: time.Minute})
		var held []net.Conn
		t.Cleanup(func() {
			for _, c := range held {
				c.Close()
			}
		})
		// Sixteen connections of 127.0.0.1, each answered once so it is surely accepted.
		for range 16 {
			c, err := net.Dial("tcp", s.tcp)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			if r := tcpQuery(t, c); r == nil || len(r.Answer) == 0 {
				t.Fatal("a connection within the limit was not answered")
			}
		}
		extra, err := net.Dial("tcp", s.tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer extra.Close()
		if r := tcpQuery(t, extra); r != nil {
			t.Fatalf("the 17th connection of one address was answered: %v", r)
		}
		// Another address (127.0.0.2, the loopback network) is served meanwhile.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		other, err := d.Dial("tcp", s.tcp)
		if err != nil {
			t.Skipf("no second loopback address: %v", err)
		}
		defer other.Close()
		if r := tcpQuery(t, other); r == nil || len(r.Answer) == 0 {
			t.Fatal("another address was not served while one was at its limit")
		}
	})
}

// tcpQuery sends a query for ns.<zone> A on c and returns the answer, nil when the server closed
// the connection instead.
func tcpQuery(t *testing.T, c net.Conn) *dns.Msg {
	t.Helper()
	co := &dns.Conn{Conn: c}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	m := new(dns.Msg)
	m.SetQuestion("ns."+zone+".", dns.TypeA)
	if err := co.WriteMsg(m); err != nil {
		return nil
	}
	r, err := co.ReadMsg()
	if err != nil {
		if isTimeout(err) {
			t.Fatalf("no answer and no close within 30 s: %v", err)
		}
		return nil
	}
	return r
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// blocking holds every lookup until released, to fill the server's lookups.
type blocking struct {
	started chan struct{}
	release chan struct{}
}

func (b *blocking) DNS01(ctx context.Context, _ string) (string, bool, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return "", false, nil
}

// With 32 challenge lookups in progress, a further query at a challenge name is answered
// SERVFAIL at once rather than queued behind them; the zone's other names are answered as
// usual, and lookups resume once the store answers.
func TestLookupsBounded(t *testing.T) {
	t.Parallel()
	b := &blocking{started: make(chan struct{}, 64), release: make(chan struct{})}
	s := start(t, authdns.Config{Addresses: addrs, Challenges: b})
	name := "aaaaaaaaaaaaaaaa.acme." + zone + "."
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeTXT)
			_, _, _ = (&dns.Client{Net: "udp", Timeout: 30 * time.Second}).Exchange(m, s.udp)
		}()
	}
	for range 32 {
		<-b.started
	}
	if r := s.query(t, "udp", name, dns.TypeTXT); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("a 33rd lookup: %v, want SERVFAIL", r)
	}
	if got := ips(s.query(t, "udp", "ns."+zone+".", dns.TypeA)); got != "192.0.2.10 192.0.2.11" {
		t.Fatalf("A while the lookups are full: %q", got)
	}
	close(b.release)
	wg.Wait()
	if r := s.query(t, "udp", name, dns.TypeTXT); r.Rcode != dns.RcodeNameError {
		t.Fatalf("a lookup after the others ended: %v, want NXDOMAIN", r)
	}
}
