// Package enforce turns module configuration into stages that act on live traffic: one file per
// module, each building its stage once (when a plan or a bind is made), never per request. A
// Chain runs the stages of one endpoint or route in order; a stage that refuses writes the
// refusal itself and stops the chain.
package enforce

import (
	"fmt"
	"html"
	"net/http"
	"net/netip"
)

// Stage is one module acting on HTTP requests: Wrap returns the handler that runs the module in
// front of next. A stage may refuse (answer the request itself and not call next), change the
// request before calling next, or wrap the ResponseWriter to act on the response. Wrap is called
// once, when a plan or a bind is built, never per request.
type Stage interface {
	Name() string
	Wrap(next http.Handler) http.Handler
}

// ConnStage is a module that decides on a whole connection before any byte is carried (TCP and
// TLS endpoints, and the first check of HTTP ones).
type ConnStage interface {
	Name() string
	AllowConn(client netip.Addr) bool
}

// Chain is the stages of one endpoint or route, in the order they run.
type Chain struct {
	Conn []ConnStage
	HTTP []Stage
}

// ConnReads is what a chain's traffic policies read of their connections that the listener
// provides only when asked, deciding once per connection after its ClientHello: the byte
// counts (conn.bytes_in, conn.bytes_out) and the ClientHello's JA4 fingerprint
// (conn.tls.ja4_fingerprint). The other connections pay for neither.
type ConnReads struct{ Bytes, JA4 bool }

// ConnReads reports what the chain's stages read of their connections (ConnReads): the
// listener then counts the bytes, or fingerprints the ClientHello, of the connections it
// serves the chain on, and no others'.
func (c *Chain) ConnReads() ConnReads {
	var out ConnReads
	if c == nil {
		return out
	}
	for _, s := range c.HTTP {
		if cr, ok := s.(interface{ ConnReads() ConnReads }); ok {
			r := cr.ConnReads()
			out.Bytes, out.JA4 = out.Bytes || r.Bytes, out.JA4 || r.JA4
		}
	}
	return out
}

// AllowConn reports whether every connection stage admits client.
func (c *Chain) AllowConn(client netip.Addr) bool {
	if c == nil {
		return true
	}
	for _, s := range c.Conn {
		if !s.AllowConn(client) {
			return false
		}
	}
	return true
}

// Handler returns final behind the chain's stages: the connection stages first (refused HTTP
// gets 403 ERR_NGROK_3205), then the HTTP stages in order. Build it once and reuse it.
func (c *Chain) Handler(final http.Handler) http.Handler {
	if c == nil {
		return final
	}
	h := final
	for i := len(c.HTTP) - 1; i >= 0; i-- {
		h = c.HTTP[i].Wrap(h)
	}
	if len(c.Conn) == 0 {
		return h
	}
	inner := h
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.AllowConn(ClientAddr(r)) {
			ErrorPage(w, r, http.StatusForbidden, 3205, "Access to this endpoint is denied by its IP restriction.")
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// ClientAddr is the public client's address of a request (the listener's view of the peer).
func ClientAddr(r *http.Request) netip.Addr {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return ap.Addr().Unmap()
}

// ErrorPage answers a public request with one of edgeplane's error pages: the status, a small
// HTML page naming the ngrok error code, and the code in an ngrok-error-code header, the way
// ngrok's edge answers (clients and monitors match on the header). Each answer is counted by its
// code on the ErrorCounter of the listeners that accepted r's connection (ConnInfo.Errors), so
// code must be a constant of the caller: the codes are a metric's labels.
func ErrorPage(w http.ResponseWriter, r *http.Request, status, code int, msg string) {
	countAnswer(r, code)
	c := errorCode(code)
	h := w.Header()
	h.Set("ngrok-error-code", c)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>%d %s</title></head><body>\n<h1>%s</h1>\n<p>%s</p>\n</body></html>\n",
		status, http.StatusText(status), c, html.EscapeString(msg))
}
