package authdns_test

// The DNS server on real UDP and TCP sockets, queried with miekg/dns's client: what it answers in
// its zone, what it refuses outside it, the challenges it reads from a real store (two accounts,
// two servers on one store as two replicas), the bounds of its answers and of its TCP reads.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/authdns"
	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

const zone = "cname.example.net"

// server is a running DNS server and its addresses.
type server struct {
	*authdns.Server
	udp, tcp string
}

// start runs a server of cfg (Zone defaulted) on ports of 127.0.0.1, stopped when the test ends.
func start(t *testing.T, cfg authdns.Config) *server {
	t.Helper()
	if cfg.Zone == "" {
		cfg.Zone = zone
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := authdns.New(cfg)
	s.Serve(pc, ln)
	t.Cleanup(s.Close)
	return &server{Server: s, udp: pc.LocalAddr().String(), tcp: ln.Addr().String()}
}

// query asks the server name's qtype over network ("udp" or "tcp") and returns the answer.
func (s *server) query(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return s.exchange(t, network, m)
}

func (s *server) exchange(t *testing.T, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	addr := s.udp
	if network == "tcp" {
		addr = s.tcp
	}
	c := &dns.Client{Net: network, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], err)
	}
	return r
}

// noStore answers no challenge; the tests of the zone's static records use it.
type noStore struct{}

func (noStore) DNS01(context.Context, string) (string, bool, error) { return "", false, nil }

var addrs = []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::10")}

func TestZoneRecords(t *testing.T) {
	t.Parallel()
	s := start(t, authdns.Config{Addresses: addrs, Challenges: noStore{}})
	target := "abcdefghijklmnop." + zone + "."
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			// The apex: SOA and NS, authoritative, no recursion offered, the question's case
			// kept (resolvers randomise it to resist spoofing).
			r := s.query(t, network, "CName.Example.NET.", dns.TypeSOA)
			soa, ok := only(t, r, dns.RcodeSuccess).(*dns.SOA)
			if !ok || soa.Hdr.Name != "CName.Example.NET." || soa.Ns != "ns."+zone+"." || soa.Mbox != "hostmaster."+zone+"." || soa.Minttl != 0 {
				t.Fatalf("SOA: %v", r)
			}
			if !r.Authoritative || r.RecursionAvailable {
				t.Fatalf("SOA answer flags: aa=%v ra=%v", r.Authoritative, r.RecursionAvailable)
			}
			if ns, ok := only(t, s.query(t, network, zone+".", dns.TypeNS), dns.RcodeSuccess).(*dns.NS); !ok || ns.Ns != "ns."+zone+"." {
				t.Fatalf("NS: %v", ns)
			}
			// A CNAME target and the name server: the operator's addresses.
			for _, name := range []string{target, "ns." + zone + "."} {
				if got := ips(s.query(t, network, name, dns.TypeA)); got != "192.0.2.10 192.0.2.11" {
					t.Fatalf("A %s: %q", name, got)
				}
				if got := ips(s.query(t, network, name, dns.TypeAAAA)); got != "2001:db8::10" {
					t.Fatalf("AAAA %s: %q", name, got)
				}
			}
			// Names of the zone without the type asked: no data, the SOA for the negative TTL.
			for _, q := range []struct {
				name  string
				qtype uint16
			}{{target, dns.TypeTXT}, {target, dns.TypeMX}, {zone + ".", dns.TypeA}, {"acme." + zone + ".", dns.TypeTXT}} {
				r := s.query(t, network, q.name, q.qtype)
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !hasSOA(r) || !r.Authoritative {
					t.Fatalf("%s %s: %v, want no data with the SOA", q.name, dns.TypeToString[q.qtype], r)
				}
			}
			// Names the zone does not have: NXDOMAIN with the SOA.
			for _, name := range []string{"a.b." + zone + ".", "under_score." + zone + ".", "x.y.acme." + zone + "."} {
				r := s.query(t, network, name, dns.TypeA)
				if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 || !hasSOA(r) {
					t.Fatalf("%s: %v, want NXDOMAIN with the SOA", name, r)
				}
			}
			// ANY gets the small answer of RFC 8482, never every record.
			if h, ok := only(t, s.query(t, network, target, dns.TypeANY), dns.RcodeSuccess).(*dns.HINFO); !ok || h.Cpu != "RFC8482" {
				t.Fatalf("ANY: %v", h)
			}
		})
	}
}

// Outside its zone the server answers nothing and looks nothing up: REFUSED, no records, not
// authoritative, no recursion; so are other classes and opcodes than a query of the Internet
// class.
func TestRefusesOutsideZone(t *testing.T) {
	t.Parallel()
	s := start(t, authdns.Config{Addresses: addrs, Challenges: noStore{}})
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"example.com.", "example.net.", ".", "xcname.example.net.", "version.bind."} {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			m.RecursionDesired = true
			r := s.exchange(t, network, m)
			if r.Rcode != dns.RcodeRefused || len(r.Answer)+len(r.Ns)+len(r.Extra) != 0 || r.Authoritative || r.RecursionAvailable {
				t.Fatalf("%s %s: %v, want a bare REFUSED", network, name, r)
			}
		}
		chaos := new(dns.Msg)
		chaos.SetQuestion("ns."+zone+".", dns.TypeTXT)
		chaos.Question[0].Qclass = dns.ClassCHAOS
		if r := s.exchange(t, network, chaos); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Fatalf("%s CHAOS: %v, want REFUSED", network, r)
		}
		notify := new(dns.Msg)
		notify.SetNotify(zone + ".")
		if r := s.exchange(t, network, notify); r.Rcode != dns.RcodeNotImplemented || len(r.Answer) != 0 {
			t.Fatalf("%s NOTIFY: %v, want NOTIMP", network, r)
		}
		update := new(dns.Msg)
		update.SetUpdate(zone + ".")
		update.Insert([]dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "x." + zone + ".", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(192, 0, 2, 1)}})
		if r := s.exchange(t, network, update); r.Rcode != dns.RcodeNotImplemented {
			t.Fatalf("%s UPDATE: %v, want NOTIMP", network, r)
		}
		two := new(dns.Msg)
		two.SetQuestion("ns."+zone+".", dns.TypeA)
		two.Question = append(two.Question, two.Question[0])
		if r := s.exchange(t, network, two); r.Rcode != dns.RcodeFormatError || len(r.Answer) != 0 {
			t.Fatalf("%s two questions: %v, want FORMERR", network, r)
		}
		badvers := new(dns.Msg)
		badvers.SetQuestion("ns."+zone+".", dns.TypeA)
		badvers.SetEdns0(1232, false)
		badvers.IsEdns0().SetVersion(1)
		if r := s.exchange(t, network, badvers); r.Rcode != dns.RcodeBadVers || len(r.Answer) != 0 {
			t.Fatalf("%s EDNS version 1: %v, want BADVERS", network, r)
		}
	}
}

// A DNS-01 answer is read from the store: published at the job's own name while its challenge
// is pending, on every server of the store (replicas), and gone when the challenge is; another
// account's job answers at its own name and never at this one.
func TestChallengesFromStore(t *testing.T) {
	t.Parallel()
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			st, err := store.Open(context.Background(), testdb.Fresh(t, engine))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			answers := certmgr.Answers{Store: st}
			one := start(t, authdns.Config{Addresses: addrs, Challenges: answers})
			two := start(t, authdns.Config{Addresses: addrs, Challenges: answers})
			nameA, nameB := "aaaaaaaaaaaaaaaa.acme."+zone, "bbbbbbbbbbbbbbbb.acme."+zone
			if r := one.query(t, "udp", nameA+".", dns.TypeTXT); r.Rcode != dns.RcodeNameError {
				t.Fatalf("TXT at A's name before its challenge: %v, want NXDOMAIN", r)
			}
			pending(t, st, "dns-a", "*.a.example.com", nameA, "tokenA")
			wantA, wantB := record("tokenA"), record("tokenB")
			idB := pending(t, st, "dns-b", "*.b.example.com", nameB, "tokenB")
			// The name in any case (resolvers randomise it) finds the challenge.
			if got := txt(t, one, "udp", strings.ToUpper(nameA)); got != wantA {
				t.Fatalf("TXT at A's name in capitals: %q, want %q", got, wantA)
			}
			for _, s := range []*server{one, two} {
				for _, network := range []string{"udp", "tcp"} {
					if got := txt(t, s, network, nameA); got != wantA {
						t.Fatalf("TXT at A's name: %q, want %q", got, wantA)
					}
					if got := txt(t, s, network, nameB); got != wantB {
						t.Fatalf("TXT at B's name: %q, want %q", got, wantB)
					}
				}
			}
			r := one.query(t, "udp", nameA+".", dns.TypeA)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !hasSOA(r) {
				t.Fatalf("A at a pending challenge's name: %v, want no data", r)
			}
			// A name with no job, and B's name once B's challenge is cleared (a failed attempt):
			// NXDOMAIN on every server; A's answer stays.
			clear(t, st, idB)
			for _, s := range []*server{one, two} {
				for _, name := range []string{nameB, "cccccccccccccccc.acme." + zone} {
					if r := s.query(t, "udp", name+".", dns.TypeTXT); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 || !hasSOA(r) {
						t.Fatalf("TXT at %s: %v, want NXDOMAIN", name, r)
					}
				}
				if got := txt(t, s, "udp", nameA); got != wantA {
					t.Fatalf("TXT at A's name after B's was cleared: %q", got)
				}
			}
			// The store closed (a database outage): SERVFAIL, never a negative answer.
			st.Close()
			if r := one.query(t, "udp", nameA+".", dns.TypeTXT); r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
				t.Fatalf("TXT with the store closed: %v, want SERVFAIL", r)
			}
		})
	}
}

// pending reserves host for a new account and stores a pending DNS-01 challenge of its job at
// name, as the certificate manager does; it returns the domain's id.
func pending(t *testing.T, st *store.Store, account, host, name, token string) string {
	t.Helper()
	ctx := context.Background()
	c, _, err := st.EnsureAccount(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	kt := "ecdsa"
	body := &ep.ReservedDomainCreate{Domain: &host, CertificateManagementPolicy: &ep.CertPolicyFields{PrivateKeyType: &kt}}
	if err := body.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := st.Create(ctx, c, ep.ReservedDomains, "", body)
	if err != nil {
		t.Fatal(err)
	}
	id := d.Base().ID
	if _, ok, err := st.AcquireACMELease(ctx, c.AccountID, id, host, "test", time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	if err := st.UpdateACMEJob(ctx, id, "test", time.Minute, func(u *store.ACMEJobUpdate) {
		u.Challenge, u.DNSName = &[2]string{token, token + ".thumbprint"}, &name
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// clear clears the challenge of the domain's job, as a failed attempt does.
func clear(t *testing.T, st *store.Store, id string) {
	t.Helper()
	if err := st.UpdateACMEJob(context.Background(), id, "test", time.Minute, func(u *store.ACMEJobUpdate) { u.Challenge = &[2]string{} }); err != nil {
		t.Fatal(err)
	}
}

// record is the TXT value of the key authorization token.thumbprint, computed here from RFC
// 8555 §8.4 (the base64url SHA-256 of the key authorization), independently of the server.
func record(token string) string {
	sum := sha256.Sum256([]byte(token + ".thumbprint"))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// txt returns the TXT value the server publishes at name (over network), "" when none; more
// than one, or a TTL other than 0, fails the test.
func txt(t *testing.T, s *server, network, name string) string {
	t.Helper()
	r := s.query(t, network, name+".", dns.TypeTXT)
	if len(r.Answer) == 0 {
		return ""
	}
	rr, ok := only(t, r, dns.RcodeSuccess).(*dns.TXT)
	if !ok || len(rr.Txt) != 1 || rr.Hdr.Ttl != 0 || !r.Authoritative {
		t.Fatalf("TXT %s: %v", name, r)
	}
	return rr.Txt[0]
}

// only returns the one answer record of r, which must have rcode.
func only(t *testing.T, r *dns.Msg, rcode int) dns.RR {
	t.Helper()
	if r.Rcode != rcode || len(r.Answer) != 1 {
		t.Fatalf("answer %v, want one record with rcode %s", r, dns.RcodeToString[rcode])
	}
	return r.Answer[0]
}

func hasSOA(r *dns.Msg) bool {
	if len(r.Ns) != 1 {
		return false
	}
	soa, ok := r.Ns[0].(*dns.SOA)
	return ok && soa.Hdr.Name == zone+"."
}

// ips lists the addresses of r's answer, which must be a success.
func ips(r *dns.Msg) string {
	if r.Rcode != dns.RcodeSuccess {
		return "rcode " + dns.RcodeToString[r.Rcode]
	}
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return strings.Join(out, " ")
}
