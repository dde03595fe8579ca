package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/authdns"
	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/store"
)

// maxDNSAddresses bounds --dns-addresses: every CNAME target answers with all of them, and a
// handful is what a deployment has.
const maxDNSAddresses = 16

// dnsFlags are serve's flags of edgeplane's DNS server for the CNAME zone.
type dnsFlags struct {
	listen    *string
	addresses *listFlag
}

func addDNSFlags(fs *flag.FlagSet) *dnsFlags {
	return &dnsFlags{
		listen: fs.String("dns-listen", env("EDGEPLANE_DNS_LISTEN", ""),
			`address (UDP and TCP) of the authoritative DNS server for --cname-zone: A/AAAA of CNAME targets, and the DNS-01 answers that give wildcard domains their managed certificates; "" (the default) for none (env EDGEPLANE_DNS_LISTEN)`),
		addresses: newListFlag(fs, "dns-addresses", "EDGEPLANE_DNS_ADDRESSES", ",",
			"IP address the DNS server gives the CNAME targets (and ns.<cname-zone>), the public listeners' address; repeatable (env EDGEPLANE_DNS_ADDRESSES, comma-separated)"),
	}
}

// parse checks the addresses.
func (f *dnsFlags) parse() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, v := range f.addresses.values {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("--dns-addresses: %q is not an IP address", v)
		}
		out = append(out, a.Unmap())
	}
	if len(out) > maxDNSAddresses {
		return nil, fmt.Errorf("--dns-addresses: %d addresses, at most %d", len(out), maxDNSAddresses)
	}
	return out, nil
}

// dnsSockets are the DNS server's sockets: UDP and TCP on the same address.
type dnsSockets struct {
	udp       net.PacketConn
	tcp       net.Listener
	addresses []netip.Addr
	server    *authdns.Server
}

// withoutDataPlane refuses --dns-listen with the data plane off: the DNS server answers the
// challenges of the certificate manager, which runs in the data plane.
func (f *dnsFlags) withoutDataPlane() error {
	if *f.listen != "" {
		return errors.New(`--dns-listen needs the data plane, which --agent-listen "" turns off`)
	}
	return nil
}

// listenDNS takes the DNS server's ports, or none when --dns-listen is empty.
func (f *dnsFlags) listenDNS() (*dnsSockets, error) {
	addrs, err := f.parse()
	if err != nil {
		return nil, err
	}
	if *f.listen == "" {
		if len(addrs) > 0 {
			return nil, errors.New("--dns-addresses needs --dns-listen: they are the DNS server's answers")
		}
		return nil, nil
	}
	s := &dnsSockets{addresses: addrs}
	if s.udp, err = net.ListenPacket("udp", *f.listen); err != nil {
		return nil, fmt.Errorf("--dns-listen: %w", err)
	}
	if s.tcp, err = net.Listen("tcp", *f.listen); err != nil {
		s.udp.Close()
		return nil, fmt.Errorf("--dns-listen: %w", err)
	}
	return s, nil
}

// start serves the CNAME zone of settings, answering DNS-01 challenges from the store.
func (s *dnsSockets) start(st *store.Store, settings ep.Settings, log *slog.Logger) {
	s.server = authdns.New(authdns.Config{Zone: settings.CNAMEZone, Addresses: s.addresses,
		Challenges: certmgr.Answers{Store: st}, Logger: log})
	s.server.Serve(s.udp, s.tcp)
	if len(s.addresses) == 0 {
		log.Warn("dns: no --dns-addresses: CNAME targets are answered without addresses, DNS-01 challenges are answered")
	}
	log.Info("dns listening", "addr", s.tcp.Addr().String(), "zone", settings.CNAMEZone, "addresses", fmt.Sprint(s.addresses))
}

// close stops the server, or releases the sockets of one never started.
func (s *dnsSockets) close() {
	if s.server != nil {
		s.server.Close()
		return
	}
	s.udp.Close()
	s.tcp.Close()
}
