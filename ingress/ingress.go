// Package ingress is edgeplane's public side: the HTTP listener (routed by Host), the TLS
// listener shared by HTTPS and TLS endpoints (routed by SNI, terminated or passed through), and
// one TCP listener per tcp endpoint. It reaches agents through the Endpoint interface it declares,
// so it never imports the agent gateway; cmd wires the two together.
package ingress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/plan"
)

// Endpoint is an online endpoint as the public listeners use it: an agent's tunnel, its module
// stages, and a way to open a proxy stream to it.
type Endpoint interface {
	// ID is the tunnel's id (for connection pooling and logs).
	ID() string
	// AccountID is the account of the agent's credential: only the account holding a host may
	// serve it (holder.go), its public connections count against that account's share of
	// the public listeners (netx.Claim), and its inspector records the endpoint's traffic.
	AccountID() string
	// Chain is the stages of the endpoint's modules; nil when it has none.
	Chain() *enforce.Chain
	// HTTPHandler returns the handler build makes, built on the first call and kept: the
	// endpoint's stages are composed once per bind, not per request.
	HTTPHandler(build func() http.Handler) http.Handler
	// DecideConn runs the endpoint's connection stages (IP restriction, then the on_tcp_connect
	// rules of its traffic policy) on a public connection before any byte of it reaches the
	// agent: closed, carried, or handed to an internal endpoint (forward-internal); hello is
	// a tls endpoint's ClientHello, for conn.tls.sni and conn.tls.ja4_fingerprint (nil on tcp).
	DecideConn(c net.Conn, hello *enforce.TLSHello) enforce.ConnVerdict
	// Passthrough reports whether a tls endpoint's public TLS is carried to the agent untouched;
	// false means the listener terminates it (TLS termination) and carries the plaintext.
	Passthrough() bool
	// TLSFor is what the endpoint asks of a public client's TLS where the listener terminates
	// it, by the connection's ClientHello (a traffic policy's terminate-tls may depend on it):
	// client certificates (mutual TLS), applied as an edge's are, the TLS versions, the
	// certificate to present (nil: the host's, from Certificate) and, on a tls endpoint,
	// whether this connection is terminated here. An error refuses the handshake.
	TLSFor(h plan.Hello) (plan.ConnTLS, error)
	// Dial opens a stream to the agent for one public connection from clientAddr. An error
	// with an EndpointOffline method that reports true says the endpoint went offline between
	// its lookup and the dial (its agent left and did not come back): an HTTP request is then
	// answered as for an offline endpoint, 404 ERR_NGROK_3200, not as a failed tunnel. A
	// stream that may come to hold window budget is a WindowHolder, so that the proxy does not
	// keep it idle while it holds some.
	Dial(ctx context.Context, clientAddr, proto, edgeType string, passthrough bool) (net.Conn, error)
}

// offline reports whether err says the endpoint went offline before it could be dialled.
func offline(err error) bool {
	var o interface{ EndpointOffline() bool }
	return errors.As(err, &o) && o.EndpointOffline()
}

// Config is what the public listeners need.
type Config struct {
	// Lookup returns the online endpoint for proto (http, https, tls) and a lowercase host, or
	// nil.
	Lookup func(proto, host string) Endpoint
	// Certificate returns the certificate to present for a hostname, or an error when edgeplane
	// serves no such name (the handshake then fails).
	Certificate func(host string) (*tls.Certificate, error)
	// Labeled returns the online labeled tunnels of an account whose labels include labels:
	// the tunnels a tunnel-group backend may choose from.
	Labeled func(account string, labels map[string]string) []Endpoint
	// Plan returns the current routing plan of edges; nil (or a nil plan) serves no edge.
	Plan func() *plan.Plan
	// TCPHost is the address TCP endpoints listen on (--tcp-listen-host).
	TCPHost string
	// Inherited, in a process a handover started, holds the TCP endpoints' and edges'
	// listening sockets its predecessor passed on: ListenTCP takes a port's socket from it
	// rather than binding the port. Nil for any other process.
	Inherited InheritedPorts
	// OutboundRoots are the CAs trusted by TLS connections to static backends; nil is the
	// system's (--outbound-ca adds to them).
	OutboundRoots *x509.CertPool
	// OutboundAllowPrivate lets the requests and connections an account's configuration makes
	// edgeplane send (key sets, identity providers, http-request, static backends) reach
	// loopback, private, link-local and other non-public addresses (--outbound-allow-private);
	// without it they are refused on every dial.
	OutboundAllowPrivate bool
	// Limiter, when not nil, counts and limits the connections of TCP endpoints' listeners,
	// with those of the HTTP and TLS listeners its owner wrapped in it.
	Limiter *netx.Limiter
	// IdleTimeout is the longest a public HTTP or HTTPS keep-alive connection waits for its next
	// request; zero is DefaultIdleTimeout. Idle connections hold connection slots, so it is
	// short, like ngrok's edge's.
	IdleTimeout time.Duration
	// HeaderTimeout is the longest a public client may take to send its first bytes: an HTTP
	// request's head, or a TLS ClientHello and, where the listener terminates TLS, the rest of
	// the handshake; zero is DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// TCPIdle is the longest a connection carried as it is (TCP endpoints and edges, TLS
	// endpoints and edges) may move no byte either way before both its sides are closed; zero
	// is DefaultTCPIdleTimeout.
	TCPIdle time.Duration
	// BodyTimeout is the longest a public HTTP or HTTPS request's body may wait for its client's
	// next bytes (an idle bound between reads, not a bound on the whole body: a long upload that
	// keeps moving is never cut); past it, the request ends with 408 (BodyTimeoutCode) if no
	// answer went out yet, its stream to the agent is closed, and so is the connection. Zero is
	// DefaultBodyTimeout.
	BodyTimeout time.Duration
	// Logger receives connection-level events; nil discards.
	Logger *slog.Logger
	// Recorder, when not nil, is told of every public request and connection an account's
	// endpoint or edge took (the console's traffic inspector).
	Recorder Recorder
}

// dialTimeout bounds opening the stream to an agent (or the connection to a backend) for a
// public connection; maxHeaderBytes bounds an HTTP request's head.
const (
	dialTimeout    = 10 * time.Second
	maxHeaderBytes = 64 << 10
)

// Defaults of the public listeners' timeouts: every read from the internet is bounded in time.
const (
	// DefaultIdleTimeout is Config.IdleTimeout's default: a browser reuses a connection for
	// the requests of one page, and a connection idle longer holds a slot another client may
	// need.
	DefaultIdleTimeout = 5 * time.Second
	// DefaultHeaderTimeout is Config.HeaderTimeout's default.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultTCPIdleTimeout is Config.TCPIdle's default, ngrok's idle timeout of TCP and
	// TLS endpoints: a carried connection whose two sides have both gone quiet (an agent that
	// never answers, a client that vanished without a FIN) ends instead of holding its slot
	// for ever.
	DefaultTCPIdleTimeout = 5 * time.Minute
	// DefaultBodyTimeout is Config.BodyTimeout's default, nginx's client_body_timeout: long
	// enough for any client that is still sending, short enough that a stalled one soon gives
	// back its connection, handler and agent stream.
	DefaultBodyTimeout = 60 * time.Second
)

// Server owns the public listeners and everything they started.
type Server struct {
	cfg     Config
	log     *slog.Logger
	http    *http.Server // plain HTTP
	https   *http.Server // HTTP over TLS connections handed over by the SNI router
	tlsBase *tls.Config  // the listener's TLS: certificates by SNI, TLS 1.2+, h2 and http/1.1
	// served is servedCertificate, as the one func value TLS connections' ConnInfo holds.
	served  func(serverName string) *x509.Certificate
	tlsConf *tls.Config // tlsBase with each HTTPS edge's own policy
	handed  *chanListener
	proxy   *proxy
	acme    ACMEAnswers

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	// tcpLns are the open TCP endpoints' and edges' listeners (also in lns).
	tcpLns map[*tcpListener]struct{}
	// conns are the raw connections carried here; true while one is routing (routing.go).
	conns map[net.Conn]bool
	// routing counts the conns true there.
	routing int
	// httpRouting counts the public HTTP requests routing (routing.go): one atomic add at a
	// request's start and end, and two more if it has a stream to an agent.
	httpRouting atomic.Int64
	// tcpEdges are the TCP edges' ports, open and failing (tcpedges.go).
	tcpEdges tcpEdges

	// httpRequests and httpsRequests count the requests the HTTP and the TLS listener received
	// (see Requests): one atomic add per request.
	httpRequests, httpsRequests atomic.Uint64
	// errors counts the requests this server's listeners answered with one of edgeplane's
	// error pages, by code (Errors); each connection's ConnInfo points to it, so that
	// enforce.ErrorPage finds it from the request it answers.
	errorPages enforce.ErrorCounter
	// connSeq numbers the public connections; the numbers key this server's proxy's pool of
	// agent streams, so they need be unique only within the server.
	connSeq atomic.Uint64
}

// New builds the public listeners' server; Serve* start them.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cfg.Logger, lns: map[net.Listener]struct{}{}, tcpLns: map[*tcpListener]struct{}{}, conns: map[net.Conn]bool{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.proxy = newProxy(s)
	s.served = s.servedCertificate // made once: every TLS connection's ConnInfo points to it
	s.tlsBase = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, err := cfg.Certificate(hello.ServerName)
			if errors.Is(err, ErrUnknownName) {
				// No certificate and no error: crypto/tls then ends the handshake with the
				// unrecognized_name alert (RFC 6066), which tells the client the name is not
				// served here; an error would be sent as internal_error.
				return nil, nil
			}
			return cert, err
		},
	}
	// An HTTPS edge's or https endpoint's own TLS policy (minimum version, client certificates)
	// applies to the connections of its hosts.
	s.tlsConf = s.tlsBase.Clone()
	s.tlsConf.GetConfigForClient = s.configForClient
	s.http = s.newHTTPServer("http")
	s.https = s.newHTTPServer("https")
	s.https.TLSConfig = s.tlsConf
	s.handed = newChanListener()
	go func() { _ = s.https.Serve(s.handed) }()
	return s
}

func (s *Server) newHTTPServer(proto string) *http.Server {
	count := &s.httpRequests
	if proto == "https" {
		count = &s.httpsRequests
	}
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			count.Add(1)
			s.httpRouting.Add(1)
			defer s.httpRouting.Add(-1) // also when the proxy aborts the handler (http.ErrAbortHandler)
			if r.Body != nil && r.Body != http.NoBody {
				// The body's reads are bounded from its head on, also when no read of it goes
				// through the proxy's idle bound (dialInfo.bound): a request answered here (an
				// unknown host, a refusal, a redirect) has what is left of its body read by
				// net/http before or after its answer, which would otherwise wait on a client
				// that stopped sending for ever.
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout()))
			}
			if rec := s.cfg.Recorder; rec != nil {
				s.proxy.record(w, r, proto, rec)
				return
			}
			s.proxy.serve(w, r, proto, nil)
		}),
		ReadHeaderTimeout: s.headerTimeout(),
		IdleTimeout:       s.idleTimeout(),
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       s.connContext,
		// The limiter keeps the idle connections, the ones it closes first to admit a new
		// client when the public listeners are at their connection limit.
		ConnState: netx.ConnState,
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// Requests returns how many HTTP requests the public listeners have received so far: on the
// HTTP listener, and on the TLS listener (HTTPS endpoints and edges, HTTP/1.1 and HTTP/2). Every
// request counts, whatever it was answered with; for metrics, read when they are scraped.
func (s *Server) Requests() (overHTTP, overTLS uint64) {
	return s.httpRequests.Load(), s.httpsRequests.Load()
}

// Errors returns how many public requests this server's listeners answered with one of
// edgeplane's error pages, by ngrok error code ("ERR_NGROK_3200"): the answers of the
// listeners' own stages, the endpoints' and edges' modules and the proxy, not an
// ngrok-error-code header an agent's upstream sent. For metrics, read when they are scraped.
func (s *Server) Errors() map[string]uint64 { return s.errorPages.Counts() }

func (s *Server) idleTimeout() time.Duration {
	if s.cfg.IdleTimeout > 0 {
		return s.cfg.IdleTimeout
	}
	return DefaultIdleTimeout
}

func (s *Server) bodyTimeout() time.Duration {
	if s.cfg.BodyTimeout > 0 {
		return s.cfg.BodyTimeout
	}
	return DefaultBodyTimeout
}

func (s *Server) headerTimeout() time.Duration {
	if s.cfg.HeaderTimeout > 0 {
		return s.cfg.HeaderTimeout
	}
	return DefaultHeaderTimeout
}

// pipe carries a public connection pub to up until both are done, or both have been quiet for
// the TCP idle timeout, and returns the bytes carried from the client (in) and to it (out).
func (s *Server) pipe(pub, up net.Conn) (in, out int64) {
	idle := s.cfg.TCPIdle
	if idle <= 0 {
		idle = DefaultTCPIdleTimeout
	}
	return netx.Pipe(pub, up, idle)
}

// ServeHTTP serves plain HTTP on ln until Close. Every connection's bytes are counted, for the
// conn.bytes_* variables: its endpoint is known only once its first request's Host is read, and
// two atomic additions per read and write cost nothing measurable beside the system calls
// (docs/performance.md).
func (s *Server) ServeHTTP(ln net.Listener) error {
	if !s.track(ln) {
		return net.ErrClosed
	}
	err := s.http.Serve(countingListener{ln})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeTLS serves the TLS listener on ln until Close: each connection's ClientHello is read,
// then it is passed through to a TLS endpoint or terminated for an HTTPS one.
func (s *Server) ServeTLS(ln net.Listener) error {
	if !s.track(ln) {
		return net.ErrClosed
	}
	err := netx.Serve(ln, s.routeTLS)
	if s.isClosed() {
		return nil
	}
	return err
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ln.Close()
		return false
	}
	s.lns[ln] = struct{}{}
	return true
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// trackConn records a raw connection the server carries itself (TLS passthrough, TCP), so Close
// can end it, as routing until it has its stream (routing.go); it returns a function that
// forgets it.
func (s *Server) trackConn(c net.Conn) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	s.conns[c] = true
	s.routing++
	return func() {
		s.mu.Lock()
		if s.conns[c] {
			s.routing--
		}
		delete(s.conns, c)
		s.mu.Unlock()
	}, true
}

// Close stops every listener and ends the connections in progress.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.stopTCPEdgesLocked()
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.handed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.http.Shutdown(ctx)
	_ = s.https.Shutdown(ctx)
	_ = s.http.Close()
	_ = s.https.Close()
	s.proxy.close()
	return nil
}

// chanListener is a net.Listener fed with connections the SNI router accepted for HTTPS.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) hand(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// plan returns the current routing plan (nil when there is none).
func (s *Server) plan() *plan.Plan {
	if s.cfg.Plan == nil {
		return nil
	}
	return s.cfg.Plan()
}

// SetPlan sets where the routing plan comes from; call it before serving starts.
func (s *Server) SetPlan(f func() *plan.Plan) { s.cfg.Plan = f }

// SetLabeled sets how tunnel-group backends find tunnels; call it before serving starts.
func (s *Server) SetLabeled(f func(account string, labels map[string]string) []Endpoint) {
	s.cfg.Labeled = f
}

// SetLookup sets how endpoints are found; call it before serving starts.
func (s *Server) SetLookup(f func(proto, host string) Endpoint) { s.cfg.Lookup = f }

// Drain stops accepting public connections and waits, until ctx ends, for the HTTP requests in
// flight to be answered: a keep-alive connection is closed once idle, and a response in progress
// finishes (with "Connection: close"). It is the first half of a handover, whose successor
// accepts on the same sockets; connections the server carries itself (TLS passthrough, TCP)
// and upgraded ones go on until their agent's session ends. Close ends the rest. From then on
// no TCP edge port is opened here, by a plan change or a retry: a port this process took
// would be one its successor cannot bind until this process exits.
func (s *Server) Drain(ctx context.Context) {
	s.mu.Lock()
	s.stopTCPEdgesLocked() // the successor opens the ports the plan still wants
	for ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range []*http.Server{s.http, s.https} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = srv.Shutdown(ctx)
		}()
	}
	wg.Wait()
	s.CloseIdleUpstreams()
}

// CloseIdleUpstreams closes the streams to agents kept open for a next request: during a drain
// they would hold their agents' sessions open for requests that will not come.
func (s *Server) CloseIdleUpstreams() { s.proxy.close() }
