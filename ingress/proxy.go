package ingress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/internal/outbound"
	"github.com/edgeplane/edgeplane/plan"
)

// proxy carries public HTTP requests to agents as HTTP/1.1 over proxy streams. Streams are kept
// alive and reused, but only for the public connection that opened them: the stream's header
// names one client address, so a stream is never shared between clients.
type proxy struct {
	s    *Server
	rp   *httputil.ReverseProxy
	tr   *http.Transport  // static backends: connections of net/http's Transport
	st   *streamTransport // agents: synchronous exchanges on proxy streams
	bulk *bulkCopies      // the large buffers large answers are copied with
}

type ctxKey int

const (
	dialKey ctxKey = iota
)

// connContext gives each public connection a number, part of the key of its agent streams,
// records the connection for the limiter (netx.ClaimContext), and records it, when it was
// accepted and how to find the certificate it was served for the traffic policies of its
// requests (close-connection, conn.ts.start, conn.tls.server.*), the server's counter of error
// pages (enforce.ErrorPage counts its requests' answers there), and the body timeout, which a
// module that bounded its own read of a body puts back for the rest of it.
func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	info := &enforce.ConnInfo{ID: s.connSeq.Add(1), Conn: c, Start: time.Now(), Errors: &s.errorPages, BodyIdle: s.bodyTimeout()}
	if _, ok := c.(*tls.Conn); ok {
		info.Served = s.served
	}
	return netx.ConnContext(enforce.WithConn(ctx, info), c)
}

// servedCertificate is the certificate the HTTPS listener presents for serverName, as its
// handshakes choose it (configForClient, then the base's GetCertificate): an https endpoint's
// own, else the host's; nil when it serves none. A policy reading conn.tls.server.* looks it up
// when it reads it, so a certificate renewed since the handshake shows the renewed one.
func (s *Server) servedCertificate(serverName string) *x509.Certificate {
	var cert *tls.Certificate
	if _, ep := s.httpsRoute(strings.ToLower(strings.TrimSuffix(serverName, "."))); ep != nil {
		// The endpoint's certificate for this name; a terminate-tls rule whose expressions read
		// the client's address is judged here without it, and then its certificate is not shown.
		if ct, err := ep.TLSFor(plan.Hello{ServerName: serverName}); err == nil {
			cert = ct.Cert
		}
	}
	if cert == nil {
		c, err := s.cfg.Certificate(serverName)
		if err != nil {
			return nil
		}
		cert = c
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return nil
	}
	if cert.Leaf != nil {
		return cert.Leaf
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

// dialInfo is what the transport needs to open a connection for a request, and the protocol
// the public client used (for X-Forwarded-Proto).
type dialInfo struct {
	dial  func(ctx context.Context) (net.Conn, error)
	proto string
	// once closes the connection after the request (target.once).
	once bool
	// static: the target is a static backend, carried by net/http's Transport.
	static bool
	// rp is the proxy's ReverseProxy for this request alone, lending copies' buffers: its
	// BufferPool cannot otherwise know the answer whose body it copies (bulkcopy.go). Both are
	// part of this allocation, made for every request anyway.
	rp     httputil.ReverseProxy
	copies copyPool
	// body is the request's body under the body timeout (bound), when it has one.
	body idleBody
	// routing is the server's count of HTTP requests routing, which the request leaves once it
	// has its stream (routed); carried tells it did, until the proxy has answered (routing.go).
	routing *atomic.Int64
	carried bool
}

// Drainer is what an Endpoint of another replica that is draining after a handover also has:
// a connection kept open to its agent between requests is a stream that holds the agent's
// session, and with it the agent, on the draining replica until its drain timeout, out of
// reach of its successor. While Draining, each request forwarded to it closes its connection
// once answered (the next one is dialled anew, and finds the agent wherever it is then).
type Drainer interface {
	Draining() bool
}

// draining reports whether ep is a Drainer that is draining.
func draining(ep Endpoint) bool {
	d, ok := ep.(Drainer)
	return ok && d.Draining()
}

func newProxy(s *Server) *proxy {
	p := &proxy{s: s, st: newStreamTransport(), bulk: newBulkCopies()}
	p.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			info, _ := ctx.Value(dialKey).(*dialInfo)
			if info == nil {
				return nil, errors.New("ingress: no endpoint for the request")
			}
			return info.dial(ctx)
		},
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		DisableCompression:     true,
		ResponseHeaderTimeout:  0, // an upstream may think as long as it likes; the client can leave
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:      p.rewrite,
		Transport:    p,
		ErrorHandler: p.fail,
		ErrorLog:     nil,
		BufferPool:   copyBuffers{},
	}
	return p
}

// copyBuffers lends the ReverseProxy the buffers it copies response bodies with. Without a
// pool it allocates (and zeroes) 32 KiB for every response, the largest allocation of a
// request's path.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return make([]byte, 32<<10) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().([]byte) }

func (copyBuffers) Put(b []byte) {
	if cap(b) == 32<<10 {
		// Pooling the slice boxes its 24-byte header: one small allocation instead of 32 KiB.
		copyBufferPool.Put(b[:cap(b)])
	}
}

// RoundTrip carries a request to its target: an agent's over a proxy stream (streamTransport),
// a static backend's through net/http's Transport, whose connections to servers on the
// network it keeps as before.
// The answer's declared length decides the buffer its body is copied with (bulkcopy.go).
func (p *proxy) RoundTrip(r *http.Request) (*http.Response, error) {
	info, _ := r.Context().Value(dialKey).(*dialInfo)
	var resp *http.Response
	var err error
	if info != nil && info.static {
		info.routed() // a static backend is no agent's: no drain retires it
		resp, err = p.tr.RoundTrip(r)
	} else {
		resp, err = p.st.RoundTrip(r)
	}
	if err == nil && info != nil {
		info.copies.sawAnswer(resp)
	}
	return resp, err
}

func (p *proxy) close() {
	p.tr.CloseIdleConnections()
	p.st.CloseIdleConnections()
}

// serve routes one public request by its Host to an online endpoint of proto. The client's own
// ngrok-auth-* and ngrok-mtls-* headers (and the X-Forwarded-* ones spelled with underscores)
// are removed first, in every spelling an upstream reads as the same name, on every route and
// endpoint: only a sign-in or mutual TLS module sets them, and an upstream that trusts them must
// never be told a name of the client's choosing, including on a route whose module is not (or
// not yet) in the plan. x is the request's record when the inspector is on, nil otherwise.
func (p *proxy) serve(w http.ResponseWriter, r *http.Request, proto string, x *exchange) {
	enforce.StripClientHeaders(r.Header)
	host := strings.ToLower(hostOnly(r.Host))
	if x != nil {
		x.entry.Host = host
	}
	if proto == "http" && p.s.answerHTTP01(w, r, host) {
		return
	}
	if r.TLS != nil && r.TLS.ServerName != "" && !strings.EqualFold(r.TLS.ServerName, host) {
		enforce.ErrorPage(w, r, http.StatusMisdirectedRequest, 3200, "The Host header does not match the TLS server name.")
		return
	}
	var ep Endpoint
	if proto == "https" {
		e, hep := p.s.httpsRoute(host)
		if e != nil {
			x.atEdge(e.Account, e.ID, "") // a request refused at the account's share is the account's too
			if release, ok := p.claim(w, r, e.Account); ok {
				defer release()
				p.serveEdge(w, r, e, x)
			}
			return
		}
		ep = hep
	} else {
		ep = p.s.endpoint(proto, host)
	}
	if ep == nil && proto == "http" {
		if e, hep := p.s.httpsRoute(host); e != nil || hep != nil {
			if hep != nil {
				x.atEndpoint(hep, "https")
			} else {
				x.atEdge(e.Account, e.ID, "")
			}
			// An https endpoint or HTTPS edge is served over TLS only; send the browser there.
			http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusPermanentRedirect)
			return
		}
	}
	if ep == nil {
		enforce.ErrorPage(w, r, http.StatusNotFound, 3200, fmt.Sprintf("The endpoint %s://%s is offline.", proto, host))
		return
	}
	x.atEndpoint(ep, proto)
	release, ok := p.claim(w, r, ep.AccountID())
	if !ok {
		return
	}
	defer release()
	ep.HTTPHandler(func() http.Handler { return ep.Chain().Handler(p.endpointFinal(ep, proto)) }).ServeHTTP(w, r)
}

// claim counts the request's connection against the account whose endpoint or edge it was
// routed to, until release (the handler's end); at the account's share of the public
// connections (--public-max-connections-per-account) it answers 429 with ERR_NGROK_714
// instead, and the connection, idle after the answer, holds no protected slot.
func (p *proxy) claim(w http.ResponseWriter, r *http.Request, account string) (release func(), ok bool) {
	if release, ok := netx.ClaimRequest(r.Context(), account); ok {
		return release, true
	}
	enforce.ErrorPage(w, r, http.StatusTooManyRequests, 714,
		"The account serving this endpoint has reached its limit of simultaneous public connections on this server (--public-max-connections-per-account).")
	return nil, false
}

// endpointFinal is the handler behind an endpoint's stages: carry the request to the agent.
// It is built once per bind (Endpoint.HTTPHandler); what varies per request comes from it.
func (p *proxy) endpointFinal(ep Endpoint, proto string) http.Handler {
	key := "e" + hashKey(ep.ID())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clientAddr := r.RemoteAddr
		dial := func(ctx context.Context) (net.Conn, error) { return ep.Dial(ctx, clientAddr, proto, "", false) }
		if p.s.carryRaw(r, dial) {
			return // websocket_tcp_converter: the websocket was carried as a raw stream
		}
		p.forward(w, r, proto, target{key: key, dial: dial, once: draining(ep), account: ep.AccountID()})
	})
}

// forward carries a request to a target's connection, through the transport's pool: a
// connection is reused only by the public connection that opened it (its header names that
// client).
func (p *proxy) forward(w http.ResponseWriter, r *http.Request, proto string, t target) {
	var connID uint64
	if c := enforce.ConnOf(r.Context()); c != nil {
		connID = c.ID
	}
	ctx := &dialContext{Context: r.Context(), info: dialInfo{dial: t.dial, proto: proto, once: t.once, static: t.static,
		rp: *p.rp, copies: copyPool{copies: p.bulk, account: t.account}, routing: &p.s.httpRouting}}
	info := &ctx.info
	defer info.answered() // also when the proxy aborts the handler (http.ErrAbortHandler)
	info.rp.BufferPool = &info.copies
	r = r.WithContext(ctx)
	info.bound(w, r, p.s.bodyTimeout())
	r.URL.Host = t.key + ".c" + strconv.FormatUint(connID, 10)
	info.rp.ServeHTTP(w, r)
}

// dialContext is a request's context carrying its dialInfo under dialKey, as context.WithValue
// would, in one allocation instead of two. Done, Err and Deadline are the parent's, so
// cancellation passes through it as through WithValue's context.
type dialContext struct {
	context.Context
	info dialInfo
}

// Value returns the request's dialInfo for dialKey, else the parent's value.
func (c *dialContext) Value(key any) any {
	if key == any(dialKey) {
		return &c.info
	}
	return c.Context.Value(key)
}

// rewrite prepares the request for the agent: the Host the client sent, and the X-Forwarded
// headers ngrok adds, then the edits of a request_headers stage the request passed (which may
// remove or replace those). For is appended to what the client sent, a chain of proxies each
// adding the address it saw; Proto and Host are set to what edgeplane saw, replacing the
// client's, as httputil.ProxyRequest.SetXForwarded does: frameworks that trust the proxy read
// the first value, and a client must not choose it (a plain-HTTP request passing for https).
func (p *proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = pr.In.URL.Host
	pr.Out.Host = pr.In.Host
	info := pr.In.Context().Value(dialKey).(*dialInfo)
	// The transport closes the connection after the response, and tells the agent so.
	pr.Out.Close = info.once
	// The three values share one array, one allocation instead of three; each slice's capacity
	// is its length, so a request_headers stage adding to one copies it rather than writing
	// into the next.
	v := new([3]string)
	v[0], v[1], v[2] = forwardedFor(pr.In.Header.Values("X-Forwarded-For"), clientIP(pr.In.RemoteAddr)), info.proto, pr.In.Host
	h := pr.Out.Header
	h["X-Forwarded-For"], h["X-Forwarded-Proto"], h["X-Forwarded-Host"] = v[0:1:1], v[1:2:2], v[2:3:3]
	if _, ok := pr.In.Header["User-Agent"]; !ok {
		pr.Out.Header["User-Agent"] = nil // never invent a Go user agent
	}
	enforce.EditOutbound(pr.In.Context(), pr.Out.Header) // request_headers may edit the X-Forwarded ones
}

// forwardedFor is the X-Forwarded-For value sent on: ip appended to what the client sent.
func forwardedFor(prior []string, ip string) string {
	if len(prior) > 0 {
		return strings.Join(prior, ", ") + ", " + ip
	}
	return ip
}

// clientIP is the address of a client's ip:port as X-Forwarded-For gives it ("" if it is not
// one): an IPv4-mapped IPv6 address as IPv4. An IPv4 address is the text before the port as it
// is, since net renders RemoteAddr as netip does, which saves a copy per request.
func clientIP(remoteAddr string) string {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return ""
	}
	if ap.Addr().Is4() {
		return remoteAddr[:strings.LastIndexByte(remoteAddr, ':')]
	}
	return ap.Addr().Unmap().String()
}

// fail answers a request the agent (or a static backend) could not carry: 502 with
// ERR_NGROK_8012, naming the class of a static backend's address the outbound guard refused;
// 408 when it was the client's body that stopped arriving (bodyTimedOut).
func (p *proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	if info, _ := r.Context().Value(dialKey).(*dialInfo); info != nil && info.body.timedOut() {
		// Over HTTP/1 the failed read also cancelled the request's context: this comes first.
		p.bodyTimedOut(w, r)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client left
	}
	p.s.log.Debug("proxy to agent failed", "host", r.Host, "err", err)
	if offline(err) {
		enforce.ErrorPage(w, r, http.StatusNotFound, 3200, fmt.Sprintf("The endpoint %s is offline.", r.Host))
		return
	}
	if refused, ok := outbound.Refused(err); ok {
		enforce.ErrorPage(w, r, http.StatusBadGateway, 8012, "The backend's address was refused: "+refused.Reason()+".")
		return
	}
	enforce.ErrorPage(w, r, http.StatusBadGateway, 8012, "The agent's tunnel failed while carrying this request: "+err.Error())
}

// hostOnly strips the port from a Host header.
func hostOnly(h string) string {
	if strings.IndexByte(h, ':') < 0 {
		// No port (net.SplitHostPort would fail, allocating its error, on every such request).
		return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}
