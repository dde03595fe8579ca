package pebbletest

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The resolver Pebble asks when a test serves a zone of its own (Options.ZoneServer). Pebble's
// validation authority sends each query to one server and reads the records of its answer, as
// it would from a recursive resolver. pebble-challtestsrv stands for the DNS of every domain (the
// user's provider, where the test sets _acme-challenge CNAME records), but follows a CNAME only
// within its own data: it never asks another server. This resolver does what the resolver of a
// real ACME server does with the zone's delegation: it asks the test DNS server, and when the
// answer is a CNAME chain into the zone, asks the zone's server (edgeplane's DNS) for the
// target and answers with the chain and what that server said (its records and its rcode).

// maxChain bounds the CNAME records followed.
const maxChain = 8

// startResolver runs the resolver on a UDP port of 127.0.0.1 for the test and returns its
// address. upstream is the test DNS server, zone the zone served by zoneServer.
func startResolver(t testing.TB, upstream, zone, zoneServer string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	zone = dns.CanonicalName(zone)
	client := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		_ = w.WriteMsg(resolve(client, r, upstream, zone, zoneServer))
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() {
		if srv.Shutdown() != nil {
			pc.Close()
		}
	})
	return pc.LocalAddr().String()
}

// resolve answers the query r: from the zone's server for a name in the zone, reached directly
// or through the upstream's CNAME records, else from the upstream.
func resolve(c *dns.Client, r *dns.Msg, upstream, zone, zoneServer string) *dns.Msg {
	fail := new(dns.Msg)
	fail.SetRcode(r, dns.RcodeServerFailure)
	q := r.Question[0]
	inZone := func(name string) bool {
		name = dns.CanonicalName(name)
		return name == zone || strings.HasSuffix(name, "."+zone)
	}
	ask := func(server, name string) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, q.Qtype)
		in, _, err := c.Exchange(m, server)
		if err != nil {
			return nil
		}
		return in
	}
	var chain []dns.RR
	name := q.Name
	if !inZone(name) {
		up := ask(upstream, name)
		if up == nil {
			return fail
		}
		for range maxChain {
			next := ""
			for _, rr := range up.Answer {
				if cn, ok := rr.(*dns.CNAME); ok && strings.EqualFold(cn.Hdr.Name, name) {
					chain, next = append(chain, cn), cn.Target
				}
			}
			if next == "" {
				break
			}
			name = next
		}
		if !inZone(name) {
			up.Id = r.Id
			return up
		}
	}
	in := ask(zoneServer, name)
	if in == nil {
		return fail
	}
	out := new(dns.Msg)
	out.SetRcode(r, in.Rcode)
	out.Answer = append(chain, in.Answer...)
	out.Ns = in.Ns
	return out
}
