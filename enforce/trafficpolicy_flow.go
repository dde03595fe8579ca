package enforce

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The actions that act on the policy itself or on the connection rather than on the request:
// close-connection, set-vars and log, in every phase that has them.

// ConnInfo is what the data plane knows of a public connection beyond its addresses: the
// connection (close-connection closes it) and when it was accepted (conn.ts.start). The public
// listeners put it in the context of each connection's requests (WithConn).
type ConnInfo struct {
	// ID numbers the connection, for the listener's own use.
	ID    uint64
	Conn  net.Conn
	Start time.Time
	// Served looks up the certificate the connection's listener presents for a server name
	// (conn.tls.server.*); nil on a listener without TLS.
	Served func(serverName string) *x509.Certificate
	// Errors counts the answers ErrorPage gives the connection's requests: the counter of the
	// listeners that accepted it, so that each set of listeners counts only its own; nil counts
	// nothing.
	Errors *ErrorCounter
	// BodyIdle is the longest the listener lets a read of a request body wait for the client
	// (0: no bound). A module that reads part of a body under its own bound puts this one back
	// when it is done, so that what is left of the body is never read without a bound.
	BodyIdle time.Duration
}

// ByteCounter is a public connection that counts its bytes (the listener wraps the
// connections whose policy reads conn.bytes_in or conn.bytes_out in one, Chain.ConnReads).
type ByteCounter interface {
	// Bytes are the bytes read from and written to the client so far.
	Bytes() (in, out int64)
}

// Bytes finds the ByteCounter under the connection (through NetConn: a TLS connection's is
// underneath it), for the conn.bytes_* variables; counted is false when there is none.
func (c *ConnInfo) Bytes() (in, out int64, counted bool) {
	conn := c.Conn
	for conn != nil {
		if bc, ok := conn.(ByteCounter); ok {
			in, out = bc.Bytes()
			return in, out, true
		}
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		conn = u.NetConn()
	}
	return 0, 0, false
}

// Fingerprinted is a public connection whose ClientHello the listener fingerprinted (it does so
// for the connections whose policy reads conn.tls.ja4_fingerprint).
type Fingerprinted interface {
	// JA4 is the JA4 fingerprint of the connection's ClientHello; ok is false when the listener
	// did not fingerprint it.
	JA4() (fingerprint string, ok bool)
}

// JA4 finds the fingerprint under the connection (through NetConn, as Bytes does), for
// conn.tls.ja4_fingerprint: "" on a connection without TLS, and known false on a TLS one the
// listener did not fingerprint.
func (c *ConnInfo) JA4() (fingerprint string, known bool) {
	conn := c.Conn
	if _, ok := conn.(*tls.Conn); !ok {
		return "", conn != nil // no TLS: nothing to fingerprint
	}
	for conn != nil {
		if f, ok := conn.(Fingerprinted); ok {
			return f.JA4()
		}
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		conn = u.NetConn()
	}
	return "", false
}

// ServedCertificate is the certificate presented on the connection for serverName, nil when
// none: the connection variables read it through trafficpolicy.Conn.
func (c *ConnInfo) ServedCertificate(serverName string) *x509.Certificate {
	if c.Served == nil {
		return nil
	}
	return c.Served(serverName)
}

type connInfoKey struct{}

// WithConn records a connection's ConnInfo in the context of its requests.
func WithConn(ctx context.Context, c *ConnInfo) context.Context {
	return context.WithValue(ctx, connInfoKey{}, c)
}

// ConnOf returns the ConnInfo of the connection whose context ctx is, or nil.
func ConnOf(ctx context.Context) *ConnInfo {
	c, _ := ctx.Value(connInfoKey{}).(*ConnInfo)
	return c
}

func connOf(r *http.Request) *ConnInfo { return ConnOf(r.Context()) }

// closeConnection closes the request's connection without an answer: the connection itself
// when the listener recorded it (over HTTP/2 every stream of it ends), then the handler is
// aborted, which for HTTP/1 closes the connection too.
func closeConnection(r *http.Request) {
	if c := connOf(r); c != nil && c.Conn != nil {
		_ = c.Conn.Close()
	}
	panic(http.ErrAbortHandler)
}

func init() {
	registerRequestAction("close-connection", func(*trafficpolicy.Action, any, *TrafficPolicy) (requestFunc, error) {
		return func(_ http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request {
			closeConnection(r)
			return nil
		}, nil
	})
	registerResponseAction("close-connection", func(*trafficpolicy.Action, any, *TrafficPolicy) (responseFunc, error) {
		return func(w *policyWriter, _ map[string]any) (bool, error) {
			closeConnection(w.req)
			return true, nil
		}, nil
	})
	registerRequestAction("set-vars", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (requestFunc, error) {
		set, err := compileSetVars(a, cfg.(*trafficpolicy.SetVarsConfig))
		if err != nil {
			return nil, err
		}
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			if err := set(vars()); err != nil {
				policyFailed(w, r, err)
				return nil
			}
			return r
		}, nil
	})
	registerResponseAction("set-vars", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		set, err := compileSetVars(a, cfg.(*trafficpolicy.SetVarsConfig))
		if err != nil {
			return nil, err
		}
		return func(_ *policyWriter, vars map[string]any) (bool, error) { return false, set(vars) }, nil
	})
	registerRequestAction("log", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		rec, err := compileLog(a, cfg.(*trafficpolicy.LogConfig), tp.opts, tp.results)
		if err != nil {
			return nil, err
		}
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			if err := rec(vars()); err != nil {
				policyFailed(w, r, err)
				return nil
			}
			return r
		}, nil
	})
	registerResponseAction("log", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (responseFunc, error) {
		rec, err := compileLog(a, cfg.(*trafficpolicy.LogConfig), tp.opts, tp.results)
		if err != nil {
			return nil, err
		}
		return func(_ *policyWriter, vars map[string]any) (bool, error) { return false, rec(vars) }, nil
	})
}

// compileSetVars makes set-vars ready: each value's strings compiled as interpolations (a
// string that is exactly one ${…} keeps its expression's type), set in order so that a later
// value may read an earlier one.
func compileSetVars(a *trafficpolicy.Action, c *trafficpolicy.SetVarsConfig) (func(map[string]any) error, error) {
	type entry struct {
		name  string
		value func(map[string]any) (any, error)
	}
	var entries []entry
	for i, m := range c.Vars {
		for name, v := range m {
			val, err := compileValue(a.Phase, v)
			if err != nil {
				return nil, fmt.Errorf("%s.config.vars[%d].%s: %v", a.Path, i, name, err)
			}
			entries = append(entries, entry{name, val})
		}
	}
	return func(vars map[string]any) error {
		for _, e := range entries {
			v, err := e.value(vars)
			if err != nil {
				return fmt.Errorf("%s: %s: %v", a.Path, e.name, err)
			}
			trafficpolicy.SetVar(vars, e.name, v)
		}
		return nil
	}, nil
}

// compileValue compiles a configuration value of any shape (a mapping, a list, a scalar) whose
// strings interpolate CEL: evaluating it gives the value with each string evaluated
// (Template.Value).
func compileValue(phase string, v any) (func(map[string]any) (any, error), error) {
	switch v := v.(type) {
	case string:
		if !trafficpolicy.Interpolates(v) {
			return func(map[string]any) (any, error) { return v, nil }, nil
		}
		t, err := trafficpolicy.CompileTemplate(phase, v)
		if err != nil {
			return nil, err
		}
		return t.Value, nil
	case map[string]any:
		keys := slices.Sorted(maps.Keys(v))
		vals := make([]func(map[string]any) (any, error), len(keys))
		for i, k := range keys {
			f, err := compileValue(phase, v[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %v", k, err)
			}
			vals[i] = f
		}
		return func(vars map[string]any) (any, error) {
			out := make(map[string]any, len(keys))
			for i, k := range keys {
				x, err := vals[i](vars)
				if err != nil {
					return nil, err
				}
				out[k] = x
			}
			return out, nil
		}, nil
	case []any:
		vals := make([]func(map[string]any) (any, error), len(v))
		for i, e := range v {
			f, err := compileValue(phase, e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %v", i, err)
			}
			vals[i] = f
		}
		return func(vars map[string]any) (any, error) {
			out := make([]any, len(vals))
			for i, f := range vals {
				x, err := f(vars)
				if err != nil {
					return nil, err
				}
				out[i] = x
			}
			return out, nil
		}, nil
	}
	return func(map[string]any) (any, error) { return v, nil }, nil
}

// compileLog makes the log action ready: its metadata evaluated and handed to the data plane's
// policy log with the endpoint and account of the stage, and recorded as
// actions.ngrok.log.metadata when some rule reads it.
func compileLog(a *trafficpolicy.Action, c *trafficpolicy.LogConfig, o PolicyOptions, results bool) (func(map[string]any) error, error) {
	if o.Log == nil {
		return nil, fmt.Errorf("%s: the log action needs the data plane's policy log, which this stage was built without", a.Path)
	}
	meta, err := compileValue(a.Phase, c.Metadata)
	if err != nil {
		return nil, fmt.Errorf("%s.config.metadata.%v", a.Path, err)
	}
	phase, path, ep := a.Phase, a.Path, o.Endpoint
	return func(vars map[string]any) error {
		m, err := meta(vars)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		o.Log.Record(ep, phase, path, m.(map[string]any))
		if results {
			trafficpolicy.SetResult(vars, "log", map[string]any{"metadata": m})
		}
		return nil
	}, nil
}
