package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/peer"
	"github.com/edgeplane/edgeplane/pki"
)

// The link between replicas (package peer): where this replica accepts the others' links, the
// address it tells them to dial, its link certificate from edgeplane's CA, and the link's
// metrics. Without --peer-listen there is no link, and a single server is as before.

// peerFlags are serve's flags of the link.
type peerFlags struct {
	listen, advertise *string
}

func addPeerFlags(fs *flag.FlagSet) *peerFlags {
	return &peerFlags{
		listen: fs.String("peer-listen", env("EDGEPLANE_PEER_LISTEN", ""),
			`address other replicas' links connect to (mutual TLS with edgeplane's CA); "" (the default) runs no link: public traffic reaches only this replica's agents (env EDGEPLANE_PEER_LISTEN)`),
		advertise: fs.String("peer-advertise", env("EDGEPLANE_PEER_ADVERTISE", ""),
			"host:port the other replicas dial to reach --peer-listen, written in this replica's row; default the listen address, which must then name one interface (env EDGEPLANE_PEER_ADVERTISE)"),
	}
}

// Limits of the link's listener. Replicas are few and each dials one link to each other, so
// these are far above what they use; they bound what anything else reaching the port can hold
// before its handshake fails (every connection without a replica's certificate does, within 5 s).
const (
	peerMaxConnections      = 256
	peerMaxConnectionsPerIP = 16
	peerMaxUnauthPerIP      = 8
)

// listenPeer takes the link's port and works out the address this replica advertises: the
// flag's, else the listener's own, which must then name one interface (other replicas cannot
// dial 0.0.0.0 or [::]).
func (d *dataPlane) listenPeer(f *peerFlags, set *socketSet) error {
	if *f.listen == "" {
		if *f.advertise != "" {
			return errors.New("--peer-advertise needs --peer-listen: there is no link to advertise")
		}
		return nil
	}
	advertise := *f.advertise
	if advertise != "" {
		if err := dialable(advertise); err != nil {
			return fmt.Errorf("--peer-advertise %q: %w", advertise, err)
		}
	}
	ln, err := set.listen("peer", *f.listen)
	if err != nil {
		return err
	}
	if advertise == "" {
		if err := dialable(ln.Addr().String()); err != nil {
			ln.Close()
			return fmt.Errorf("--peer-listen %s listens on every interface: give --peer-advertise, the host:port other replicas dial to reach it", *f.listen)
		}
		advertise = ln.Addr().String()
	}
	d.peerAdvertise = advertise
	d.peerLimiter = netx.NewLimiter(netx.Limits{Max: peerMaxConnections, PerAddr: peerMaxConnectionsPerIP,
		PerAddrUntrusted: peerMaxUnauthPerIP, Evict: true, OnEvict: d.logEviction("peer")})
	d.peerLn = d.peerLimiter.ListenPending(ln)
	return nil
}

// dialable checks that addr is a host:port another replica can dial: a port, and a host that
// is not the unspecified address.
func dialable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("not host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("no port other replicas can dial")
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return errors.New("no host other replicas can dial")
	}
	return nil
}

// startPeer makes this replica's link: its certificate from edgeplane's CA (renewed in memory
// as it ages), the gateway's tunnels as what forwarded streams reach, and its address in the
// replica's row. The link serves once the gateway runs (servePeer).
func (d *dataPlane) startPeer(ctx context.Context, ca *pki.CA, log *slog.Logger) (*peer.Link, error) {
	if d.peerLn == nil {
		return nil, nil
	}
	id, err := peer.NewIdentity(ca.Cert, ca.Signer(), d.replica)
	if err != nil {
		return nil, fmt.Errorf("link certificate: %w", err)
	}
	link, err := peer.New(peer.Config{Identity: id, Logger: log,
		Accept: func(ctx context.Context, req peer.Request) (net.Conn, error) { return d.gw.AcceptPeer(ctx, req) }})
	if err != nil {
		return nil, err
	}
	if err := d.st.AnnounceReplica(ctx, d.replica, d.peerAdvertise); err != nil {
		link.Close()
		return nil, fmt.Errorf("record the link address: %w", err)
	}
	d.link = link
	return link, nil
}

// servePeer accepts the other replicas' links.
func (d *dataPlane) servePeer() {
	if d.link != nil {
		go func() { _ = d.link.Serve(d.peerLn) }()
	}
}

// directoryWait bounds how long a starting replica waits for its view of the other replicas'
// tunnels before its public listeners serve: a replica whose row is live but whose link cannot be
// made (a partition) must not keep this one from serving its own agents' endpoints.
const directoryWait = 5 * time.Second

// awaitDirectory returns once the gateway routes to every other live replica's tunnels
// (tunnel.Gateway.DirectoryComplete), or after directoryWait. Until then the public listeners
// do not accept: a successor's connections go to the process handing over, which still serves
// them all, and a fresh replica's wait in the sockets' backlog. Serving before would answer
// ERR_NGROK_3200 for an endpoint online on another replica, or leave a request waiting for it as
// for an agent on the move, and one whose wait ran out would forget it.
func (d *dataPlane) awaitDirectory(ctx context.Context, log *slog.Logger) {
	if d.gw == nil {
		return
	}
	start := time.Now()
	t := time.NewTimer(directoryWait)
	defer t.Stop()
	select {
	case <-d.gw.DirectoryComplete():
		log.Debug("directory complete", "took", time.Since(start).Round(time.Millisecond))
	case <-t.C:
		log.Warn("directory: the other replicas' tunnels are not all routed to yet; serving anyway", "waited", directoryWait)
	case <-ctx.Done():
	}
}

// The link's metrics, per peer. They are labelled by the address the peer advertises (the
// operator's --peer-advertise), not by its replica id, which is new at every start: one series
// per peer machine across its restarts.
var (
	peerUpDesc = prometheus.NewDesc("edgeplane_peer_link_up",
		"Whether this replica's link to the peer is up (1) or down (0).", []string{"peer"}, nil)
	peerStreamsDesc = prometheus.NewDesc("edgeplane_peer_streams_open",
		"Link streams open now, by direction: out (public connections this replica forwards to the peer's agents), in (the peer's, to this replica's agents).",
		[]string{"peer", "direction"}, nil)
	peerForwardedDesc = prometheus.NewDesc("edgeplane_peer_forwarded_total",
		"Public connections and requests carried over the link, by direction and result: ok (the holder reached the agent), refused (no such tunnel, agent unreachable, busy, or the link failed first).",
		[]string{"peer", "direction", "result"}, nil)
	peerBytesDesc = prometheus.NewDesc("edgeplane_peer_bytes_total",
		"Bytes of forwarded connections carried over the link, by direction: sent to the peer, received from it.",
		[]string{"peer", "direction"}, nil)
	remoteTunnelsDesc = prometheus.NewDesc("edgeplane_remote_tunnels",
		"Tunnels of other replicas' agents this replica routes public traffic to now.", nil, nil)
)

// peerCollector reports the link's counts (peer.Link.Stats), read when scraped.
type peerCollector struct{ d *dataPlane }

func (c *peerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{peerUpDesc, peerStreamsDesc, peerForwardedDesc, peerBytesDesc, remoteTunnelsDesc} {
		ch <- d
	}
}

func (c *peerCollector) Collect(ch chan<- prometheus.Metric) {
	// Several replica ids may have had one address (a peer restarted): their counts add up.
	type sums struct {
		up                                 bool
		streamsOut, streamsIn              int64
		okOut, okIn, refusedOut, refusedIn uint64
		sent, received                     uint64
	}
	byAddr := map[string]*sums{}
	for _, st := range c.d.link.Stats() {
		addr := st.Addr
		if addr == "" {
			addr = "unknown" // a peer that dialled this replica but was never dialled from here
		}
		s := byAddr[addr]
		if s == nil {
			s = &sums{}
			byAddr[addr] = s
		}
		s.up = s.up || st.Up
		s.streamsOut += st.StreamsOut
		s.streamsIn += st.StreamsIn
		s.okOut += st.ForwardedOut
		s.okIn += st.ForwardedIn
		s.refusedOut += st.RefusedOut
		s.refusedIn += st.RefusedIn
		s.sent += st.BytesOut
		s.received += st.BytesIn
	}
	addrs := make([]string, 0, len(byAddr))
	for a := range byAddr {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		s := byAddr[a]
		up := 0.0
		if s.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(peerUpDesc, prometheus.GaugeValue, up, a)
		ch <- prometheus.MustNewConstMetric(peerStreamsDesc, prometheus.GaugeValue, float64(s.streamsOut), a, "out")
		ch <- prometheus.MustNewConstMetric(peerStreamsDesc, prometheus.GaugeValue, float64(s.streamsIn), a, "in")
		ch <- prometheus.MustNewConstMetric(peerForwardedDesc, prometheus.CounterValue, float64(s.okOut), a, "out", "ok")
		ch <- prometheus.MustNewConstMetric(peerForwardedDesc, prometheus.CounterValue, float64(s.okIn), a, "in", "ok")
		ch <- prometheus.MustNewConstMetric(peerForwardedDesc, prometheus.CounterValue, float64(s.refusedOut), a, "out", "refused")
		ch <- prometheus.MustNewConstMetric(peerForwardedDesc, prometheus.CounterValue, float64(s.refusedIn), a, "in", "refused")
		ch <- prometheus.MustNewConstMetric(peerBytesDesc, prometheus.CounterValue, float64(s.sent), a, "sent")
		ch <- prometheus.MustNewConstMetric(peerBytesDesc, prometheus.CounterValue, float64(s.received), a, "received")
	}
	ch <- prometheus.MustNewConstMetric(remoteTunnelsDesc, prometheus.GaugeValue, float64(c.d.gw.RemoteTunnels()))
}
