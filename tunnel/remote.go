package tunnel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/peer"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/store"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// Endpoint is an online endpoint or labeled tunnel as the public listeners use it: a tunnel of
// this replica's agents (*Tunnel) or of another replica's (remoteTunnel). It has the methods of
// ingress.Endpoint, which cmd hands the listeners.
type Endpoint interface {
	ID() string
	AccountID() string
	Chain() *enforce.Chain
	HTTPHandler(build func() http.Handler) http.Handler
	DecideConn(c net.Conn, hello *enforce.TLSHello) enforce.ConnVerdict
	Passthrough() bool
	TLSFor(h plan.Hello) (plan.ConnTLS, error)
	Dial(ctx context.Context, clientAddr, proto, edgeType string, passthrough bool) (net.Conn, error)
}

// remoteTunnel is a tunnel held by another replica, read from its row: its modules are built
// here from the row's options, by the code a bind runs (buildModules), so a public connection
// meets them on the replica it arrived at; Dial carries the connection over the link to the
// holding replica, which opens the agent's stream with the same proxy header.
type remoteTunnel struct {
	row     store.ReplicaTunnel // without its options
	replica string
	link    *peer.Link
	mods    bindModules
	// broken says why the row's options could not be opened or built here (a module this
	// replica cannot apply, a key it does not have): the endpoint fails closed instead of being
	// served without them.
	broken string
	// gw finds the bind again when its agent has moved to another replica (moved.go); nil in
	// tests that build a remote tunnel alone.
	gw *Gateway
	// draining is set while the holding replica drains after a handover (the directory sets
	// it from the replica's row): see Draining.
	draining atomic.Bool
	handler  struct {
		once sync.Once
		h    http.Handler
	}
}

// Draining reports that the replica holding the tunnel is draining after a handover: its agent
// is about to reconnect to the successor, which it does only once its session has no stream
// open. The public listeners therefore close a connection they forward to it after each
// request rather than keep it for the next one (ingress's Drainer): a kept connection is an
// open stream, and would hold the agent on the draining replica, out of the successor's reach
// (a successor has the same link address as its predecessor, so no link reaches the
// predecessor from it), until the drain timeout.
func (r *remoteTunnel) Draining() bool { return r.draining.Load() }

// newRemoteTunnel builds the endpoint of a row of replica; the row carries its options. env is
// this replica's for the modules' builders (its Endpoint is filled in here).
func newRemoteTunnel(row store.ReplicaTunnel, replica string, link *peer.Link, env plan.BindEnv) *remoteTunnel {
	r := &remoteTunnel{row: row, replica: replica, link: link}
	r.row.Opts = nil // kept only as the modules they make
	switch {
	case row.OptsErr != nil:
		r.broken = "its options cannot be opened on this replica: " + row.OptsErr.Error()
	case row.Proto != "":
		endpoint := &trafficpolicy.Endpoint{Account: row.AccountID, Protocol: row.Proto}
		url, host, addr := row.Proto+"://"+row.Name, row.Name, ""
		if h, port, ok := ep.SplitInternalEndpointKey(row.Name); ok {
			url, host = internalURL(row.Proto, h, port), h
		} else if row.Proto == "tcp" {
			host, addr = "", row.Name
		}
		fillEndpoint(endpoint, row.ID, url, host, addr)
		if _, mods, berr := buildModules(row.Proto, row.Opts, plan.BindEnv{Env: env.Env, Endpoint: endpoint, Log: env.Log}); berr != nil {
			r.broken = "its options cannot be applied on this replica: " + berr.msg
		} else {
			r.mods = mods
		}
	}
	return r
}

// ID names the tunnel for the public listeners' connection reuse and logs: its row id, which
// no local bind id can equal by accident.
func (r *remoteTunnel) ID() string { return "peer/" + r.row.ID }

func (r *remoteTunnel) AccountID() string { return r.row.AccountID }

// Chain is the stages of the bind's modules; for a row whose options could not be built, one
// stage answering 503 ERR_NGROK_3210.
func (r *remoteTunnel) Chain() *enforce.Chain {
	if r.broken != "" {
		return &enforce.Chain{HTTP: []enforce.Stage{failClosed(r.broken)}}
	}
	return r.mods.chain
}

func (r *remoteTunnel) HTTPHandler(build func() http.Handler) http.Handler {
	r.handler.once.Do(func() { r.handler.h = build() })
	return r.handler.h
}

// AllowConn runs the connection stages as Tunnel.AllowConn does; a broken row admits nothing.
func (r *remoteTunnel) AllowConn(c net.Conn, hello *enforce.TLSHello) bool {
	v := r.DecideConn(c, hello)
	return v.Allow && v.Forward == nil
}

// DecideConn runs the connection stages as Tunnel.DecideConn does; a broken row admits nothing.
func (r *remoteTunnel) DecideConn(c net.Conn, hello *enforce.TLSHello) enforce.ConnVerdict {
	if r.broken != "" {
		return enforce.ConnVerdict{}
	}
	client, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	if !r.mods.chain.AllowConn(client.Addr().Unmap()) {
		return enforce.ConnVerdict{}
	}
	return r.mods.policy.Decide(c.RemoteAddr(), c.LocalAddr(), hello)
}

func (r *remoteTunnel) Passthrough() bool { return r.mods.passthrough }

// TLSFor is the bind's TLS settings for a connection, as Tunnel.TLSFor.
func (r *remoteTunnel) TLSFor(h plan.Hello) (plan.ConnTLS, error) { return r.mods.tls.connTLS(h) }

// Dial opens a link stream to the holding replica, which opens the agent's stream for it with
// this proxy header. Its errors wrap peer.ErrNoTunnel (the agent has gone since the row was
// read), peer.ErrAgentDial or peer.ErrUnavailable (the replica could not be asked).
//
// When the holder no longer has the tunnel, or cannot be reached, the bind may be on its way to
// another replica (a rolling restart, a replica lost): the stream goes to where it is online
// again, within movedWait (moved.go).
func (r *remoteTunnel) Dial(ctx context.Context, clientAddr, proto, edgeType string, passthrough bool) (net.Conn, error) {
	c, err := r.dial(ctx, clientAddr, proto, edgeType, passthrough)
	if err == nil || r.gw == nil || !(errors.Is(err, peer.ErrNoTunnel) || errors.Is(err, peer.ErrUnavailable)) {
		return c, err
	}
	switch next := r.gw.relocate(ctx, r).(type) {
	case *Tunnel:
		return next.Dial(ctx, clientAddr, proto, edgeType, passthrough)
	case *remoteTunnel:
		return next.dial(ctx, clientAddr, proto, edgeType, passthrough)
	}
	if ctx.Err() == nil && !r.gw.Online(r.row.Proto, r.row.Name) {
		return nil, offlineError{err}
	}
	return nil, err
}

// offlineError is a forwarded connection's failure once its endpoint is online nowhere: its
// agent left and did not come back in time. The public listeners answer it as they answer an
// offline endpoint (ingress.Endpoint's Dial).
type offlineError struct{ error }

// EndpointOffline reports that the endpoint is offline.
func (offlineError) EndpointOffline() bool { return true }

func (e offlineError) Unwrap() error { return e.error }

func (r *remoteTunnel) dial(ctx context.Context, clientAddr, proto, edgeType string, passthrough bool) (net.Conn, error) {
	return r.link.Dial(ctx, r.replica, "", peer.Request{TunnelID: r.row.ID, ClientAddr: clientAddr, Proto: proto,
		EdgeType: edgeType, Passthrough: passthrough})
}

// failClosed is the stage of a remote bind whose modules this replica cannot build.
type failClosed string

func (f failClosed) Name() string { return "unavailable" }

func (f failClosed) Wrap(http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		enforce.ErrorPage(w, r, http.StatusServiceUnavailable, 3210,
			"This endpoint's agent is connected to another edgeplane replica, and "+string(f)+"; it refuses the traffic rather than serve it without them.")
	})
}
