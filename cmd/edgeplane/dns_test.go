package main

// serve's DNS server (--dns-listen, --dns-addresses): its flags' errors, and the server it runs
// for --cname-zone, queried over UDP and TCP. Its answers in detail are authdns's tests; wildcard
// certificates through it are certmgr's and e2e/agents' (a real agent and Pebble).

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestDNSFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held := freePort(t)
	busy, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(held))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := []string{"serve", "--db", filepath.Join(dir, "x.db"), "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--agent-listen", "", "--dns-listen", "127.0.0.1:0"}, nil, `--dns-listen needs the data plane, which --agent-listen "" turns off`},
		{[]string{"--agent-listen", "127.0.0.1:0", "--dns-listen", "127.0.0.1:0", "--dns-addresses", "not-an-ip"}, nil, `--dns-addresses: "not-an-ip" is not an IP address`},
		{[]string{"--agent-listen", "127.0.0.1:0", "--dns-addresses", "192.0.2.1"}, nil, "--dns-addresses needs --dns-listen"},
		{[]string{"--agent-listen", "127.0.0.1:0", "--dns-listen", "127.0.0.1:" + strconv.Itoa(held)}, nil, "--dns-listen: listen tcp 127.0.0.1:" + strconv.Itoa(held)},
		{[]string{"--agent-listen", "127.0.0.1:0"}, []string{"EDGEPLANE_DNS_LISTEN=not an address"}, "--dns-listen:"},
	} {
		_, stderr, code := runBin(t, c.env, append(base, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Fatalf("serve %q %q: exit %d, stderr:\n%s\nwant it to say %q", c.args, c.env, code, stderr, c.want)
		}
	}
}

// serve with EDGEPLANE_DNS_LISTEN answers for its --cname-zone on UDP and TCP: the addresses of
// --dns-addresses for a CNAME target, the zone's SOA, REFUSED outside it.
func TestDNSServerOfServe(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := startServe(t, "", []string{"EDGEPLANE_DNS_LISTEN=" + addr, "EDGEPLANE_DNS_ADDRESSES=192.0.2.7,2001:db8::7"},
		"--db", filepath.Join(t.TempDir(), "edgeplane.db"), "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
		"--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0", "--cname-zone", "Edge.Example.NET")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.Stderr.String(), `msg="dns listening"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no dns listening line; stderr:\n%s", p.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 10 * time.Second}
		ask := func(name string, qtype uint16) *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(name, qtype)
			r, _, err := c.Exchange(m, addr)
			if err != nil {
				t.Fatalf("%s %s: %v", network, name, err)
			}
			return r
		}
		if r := ask("abcdefghijklmnop.edge.example.net.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.7" || !r.Authoritative {
			t.Fatalf("%s A of a CNAME target: %v", network, r)
		}
		if r := ask("abcdefghijklmnop.edge.example.net.", dns.TypeAAAA); len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "2001:db8::7" {
			t.Fatalf("%s AAAA of a CNAME target: %v", network, r)
		}
		if r := ask("edge.example.net.", dns.TypeSOA); len(r.Answer) != 1 || r.Answer[0].(*dns.SOA).Ns != "ns.edge.example.net." {
			t.Fatalf("%s SOA: %v", network, r)
		}
		if r := ask("example.com.", dns.TypeA); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Fatalf("%s outside the zone: %v", network, r)
		}
	}
}
