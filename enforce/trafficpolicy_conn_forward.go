package enforce

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// forward-internal in on_tcp_connect hands a connection to an internal endpoint of the policy's
// own account of the same protocol as the policy's endpoint or edge (ngrok refuses any other,
// its ERR_NGROK_3502). On a tcp or tls endpoint or edge the target is an internal tcp or tls
// endpoint (an agent's bind on tcp://name.internal:PORT or tls://name.internal[:PORT]), and
// the listener carries the connection, before any byte of it is read, to that endpoint
// (through its own connection stages) instead of the policy's endpoint or backend. On an http
// or https endpoint or an HTTPS edge's route the target is an internal http or https endpoint,
// and every request of the connection is served by it (its stages and traffic policy), none by
// the policy's own phases or upstream. No later action of the phase runs. An endpoint that is
// not online (another account's of the same name is never found), a URL that does not render
// to an internal one of the endpoint's protocol, or a connection already handed on
// maxForwardHops times is a failure: on_error halt (the default) closes the connection,
// continue lets the next actions run. A literal URL of the other protocol refuses the stage.

// forwardFunc picks the internal endpoint of a forward-internal action for a connection with
// vars: the target when it is online, else nil and whether the phase goes on (continue).
type forwardFunc func(vars map[string]any) (target *trafficpolicy.Target, goOn bool)

// newConnForward makes a forward-internal action of on_tcp_connect ready.
// family is the protocol of the policy's endpoint or edge: "http" or "tcp" (tcp and tls).
func newConnForward(a *trafficpolicy.Action, c *trafficpolicy.ForwardInternalConfig, o PolicyOptions, family string) (forwardFunc, error) {
	if o.Internal == nil {
		return nil, fmt.Errorf("%s: forward-internal needs the data plane's internal endpoints, which this stage was built without", a.Path)
	}
	if o.Endpoint == nil || o.Endpoint.Account == "" {
		return nil, fmt.Errorf("%s: forward-internal needs the policy's account, which this stage was built without", a.Path)
	}
	if !trafficpolicy.Interpolates(c.URL) {
		t, err := trafficpolicy.InternalURL(a.Phase, c.URL)
		if err == nil {
			err = trafficpolicy.SameProtocol(family, t)
		}
		if err != nil {
			return nil, fmt.Errorf("%s.config.url: %w", a.Path, err)
		}
	}
	url, err := trafficpolicy.CompileTemplate(a.Phase, c.URL)
	if err != nil {
		return nil, fmt.Errorf("%s.config.url: %v", a.Path, err)
	}
	internal, endpoint, halt := o.Internal, o.Endpoint, c.Halts()
	return func(vars map[string]any) (*trafficpolicy.Target, bool) {
		s, err := url.Render(vars)
		if err != nil {
			return nil, !halt
		}
		target, err := trafficpolicy.InternalURL(a.Phase, s)
		if err == nil {
			err = trafficpolicy.SameProtocol(family, target)
		}
		if err != nil || !internal.InternalOnline(endpoint.Account, target) {
			return nil, !halt
		}
		return &target, true
	}, nil
}

// connect runs the on_tcp_connect rules of an http or https endpoint's (or an HTTPS edge
// route's) policy for a request of the connection: the endpoint is known only once a request
// names it (its Host, or the SNI that chose its certificate), so the phase runs on each request
// before on_http_request, with the connection's variables as they were when it was established.
// Its verdict is the same for every request of a connection unless a rule reads time.now.
func (tp *TrafficPolicy) connect(r *http.Request) ConnVerdict {
	server := ""
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		server = a.String()
	}
	start := time.Now()
	var conn trafficpolicy.Conn
	if c := connOf(r); c != nil {
		start = c.Start
		if tp.conn.ja4 {
			conn = c // conn.tls.ja4_fingerprint, which the listener took for a policy reading it
		}
	}
	sni := ""
	if r.TLS != nil {
		sni = r.TLS.ServerName
	}
	return tp.conn.decide(r.RemoteAddr, server, sni, start, conn)
}

// serveForwarded serves a request of a connection that forward-internal in on_tcp_connect (v)
// handed to an internal http or https endpoint: that endpoint's stages and traffic policy serve
// it, and neither the policy's own HTTP phases nor its upstream see it. An endpoint gone since
// the phase found it, or a connection handed on maxForwardHops times already, closes the
// connection unanswered, as a halting failure in the phase does.
func (tp *TrafficPolicy) serveForwarded(w http.ResponseWriter, r *http.Request, v ConnVerdict) {
	hops, _ := r.Context().Value(forwardHopsKey{}).(int)
	if hops >= maxForwardHops {
		closeConnection(r)
	}
	fr := r.WithContext(context.WithValue(r.Context(), forwardHopsKey{}, hops+1))
	if !tp.opts.Internal.ServeInternal(w, fr, v.Account, *v.Forward) {
		closeConnection(r)
	}
}

// forwarded reports whether a forward-internal action handed r to the endpoint serving it: no
// new connection was made, so that endpoint's on_tcp_connect rules do not run (as ngrok
// documents for internal http and https endpoints).
func forwarded(r *http.Request) bool {
	hops, _ := r.Context().Value(forwardHopsKey{}).(int)
	return hops > 0
}
