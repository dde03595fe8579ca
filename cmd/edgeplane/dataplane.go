package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/ingress"
	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/peer"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/store"
	"github.com/edgeplane/edgeplane/tunnel"
)

// The data plane's part of serve: the agent listener (TLS, then the agents' protocol), the
// public HTTP and TLS listeners, and TCP endpoints' listeners, with edgeplane's own CA.

// dataPlaneFlags are serve's data plane flags.
type dataPlaneFlags struct {
	agentListen, httpListen, httpsListen, tcpListenHost *string
	agentHostnames, agentCert, agentKey                 *string
	outboundCA                                          *string
	outbound                                            *outboundFlags
	oauthApps, oauthEndpoints                           *listFlag
	bindSignIn                                          *bindSignInFlags
	acme                                                *acmeFlags
	dns                                                 *dnsFlags
	peer                                                *peerFlags
	// Connection limits (see connLimits).
	agentMax, agentMaxPerIP, agentMaxUnauthPerIP *int
	publicMax, publicMaxPerIP                    *int
	// publicIdle is --public-idle-timeout, parsed by listen.
	publicIdle *string
	iso        *isolationFlags
	fs         *flag.FlagSet
}

// Defaults of the data plane's connection limits. Agents behind one NAT share an address, and
// so do the clients of a public endpoint behind a carrier's NAT: the per-address limits leave
// room for many, and stop one address from taking every slot.
const (
	defaultAgentMax            = 4096
	defaultAgentMaxPerIP       = 256
	defaultAgentMaxUnauthPerIP = 32
	defaultPublicMax           = 4096
	defaultPublicMaxPerIP      = 256
)

func addDataPlaneFlags(fs *flag.FlagSet) *dataPlaneFlags {
	host, _ := os.Hostname()
	hostnames := "localhost,127.0.0.1,::1"
	if host != "" && host != "localhost" {
		hostnames += "," + host
	}
	return &dataPlaneFlags{
		agentListen: fs.String("agent-listen", env("EDGEPLANE_AGENT_LISTEN", "127.0.0.1:4443"),
			`address agents connect to (TLS); "" turns the data plane off (env EDGEPLANE_AGENT_LISTEN)`),
		httpListen: fs.String("http-listen", env("EDGEPLANE_HTTP_LISTEN", "127.0.0.1:8081"),
			`public HTTP listener, routed by Host; "" turns it off (env EDGEPLANE_HTTP_LISTEN)`),
		httpsListen: fs.String("https-listen", env("EDGEPLANE_HTTPS_LISTEN", "127.0.0.1:8443"),
			`public TLS listener for HTTPS and TLS endpoints, routed by SNI; "" turns it off (env EDGEPLANE_HTTPS_LISTEN)`),
		tcpListenHost: fs.String("tcp-listen-host", env("EDGEPLANE_TCP_LISTEN_HOST", "127.0.0.1"),
			"host TCP endpoints listen on, each on the port of its address (env EDGEPLANE_TCP_LISTEN_HOST)"),
		agentHostnames: fs.String("agent-hostnames", env("EDGEPLANE_AGENT_HOSTNAMES", hostnames),
			"comma-separated names and IPs in the agent listener's certificate (env EDGEPLANE_AGENT_HOSTNAMES)"),
		agentCert: fs.String("agent-tls-cert", env("EDGEPLANE_AGENT_TLS_CERT", ""),
			"PEM certificate chain for the agent listener instead of one from edgeplane's CA (env EDGEPLANE_AGENT_TLS_CERT)"),
		agentKey: fs.String("agent-tls-key", env("EDGEPLANE_AGENT_TLS_KEY", ""),
			"PEM private key of --agent-tls-cert (env EDGEPLANE_AGENT_TLS_KEY)"),
		outboundCA: fs.String("outbound-ca", env("EDGEPLANE_OUTBOUND_CA", ""),
			"PEM file of CAs trusted, beside the system's, by the TLS connections edgeplane makes (static backends) (env EDGEPLANE_OUTBOUND_CA)"),
		agentMax: fs.Int("agent-max-connections", envInt("EDGEPLANE_AGENT_MAX_CONNECTIONS", defaultAgentMax),
			"most agent connections open at once; at the limit the one longest in its TLS handshake or before Auth is closed for a new agent, and while all are authenticated more wait in the backlog; 0 for no limit (env EDGEPLANE_AGENT_MAX_CONNECTIONS)"),
		agentMaxPerIP: fs.Int("agent-max-connections-per-ip", envInt("EDGEPLANE_AGENT_MAX_CONNECTIONS_PER_IP", defaultAgentMaxPerIP),
			"most agent connections open at once from one IP address (IPv6: one /64); more are closed at once; 0 for no limit (env EDGEPLANE_AGENT_MAX_CONNECTIONS_PER_IP)"),
		agentMaxUnauthPerIP: fs.Int("agent-max-unauthenticated-per-ip", envInt("EDGEPLANE_AGENT_MAX_UNAUTHENTICATED_PER_IP", defaultAgentMaxUnauthPerIP),
			"most agent connections from one IP address that have not authenticated yet; more are closed at once; 0 for no limit (env EDGEPLANE_AGENT_MAX_UNAUTHENTICATED_PER_IP)"),
		publicMax: fs.Int("public-max-connections", envInt("EDGEPLANE_PUBLIC_MAX_CONNECTIONS", defaultPublicMax),
			"most public connections open at once, HTTP, TLS and TCP endpoints together; at the limit the one unproductive longest (first request head or ClientHello unfinished, or idle) is closed for a new client, and while none is more wait in the backlog; 0 for no limit (env EDGEPLANE_PUBLIC_MAX_CONNECTIONS)"),
		publicMaxPerIP: fs.Int("public-max-connections-per-ip", envInt("EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_IP", defaultPublicMaxPerIP),
			"most public connections open at once from one IP address (IPv6: one /64); more are closed at once; 0 for no limit (env EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_IP)"),
		publicIdle: fs.String("public-idle-timeout", env("EDGEPLANE_PUBLIC_IDLE_TIMEOUT", ingress.DefaultIdleTimeout.String()),
			"longest a public HTTP or HTTPS keep-alive connection waits for its next request; at --public-max-connections an idle one may be closed sooner for a new client (env EDGEPLANE_PUBLIC_IDLE_TIMEOUT)"),
		oauthApps: newListFlag(fs, "oauth-app", "EDGEPLANE_OAUTH_APPS", ",",
			"managed OAuth application PROVIDER=CLIENT_ID:CLIENT_SECRET serving oauth modules without their own client; repeatable (env EDGEPLANE_OAUTH_APPS, comma-separated)"),
		oauthEndpoints: newListFlag(fs, "oauth-endpoints", "EDGEPLANE_OAUTH_ENDPOINTS", ";",
			"override an OAuth provider's endpoints: PROVIDER=AUTHORIZE_URL,TOKEN_URL,USERINFO_URL (https); repeatable (env EDGEPLANE_OAUTH_ENDPOINTS, semicolon-separated)"),
		bindSignIn: addBindSignInFlags(fs),
		outbound:   addOutboundFlags(fs),
		acme:       addACMEFlags(fs),
		iso:        addIsolationFlags(fs),
		dns:        addDNSFlags(fs),
		peer:       addPeerFlags(fs),
		fs:         fs,
	}
}

// connLimits checks the connection limit flags and returns the agent listener's limits and the
// public listeners' (one limiter shared by HTTP, TLS and every TCP endpoint). When a listener is
// at its limit, the connection unproductive longest (idle between HTTP requests, or never past
// its first request head, ClientHello or agent Auth) is closed to admit a new client
// (netx.Limits.Evict): clients that do nothing must not keep others out.
func (f *dataPlaneFlags) connLimits() (agent, public netx.Limits, err error) {
	for _, c := range []struct {
		name, env string
		v         int
	}{
		{"agent-max-connections", "EDGEPLANE_AGENT_MAX_CONNECTIONS", *f.agentMax},
		{"agent-max-connections-per-ip", "EDGEPLANE_AGENT_MAX_CONNECTIONS_PER_IP", *f.agentMaxPerIP},
		{"agent-max-unauthenticated-per-ip", "EDGEPLANE_AGENT_MAX_UNAUTHENTICATED_PER_IP", *f.agentMaxUnauthPerIP},
		{"public-max-connections", "EDGEPLANE_PUBLIC_MAX_CONNECTIONS", *f.publicMax},
		{"public-max-connections-per-ip", "EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_IP", *f.publicMaxPerIP},
	} {
		if err := atLeast(f.fs, c.name, c.env, c.v, 0); err != nil {
			return agent, public, err
		}
	}
	agent = netx.Limits{Max: *f.agentMax, PerAddr: *f.agentMaxPerIP, PerAddrUntrusted: *f.agentMaxUnauthPerIP, Evict: true}
	public = netx.Limits{Max: *f.publicMax, PerAddr: *f.publicMaxPerIP, Evict: true}
	return agent, public, nil
}

// dataPlane is the running data plane, owning its listeners.
type dataPlane struct {
	agentLn, httpLn, httpsLn net.Listener
	operatorCert             *tls.Certificate
	outboundRoots            *x509.CertPool
	// outboundAllowPrivate is --outbound-allow-private.
	outboundAllowPrivate bool
	// inheritedTCP, in a process a handover started, holds the TCP endpoints' and edges'
	// sockets its predecessor passed on, until their ports open here (handover_tcp.go).
	inheritedTCP   *tcpPool
	oauthApps      map[string]enforce.OAuthApp
	oauthEndpoints map[string]enforce.OAuthEndpoints
	bindSignIn     plan.BindSignInLimits
	gw             *tunnel.Gateway
	pub            *ingress.Server
	planner        *plan.Planner
	certs          *certmgr.Manager
	dns            *dnsSockets // nil without --dns-listen
	closeOnce      sync.Once
	// agent and public count the agent listener's and the public listeners' connections, TCP
	// endpoints' included; metrics holds the data plane's own (dataplane_metrics.go).
	agent, public *netx.Limiter
	metrics       dataPlaneMetrics
	// policyLog takes traffic policies' log records, routes' and agents' alike.
	policyLog *enforce.PolicyLog
	// waf is the owasp-crs actions' engine, routes' and agents' alike: compiled once, when the
	// first policy using it is built.
	waf *enforce.WAF
	// publicIdle is the public HTTP and HTTPS listeners' keep-alive idle timeout.
	publicIdle time.Duration
	iso        isolation // what keeps accounts from starving one another (dataplane_limits.go)
	// replica names this process in the session rows.
	replica string
	// inspect configures the traffic inspector (nil: off); rec is it, once start has run.
	inspect *inspect.Config
	rec     *inspect.Recorder
	// publicRoots verify the public TLS listener as its clients do (the system's roots and
	// edgeplane's CA), for the console's replays.
	publicRoots *x509.CertPool
	// peerLn, peerLimiter and peerAdvertise are the link's listener, its limiter and the
	// address other replicas dial; link is the link once started (dataplane_peer.go).
	peerLn        net.Listener
	peerLimiter   *netx.Limiter
	peerAdvertise string
	link          *peer.Link
	st            *store.Store
	// log is the logger evictions are reported to, once start has one.
	log atomic.Pointer[slog.Logger]
	// expected are the endpoints a handover said are coming (handover.go); waiter is the
	// public listeners' patience with them and with those recently online here.
	expected []string
	waiter   *endpointWaiter
}

// listen checks the flags and takes the data plane's ports, before the database is touched, so
// that a port in use fails the start at once.
func (f *dataPlaneFlags) listen(set *socketSet) (*dataPlane, error) {
	d := &dataPlane{metrics: newDataPlaneMetrics(), expected: set.in.expected}
	if set.in != nil {
		d.inheritedTCP = set.in.tcp
	}
	agentLimits, publicLimits, err := f.connLimits()
	if err != nil {
		return nil, err
	}
	if d.iso, err = f.iso.parse(); err != nil {
		return nil, err
	}
	if d.outboundAllowPrivate, err = f.outbound.parse(); err != nil {
		return nil, err
	}
	publicLimits.PerAccount = d.iso.publicPerAccount.of(publicLimits.Max)
	if d.publicIdle, err = time.ParseDuration(*f.publicIdle); err != nil || d.publicIdle <= 0 {
		return nil, fmt.Errorf("--public-idle-timeout must be a positive duration like %s, got %q", ingress.DefaultIdleTimeout, *f.publicIdle)
	}
	if *f.agentListen == "" {
		if *f.peer.listen != "" {
			return nil, errors.New("--peer-listen needs the data plane: it carries public traffic between replicas' agent gateways (--agent-listen)")
		}
		return d, f.dns.withoutDataPlane()
	}
	if d.oauthApps, err = parseOAuthApps(f.oauthApps.values); err != nil {
		return nil, err
	}
	if d.oauthEndpoints, err = parseOAuthEndpoints(f.oauthEndpoints.values); err != nil {
		return nil, err
	}
	if d.bindSignIn, err = f.bindSignIn.limits(); err != nil {
		return nil, err
	}
	if (*f.agentCert == "") != (*f.agentKey == "") {
		return nil, errors.New("--agent-tls-cert and --agent-tls-key go together")
	}
	if *f.agentCert != "" {
		cert, err := tls.LoadX509KeyPair(*f.agentCert, *f.agentKey)
		if err != nil {
			return nil, fmt.Errorf("--agent-tls-cert/--agent-tls-key: %w", err)
		}
		d.operatorCert = &cert
	}
	if *f.outboundCA != "" {
		pem, err := os.ReadFile(*f.outboundCA)
		if err != nil {
			return nil, fmt.Errorf("--outbound-ca: %w", err)
		}
		if d.outboundRoots, err = x509.SystemCertPool(); err != nil {
			d.outboundRoots = x509.NewCertPool()
		}
		if !d.outboundRoots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--outbound-ca: %s holds no PEM certificate", *f.outboundCA)
		}
	}
	take := func(name, addr string) net.Listener {
		if err != nil || addr == "" {
			return nil
		}
		var ln net.Listener
		ln, err = set.listen(name, addr)
		return ln
	}
	d.agentLn = take("agent", *f.agentListen)
	d.httpLn = take("http", *f.httpListen)
	d.httpsLn = take("https", *f.httpsListen)
	if err == nil {
		d.dns, err = f.dns.listenDNS()
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	// Agents must authenticate, and public HTTP and TLS clients send a request head or a
	// ClientHello, before their connection is safe from eviction (ListenPending); TCP
	// endpoints' connections (ingress.ListenTCP) are safe from their first byte, or none.
	agentLimits.OnEvict = d.logEviction("agent")
	publicLimits.OnEvict = d.logEviction("public")
	d.agent = netx.NewLimiter(agentLimits)
	d.agentLn = d.agent.ListenPending(d.agentLn)
	d.public = netx.NewLimiter(publicLimits)
	if d.httpLn != nil {
		d.httpLn = d.public.ListenPending(d.httpLn)
	}
	if d.httpsLn != nil {
		d.httpsLn = d.public.ListenPending(d.httpsLn)
	}
	if err := d.listenPeer(f.peer, set); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// start runs the gateway and the public listeners.
func (d *dataPlane) start(ctx context.Context, f *dataPlaneFlags, st *store.Store, settings ep.Settings, log *slog.Logger) error {
	if d.agentLn == nil {
		log.Info("data plane off (--agent-listen is empty)")
		return nil
	}
	ca, err := loadCA(ctx, st)
	if err != nil {
		return err
	}
	agentCert := d.operatorCert
	if agentCert == nil {
		if agentCert, err = ca.Issue(splitList(*f.agentHostnames)...); err != nil {
			return fmt.Errorf("--agent-hostnames: %w", err)
		}
	}
	d.replica, _ = ep.NewID("rep")
	d.st = st
	d.log.Store(log)
	if d.publicRoots, err = x509.SystemCertPool(); err != nil {
		d.publicRoots = x509.NewCertPool()
	}
	d.publicRoots.AppendCertsFromPEM([]byte(ca.CertPEM))
	var rec ingress.Recorder
	if d.inspect != nil {
		cfg := *d.inspect
		cfg.Replica = d.replica
		d.rec = inspect.NewRecorder(cfg)
		rec = d.rec
	}
	certs := ingress.NewCerts(ca)
	d.pub = ingress.New(ingress.Config{
		Recorder:             rec,
		Certificate:          certs.Certificate,
		TCPHost:              *f.tcpListenHost,
		Inherited:            d.inheritedTCP,
		OutboundRoots:        d.outboundRoots,
		OutboundAllowPrivate: d.outboundAllowPrivate,
		Limiter:              d.public,
		IdleTimeout:          d.publicIdle,
		HeaderTimeout:        d.iso.headerTimeout,
		TCPIdle:              d.iso.tcpIdle,
		BodyTimeout:          d.iso.bodyTimeout,
		Logger:               log,
	})
	d.policyLog = enforce.NewPolicyLog(log)
	d.waf = enforce.NewWAF()
	link, err := d.startPeer(ctx, ca, log)
	if err != nil {
		return err
	}
	// The environment of the modules, routes' and agents' alike: the sign-in key, the managed
	// OAuth applications, the outbound client, the policy log.
	env := d.pub.Env(st)
	if env.SessionKey, err = loadSessionKey(ctx, st); err != nil {
		return err
	}
	env.OAuthApps, env.OAuthEndpoints = d.oauthApps, d.oauthEndpoints
	env.BindSignIn = d.bindSignIn
	env.PolicyLog = d.policyLog
	env.WAF = d.waf
	d.gw = tunnel.New(tunnel.Config{
		Env:       env,
		PolicyLog: d.policyLog,
		Link:      link,
		Store:     st,
		TLS:       &tls.Config{Certificates: []tls.Certificate{*agentCert}, MinVersion: tls.VersionTLS12},
		Settings:  settings,
		ListenTCP: d.listenTCP,
		Awaited:   d.inheritedTCP.holds,
		TCPIdle:   d.iso.tcpIdle,
		Quotas:    d.iso.resolve(settings),
		// Auto-tuned proxy stream windows, out of one budget for the process.
		WindowBudget: d.iso.windowBudget,
		CarryTCP:     func(c net.Conn, t tunnel.Endpoint, addr string) { d.pub.ServeTCPEndpoint(c, t, addr) },
		// Another replica draining: the connections kept idle to its agents would hold them.
		OnPeerDraining: d.pub.CloseIdleUpstreams,
		Replica:        d.replica,
		Logger:         log,
		Version:        versionString(),
	})
	// One view of the endpoints for the listeners: this replica's agents' and, with a link,
	// the other replicas'; patient with those whose agents are moving (dataplane_drain.go).
	d.setLookups(newEndpointWaiter(d.expected))
	if d.planner, err = plan.NewPlanner(ctx, st, log, d.pub.EdgeHandler(), env, d.metrics.observePlanBuild); err != nil {
		return fmt.Errorf("routing plan: %w", err)
	}
	d.pub.SetPlan(d.planner.Plan)
	d.planner.OnSwap(d.pub.SyncTCPEdges)
	d.planner.Start()
	// No database query on a handshake: the plan knows the edges, reserved domains and their
	// uploaded certificates; the registry the online endpoints.
	certs.Allowed = func(host string) bool {
		pl := d.planner.Plan()
		return d.gw.Online("https", host) || d.gw.Online("tls", host) || pl.Serves(host) || pl.Reserved(host) || d.gw.Unrouted(host) ||
			d.waiter.expected("https://"+host) || d.waiter.expected("tls://"+host)
	}
	certs.Uploaded = func(host string) *tls.Certificate { return d.planner.Plan().Certificate(host) }
	certs.ServiceDomains = settings.ServiceDomains
	if d.dns != nil {
		d.dns.start(st, settings, log)
	}
	if err := d.startCertManager(f.acme, st, log); err != nil {
		return err
	}
	go func() { _ = d.gw.Serve(d.agentLn) }()
	d.servePeer()
	d.awaitDirectory(ctx, log)
	if d.httpLn != nil {
		go func() { _ = d.pub.ServeHTTP(d.httpLn) }()
	}
	if d.httpsLn != nil {
		go func() { _ = d.pub.ServeTLS(d.httpsLn) }()
	}
	if d.outboundAllowPrivate {
		log.Warn("--outbound-allow-private: the URLs accounts configure may reach this network's loopback, private and link-local addresses (cloud metadata included)")
	}
	log.Info("data plane listening", "agents", addrOf(d.agentLn), "http", addrOf(d.httpLn), "https", addrOf(d.httpsLn),
		"tcp_host", *f.tcpListenHost, "peer", addrOf(d.peerLn), "peer_advertise", d.peerAdvertise, "replica", d.replica)
	return nil
}

// tcpListeners returns the TCP endpoints' and edges' listening sockets a handover passes on:
// those open here, and those inherited that no bind or edge has taken yet (their endpoints
// may still come back).
func (d *dataPlane) tcpListeners() map[int]*net.TCPListener {
	lns := d.inheritedTCP.pending()
	if d.pub != nil {
		for port, ln := range d.pub.TCPListeners() {
			lns[port] = ln
		}
	}
	return lns
}

// listenTCP is the gateway's Config.ListenTCP: the public listeners' (ingress), whose
// listeners move to another account when their address does (tunnel.TCPListener).
func (d *dataPlane) listenTCP(port int, account string, serve func(net.Conn)) (tunnel.TCPListener, error) {
	return d.pub.ListenTCP(port, account, serve)
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// Close stops the data plane: agents are disconnected (they reconnect), listeners closed.
func (d *dataPlane) Close() {
	d.closeOnce.Do(d.close)
}

func (d *dataPlane) close() {
	for _, ln := range []net.Listener{d.agentLn, d.httpLn, d.httpsLn, d.peerLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if d.certs != nil {
		d.certs.Close()
	}
	if d.dns != nil {
		d.dns.close()
	}
	if d.gw != nil {
		d.gw.Close()
	}
	if d.link != nil {
		d.link.Close()
	}
	if d.planner != nil {
		d.planner.Close()
	}
	if d.pub != nil {
		d.pub.Close()
	}
}
