package authdns

import (
	"context"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// TTLs of the answers. Addresses and the zone's own records change only with the server's flags;
// a challenge's TXT value changes with every attempt and must never be served from a cache, nor
// the absence of one (the negative TTL is the SOA's minimum).
const (
	ttlStatic = 300
	ttlTXT    = 0
	negTTL    = 0
)

// answerer builds the answers of the zone.
type answerer struct {
	zone       string // lowercase, with the final dot
	v4, v6     []netip.Addr
	challenges Challenges
	sem        chan struct{} // bounds the challenge lookups in progress
}

// answer returns the response to r, a query of one question.
func (a *answerer) answer(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = false
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(udpSize, false)
		if opt.Version() != 0 { // RFC 6891 §6.1.3
			m.Rcode = dns.RcodeBadVers
			return m
		}
	}
	if r.Opcode != dns.OpcodeQuery { // a NOTIFY: this server has no secondary role
		m.Rcode = dns.RcodeNotImplemented
		return m
	}
	q := r.Question[0]
	name := dns.CanonicalName(q.Name)
	rel, inZone := relative(name, a.zone)
	if !inZone || (q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY) {
		// Not ours, and no resolver: nothing is looked up elsewhere.
		m.Rcode = dns.RcodeRefused
		return m
	}
	m.Authoritative = true
	labels := strings.Split(rel, ".")
	switch {
	case rel == "":
		switch q.Qtype {
		case dns.TypeSOA:
			m.Answer = []dns.RR{a.soa(q.Name)}
		case dns.TypeNS:
			m.Answer = []dns.RR{a.ns(q.Name)}
		}
	case rel == "acme":
		// An empty non-terminal: the challenge names are below it.
	case len(labels) == 2 && labels[1] == "acme" && isLabel(labels[0]):
		if !a.challenge(m, q, name) {
			return m
		}
	case len(labels) == 1 && isLabel(rel):
		// The zone's name server and every cname_target name: the operator's addresses.
		m.Answer = a.addresses(q)
	default:
		m.Rcode = dns.RcodeNameError
	}
	if q.Qtype == dns.TypeANY && m.Rcode == dns.RcodeSuccess {
		// RFC 8482: a small synthesized answer rather than every record of the name, so ANY
		// queries cannot make an answer larger.
		m.Answer = []dns.RR{&dns.HINFO{Hdr: hdr(q.Name, dns.TypeHINFO, ttlStatic), Cpu: "RFC8482"}}
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{a.soa(a.zone)}
	}
	return m
}

// challenge answers a query at a challenge name (name, canonical) from the pending challenges:
// the TXT value when one is pending there (and no data for the name's other types), NXDOMAIN
// when none is. It reports whether m is to get the zone's SOA as any answer without records
// does; false when the lookup failed and m is SERVFAIL.
func (a *answerer) challenge(m *dns.Msg, q dns.Question, name string) bool {
	select {
	case a.sem <- struct{}{}:
	default:
		m.Rcode, m.Authoritative = dns.RcodeServerFailure, false
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	value, ok, err := a.challenges.DNS01(ctx, strings.TrimSuffix(name, "."))
	cancel()
	<-a.sem
	switch {
	case err != nil:
		m.Rcode, m.Authoritative = dns.RcodeServerFailure, false
		return false
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeTXT:
		m.Answer = []dns.RR{&dns.TXT{Hdr: hdr(q.Name, dns.TypeTXT, ttlTXT), Txt: []string{value}}}
	}
	return true
}

// addresses are the A or AAAA records of the operator's addresses, as q asks.
func (a *answerer) addresses(q dns.Question) []dns.RR {
	var out []dns.RR
	switch q.Qtype {
	case dns.TypeA:
		for _, ip := range a.v4 {
			out = append(out, &dns.A{Hdr: hdr(q.Name, dns.TypeA, ttlStatic), A: ip.AsSlice()})
		}
	case dns.TypeAAAA:
		for _, ip := range a.v6 {
			out = append(out, &dns.AAAA{Hdr: hdr(q.Name, dns.TypeAAAA, ttlStatic), AAAA: ip.AsSlice()})
		}
	}
	return out
}

// soa is the zone's SOA record under owner (the question's spelling at the apex). The serial
// never changes: the zone is never transferred, its records are answered as they are.
func (a *answerer) soa(owner string) dns.RR {
	return &dns.SOA{Hdr: hdr(owner, dns.TypeSOA, ttlStatic), Ns: "ns." + a.zone, Mbox: "hostmaster." + a.zone,
		Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: negTTL}
}

// ns is the zone's NS record: ns.<zone>, which answers with the operator's addresses.
func (a *answerer) ns(owner string) dns.RR {
	return &dns.NS{Hdr: hdr(owner, dns.TypeNS, ttlStatic), Ns: "ns." + a.zone}
}

func hdr(name string, rrtype uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: ttl}
}
